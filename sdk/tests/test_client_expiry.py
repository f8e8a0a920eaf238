"""A pin is never served past its expiry: at that instant the client serves the chain's
default by itself, even when the control plane cannot be reached, until the revert arrives."""

from __future__ import annotations

import logging
from typing import Any

from chainclient import ChainDocument, DefaultChain, Router, Step
from chainclient.testing import FakeClock, FakeProviders
from chainclient.types import parse_time

EXPIRES_AT = "2026-11-29T06:03:04.123Z"
EXPIRY = parse_time(EXPIRES_AT)
NORMAL = {
    "preset": "normal",
    "chain": [
        {"provider": "vendor_a", "model": "large", "timeout_ms": 20000},
        {"provider": "vendor_b", "model": "large", "timeout_ms": 15000},
    ],
    "marking": {"degraded": False, "note": "all good"},
}


def pin(document: Any, version: int = 7, **overrides: Any) -> dict[str, Any]:
    """A pin on vendor_b that expires at EXPIRES_AT and falls back to NORMAL."""
    fields = {
        "is_default": False,
        "expires_at": EXPIRES_AT,
        "default": NORMAL,
        "marking": {"degraded": True, "note": "vendor_a is down"},
    }
    fields.update(overrides)
    return document(version, "pin_secondary", **fields)


def clocked(client: Any, at: float) -> FakeClock:
    """Give ``client`` a wall clock that moves only when the test says so."""
    clock = FakeClock(start=at)
    client._clock = clock.now
    return clock


def test_the_pin_is_served_until_its_expiry_and_the_default_from_that_millisecond(
    make_client, refused_url, write_state_file, document
):
    write_state_file(pin(document))
    client = make_client(base_url=refused_url)  # never started: nothing but the clock moves
    clock = clocked(client, EXPIRY - 0.001)

    before = client.current()
    clock.advance(0.001)
    after = client.current()

    assert (before.preset, before.is_default, before.expires_at) == ("pin_secondary", False, EXPIRES_AT)
    assert [str(step) for step in after.chain] == ["vendor_a/large", "vendor_b/large"]
    assert after.chain[1].timeout_ms == 15000
    assert after.preset == "normal"
    assert after.is_default is True
    assert after.marking == {"degraded": False, "note": "all good"}
    assert after.expires_at is None
    assert (after.name, after.epoch, after.version, after.source) == ("chat", 0, 7, "disk")
    assert after.updated_by == "chainclient"
    assert after.reason == (
        "pin pin_secondary (v7) expired at 2026-11-29T06:03:04.123Z; serving the default "
        "normal until the control plane's revert arrives"
    )


def test_an_expired_pin_gives_way_to_the_default_while_the_control_plane_is_down(
    make_client, control_plane, eventually, document
):
    control_plane.reply_document(pin(document))
    control_plane.always(500)
    client = make_client()
    clock = clocked(client, EXPIRY - 60)
    client.start()
    eventually(lambda: client.health()["consecutive_failures"] >= 2)
    assert client.current().preset == "pin_secondary"

    clock.advance(60)

    assert client.current().preset == "normal"
    assert client.current().source == "live"
    assert client.current().version == 7


def test_without_a_default_in_the_document_the_compiled_in_steps_are_the_fallback(
    make_client, refused_url, write_state_file, document, default_steps
):
    older_server_pin = pin(document)
    del older_server_pin["default"]
    write_state_file(older_server_pin)
    client = make_client(base_url=refused_url)
    clocked(client, EXPIRY)

    current = client.current()

    assert list(current.chain) == default_steps
    assert current.preset == "compiled-default"
    assert current.is_default is True
    assert current.default is None


def test_current_hands_out_the_precomputed_default_and_never_logs(
    make_client, refused_url, write_state_file, document, caplog
):
    caplog.set_level(logging.DEBUG, logger="chainclient")
    write_state_file(pin(document))
    client = make_client(base_url=refused_url)
    clocked(client, EXPIRY + 1)
    caplog.clear()

    served = {id(client.current()) for _ in range(1000)}

    assert len(served) == 1  # derived once, when the pin was loaded; not per request
    assert caplog.records == []


def test_health_shows_the_expired_pin_and_the_expiry_is_logged_once(
    make_client, refused_url, write_state_file, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    write_state_file(pin(document))
    client = make_client(base_url=refused_url)
    clock = clocked(client, EXPIRY - 1)
    assert client.health()["expired_pin"] is None
    assert client.health()["preset"] == "pin_secondary"

    clock.advance(1)
    health = client.health()
    client.health()

    assert health["expired_pin"] == {"preset": "pin_secondary", "version": 7, "expires_at": EXPIRY}
    assert health["preset"] == "normal"
    assert health["version"] == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "chain chat: pin pin_secondary (v7) expired at 2026-11-29T06:03:04.123Z; serving the "
        "default normal until the control plane's revert arrives"
    ]


def test_the_poller_logs_a_pin_that_arrives_already_expired(make_client, control_plane, eventually, document, caplog):
    caplog.set_level(logging.INFO, logger="chainclient")
    # A lagging server that has not run its expiry sweep yet still serves the pin.
    control_plane.always_document(pin(document))
    client = make_client()
    clocked(client, EXPIRY + 5)
    client.start()

    eventually(lambda: any("expired at" in r.getMessage() for r in caplog.records))

    assert client.current().preset == "normal"
    assert len([r for r in caplog.records if "expired at" in r.getMessage()]) == 1


def test_the_control_planes_revert_replaces_the_expired_pin(make_client, control_plane, eventually, document):
    control_plane.publish(pin(document))
    client = make_client()
    clock = clocked(client, EXPIRY - 1)
    client.start()
    eventually(lambda: client.current().preset == "pin_secondary")
    clock.advance(2)
    assert client.current().updated_by == "chainclient"

    revert = document(
        8, "normal", default=NORMAL, updated_by="expire_pins", chain=NORMAL["chain"], reason="pin pin_secondary expired"
    )
    control_plane.publish(revert)
    eventually(lambda: client.current().version == 8)

    current = client.current()
    assert (current.preset, current.updated_by, current.reason) == (
        "normal",
        "expire_pins",
        "pin pin_secondary expired",
    )
    assert client.health()["expired_pin"] is None


def test_a_router_on_the_client_routes_to_the_defaults_head_after_the_expiry(
    make_client, refused_url, write_state_file, document, registry
):
    write_state_file(pin(document))
    client = make_client(base_url=refused_url)
    clock = clocked(client, EXPIRY - 1)
    fakes = FakeProviders().configure({"vendor_a": "ok", "vendor_b": "ok", "self_hosted": "ok"})
    router = Router(client, transports=fakes.transports, registry=registry)

    during = router.complete("hello")
    clock.advance(1)
    after = router.complete("hello")

    assert during.provider == "vendor_b"
    assert after.provider == "vendor_a"
    assert after.marking == {"degraded": False, "note": "all good"}
    assert fakes.attempts == ["vendor_b", "vendor_a"]


def test_a_document_built_by_hand_keeps_working_without_the_new_fields():
    document = ChainDocument(
        "chat", 3, "normal", True, (Step("vendor_a", "large", 20000),), {"degraded": False}, "alice", "why", None, None
    )

    assert (document.epoch, document.default, document.expires_at_s) == (0, None, None)
    assert DefaultChain("normal", document.chain).marking == {"degraded": False, "note": ""}
