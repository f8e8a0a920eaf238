"""The API of guarded pins on a controlled clock: select's "guard" (true, false, left out or null
as GUARD_PINS_BY_DEFAULT says, anything else a 400), the live pin's guard (GET .../guard, a 404
saying why when there is none) and switching it off (POST .../guard/off) by alice's on-call
session and a write token; who is refused; nothing written by a refusal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from presets import guards, services
from presets.models import GuardState, PinGuard, Selection

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
SELECT = "/api/v1/chains/chat/select"
GUARD = "/api/v1/chains/chat/guard"
OFF = "/api/v1/chains/chat/guard/off"
PIN = {"preset": "pin_secondary", "reason": "INC-1 vendor_a slow"}
SUMMARY = (
    "guarded until 2026-12-10T02:30:00Z: restores v1 normal if vendor_b/large does clearly worse "
    "than vendor_a/large did"
)
NOT_GUARDED = (
    "chat's live selection has no guard: its pin pin_secondary (v2) is not guarded: a pin is guarded when "
    "asked or by GUARD_PINS_BY_DEFAULT, and only when it changes the chain's head"
)


@pytest.fixture(autouse=True)
def clock(settings: Any) -> Iterator[Any]:
    settings.GUARD_BAKE_MINUTES = 30
    settings.GUARD_PINS_BY_DEFAULT = False
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def post(client: Client, url: str, body: object) -> Any:
    return client.post(url, body, content_type="application/json")


def error(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


def guarded_pin(**kwargs: Any) -> Selection:
    kwargs.setdefault("guard", True)
    return services.select_preset(chain="chat", actor="alice", **{**PIN, **kwargs})


def written() -> tuple[list[Any], int]:
    """What a refused request must leave as it was: the guards, the chain's versions."""
    return list(PinGuard.objects.order_by("pk").values()), Selection.history.count()


# --- select with a guard ----------------------------------------------------------------------


# (id, the body's "guard" (absent: left out), GUARD_PINS_BY_DEFAULT, guarded)
GUARD_CHOICES = [
    ("true", True, False, True),
    ("true-setting-on", True, True, True),
    ("false", False, False, False),
    ("false-setting-on", False, True, False),
    ("omitted", "absent", False, False),
    ("omitted-setting-on", "absent", True, True),
    ("null", None, False, False),
    ("null-setting-on", None, True, True),
]


@pytest.mark.parametrize(
    ("guard", "by_default", "guarded"), [c[1:] for c in GUARD_CHOICES], ids=[c[0] for c in GUARD_CHOICES]
)
def test_select_guards_the_pin_when_asked_or_as_the_setting_says(
    writer: Client, settings: Any, guard: Any, by_default: bool, guarded: bool
) -> None:
    settings.GUARD_PINS_BY_DEFAULT = by_default
    body = PIN if guard == "absent" else {**PIN, "guard": guard}
    response = post(writer, SELECT, body)
    assert response.status_code == 200, response.content
    made = PinGuard.objects.filter(chain__name="chat", pin_version=2)
    assert made.exists() is guarded
    if guarded:
        assert writer.get(GUARD).json()["summary"] == SUMMARY
    else:
        assert error(writer.get(GUARD), 404)["message"] == NOT_GUARDED


def test_the_select_answer_is_the_chain_document_guarded_or_not(writer: Client) -> None:
    guarded = post(writer, SELECT, {**PIN, "guard": True})
    assert guarded.status_code == 200
    document = writer.get("/api/v1/chains/chat")
    assert guarded.json() == document.json() and guarded["ETag"] == document["ETag"]
    post(writer, "/api/v1/chains/chat/revert", {"reason": "back"})
    unguarded = post(writer, SELECT, {**PIN, "guard": False}).json()
    assert set(unguarded) == set(guarded.json())  # no field about the guard: the SDK parses it
    assert (unguarded["version"], unguarded["preset"]) == (4, "pin_secondary")


@pytest.mark.parametrize(
    "value", ["true", "yes", 1, 0, [], {"on": True}], ids=["text", "yes", "1", "0", "list", "object"]
)
def test_a_guard_that_is_not_a_boolean_is_a_400_at_the_field_and_writes_nothing(oncall: Client, value: Any) -> None:
    before = written()
    refused = error(post(oncall, SELECT, {**PIN, "guard": value}))
    assert refused["code"] == "validation_error"
    assert refused["message"] == "guard: Must be a valid boolean.", refused
    assert "guard" in refused["details"]["fields"]
    assert written() == before


def test_a_pin_that_keeps_the_head_gets_no_guard_even_when_asked(writer: Client) -> None:
    # drop_vendor_b keeps vendor_a/large at the head: nothing for the fleet to compare.
    response = post(writer, SELECT, {**PIN, "preset": "drop_vendor_b", "guard": True})
    assert response.status_code == 200
    assert not PinGuard.objects.exists()
    assert error(writer.get(GUARD), 404)["message"] == NOT_GUARDED.replace("pin_secondary", "drop_vendor_b")


# --- reading the guard ------------------------------------------------------------------------


def test_the_live_pins_guard_reads_in_full_for_a_viewer_and_a_read_token(viewer: Client, reader: Client) -> None:
    guarded_pin()
    expected = {
        "chain": "chat",
        "pin_version": 2,
        "state": "watching",
        "state_reason": "",
        "pinned_at": "2026-12-10T02:00:00.000Z",
        "bake_until": "2026-12-10T02:30:00.000Z",
        "restores": {"version": 1, "preset": "normal"},
        "new_head": {"provider": "vendor_b", "model": "large"},
        "old_head": {"provider": "vendor_a", "model": "large"},
        "baseline": None,
        "evidence": {},
        "acted_version": None,
        "summary": SUMMARY,
    }
    for client in (viewer, reader):
        response = client.get(GUARD)
        assert response.status_code == 200, response.content
        assert response.json() == expected
        assert response["Cache-Control"] == "no-cache"


def test_an_extended_pin_keeps_its_guard(writer: Client) -> None:
    guarded_pin()
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="bob", reason="longer")
    assert writer.get(GUARD).json()["pin_version"] == 2


def test_a_guard_that_passed_reads_with_why_and_its_baseline(writer: Client) -> None:
    guard = PinGuard.objects.get(pin_version=guarded_pin().version)
    figures = {"attempts": 320, "errors": 0, "error_rate": 0.0, "p95_ms": 500, "instances": 4}
    guards.note(guard.pk, baseline=figures)
    guards.settle(guard.pk, state=GuardState.PASSED, why="its bake window ended at 02:30 without cause to act")
    read = writer.get(GUARD).json()
    assert (read["state"], read["baseline"]) == ("passed", figures)
    assert read["summary"] == "guard passed: its bake window ended at 02:30 without cause to act"


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("default", "chat's live selection has no guard: v1 serves its default preset normal; only a pin is guarded"),
        ("unguarded", NOT_GUARDED),
        (
            "reverted",
            "chat's live selection has no guard: v3 serves its default preset normal; only a pin is guarded; "
            "the last guard (on v2) ended: its pin is no longer live",
        ),
        (
            "acted",
            "chat's live selection has no guard: v3 serves its default preset normal; only a pin is guarded; "
            "the last guard (on v2) acted: restored normal as v3: guard: vendor_b/large did worse",
        ),
        ("expired", "chat's live selection has no guard: v3 serves its default preset normal"),
    ],
)
def test_without_a_guard_on_the_live_pin_the_guard_is_a_404_saying_why(
    reader: Client, clock: Any, setup: str, words: str
) -> None:
    if setup == "unguarded":
        guarded_pin(guard=False)
    elif setup == "reverted":
        guard = PinGuard.objects.get(pin_version=guarded_pin().version)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-1 resolved")
        guards.settle(guard.pk, state=GuardState.ENDED, why="its pin is no longer live")
    elif setup == "acted":
        guard = PinGuard.objects.get(pin_version=guarded_pin().version)
        guards.restore(guard=guard.pk, reason="guard: vendor_b/large did worse", evidence={})
    elif setup == "expired":
        guarded_pin(expires_at=timedelta(minutes=10))
        clock.move_to(T0 + timedelta(minutes=11))  # the read reverts it, as every read does
    refused = error(reader.get(GUARD), 404)
    assert refused["code"] == "not_found"
    assert refused["message"].startswith(words), refused["message"]
    assert refused["details"]["chain"] == "chat"


def test_an_unknown_chain_has_no_guard_to_read_or_switch_off(writer: Client) -> None:
    assert error(writer.get("/api/v1/chains/nope/guard"), 404)["message"] == "unknown chain 'nope'"
    assert error(post(writer, "/api/v1/chains/nope/guard/off", {"reason": "r"}), 404)["message"] == (
        "unknown chain 'nope'"
    )


# --- switching it off -------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "actor"), [("oncall", "alice"), ("writer", "token:deployer")])
def test_an_oncall_engineer_or_a_write_token_switches_the_guard_off(
    request: pytest.FixtureRequest, who: str, actor: str
) -> None:
    client = request.getfixturevalue(who)
    guarded_pin()
    response = post(client, OFF, {"reason": "vendor_b is expected to be slow tonight"})
    assert response.status_code == 200, response.content
    off = response.json()
    assert (off["state"], off["state_reason"]) == (
        "off",
        f"switched off by {actor}: vendor_b is expected to be slow tonight",
    )
    assert off["summary"] == f"guard off: switched off by {actor}: vendor_b is expected to be slow tonight"
    assert client.get(GUARD).json() == off  # still the live pin's guard, off
    assert PinGuard.objects.get().state == GuardState.OFF
    assert Selection.objects.get(chain__name="chat").version == 2  # what the chain serves is unchanged


def test_a_guard_that_passed_can_still_be_switched_off(writer: Client) -> None:
    guard = PinGuard.objects.get(pin_version=guarded_pin().version)
    guards.settle(guard.pk, state=GuardState.PASSED, why="its bake window ended")
    assert post(writer, OFF, {"reason": "no more watching"}).json()["state"] == "off"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "reason: This field is required."),
        ({"reason": "   "}, "reason: is required: say why"),
        ({"reason": 7}, "reason: Not a valid string."),
        ({"reason": "x" * 501}, "reason: is 501 characters; keep it to 500"),
    ],
    ids=["missing", "blank", "a-number", "too-long"],
)
def test_switching_off_needs_a_reason(oncall: Client, body: dict[str, Any], words: str) -> None:
    guarded_pin()
    before = written()
    refused = error(post(oncall, OFF, body))
    assert refused["code"] == "validation_error"
    assert refused["message"].startswith(words), refused["message"]
    assert written() == before


def test_switching_off_twice_or_without_a_guard_is_refused(writer: Client) -> None:
    refused = error(post(writer, OFF, {"reason": "r"}))
    assert refused["message"] == "chain: chat serves its default (v1): no pin, no guard to switch off"
    assert refused["details"] == {"field": "chain"}
    guarded_pin()
    assert post(writer, OFF, {"reason": "first"}).status_code == 200
    before = written()
    again = error(post(writer, OFF, {"reason": "again"}))
    assert again["message"] == "chain: chat's live pin (v2) has no guard on to switch off"
    assert written() == before
    assert writer.get(GUARD).json()["state_reason"] == "switched off by token:deployer: first"


def test_a_viewer_and_a_read_token_read_the_guard_but_cannot_switch_it_off(viewer: Client, reader: Client) -> None:
    guarded_pin()
    before = written()
    for client in (viewer, reader):
        assert client.get(GUARD).status_code == 200
        refused = error(post(client, OFF, {"reason": "r"}), 403)
        assert refused["code"] == "forbidden"
        assert "needs a write-scope token or the on-call role" in refused["message"]
        refused = error(post(client, SELECT, {**PIN, "preset": "local_only", "guard": True}), 403)
        assert refused["code"] == "forbidden"
    assert written() == before
    assert PinGuard.objects.get().state == GuardState.WATCHING


def test_without_credentials_the_guard_endpoints_answer_401(client: Client) -> None:
    guarded_pin()
    assert error(client.get(GUARD), 401)["code"] == "unauthorized"
    assert error(post(client, OFF, {"reason": "r"}), 401)["code"] == "unauthorized"
