"""Failover drills in the ChainClient: the document's ``drill`` (applied, or ignored when this
client cannot apply it, the document applied either way), whether this service takes part,
a drill that ends on its own with no control plane to say so, and the usage report's
``drill`` section (its counts, its cadence while the drill is active, its last report)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import Any

import pytest
import time_machine
from conftest import drill_json
from drill_vectors import empty_section

from chainclient import AllProvidersFailed, ChainDocument, Router, wire
from chainclient.drills import DrillRequest
from chainclient.snapshot import expired_pin
from chainclient.testing import FakeProviders
from chainclient.types import Drill
from chainclient.wire import drill_service_digest

OTHER_SERVICES_TOKEN_SHA256 = "f0f0b1bd4a4fe4c6ea8a5e1a5e4c3f3d4b3d9a39d5f0b4e0a2d8c1b4b7f0d5ba"


def token_sha256(token: str = "s3cret") -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def drill_sections(reports: list[Any]) -> list[dict[str, Any]]:
    return [body["drill"] for body in reports if isinstance(body, dict) and "drill" in body]


def transports() -> FakeProviders:
    return FakeProviders(providers=("vendor_a", "vendor_b", "self_hosted"))


# --- the document's drill -------------------------------------------------------------------------


def test_a_drill_is_parsed_with_its_instants_once_and_kept_as_received(document: Any, registry: Any) -> None:
    data = document(12, drill=drill_json(id=9, hop=1, fault="timeout", share_bp=1000, services=["ab" * 32]))

    parsed = ChainDocument.from_json(data, registry=registry)

    drill = parsed.drill
    assert drill is not None
    assert (drill.id, drill.hop, drill.fault, drill.share_bp, drill.services) == (9, 1, "timeout", 1000, ("ab" * 32,))
    assert drill.active(time.time())
    assert not drill.active(drill.ends_at_s) and drill.active(drill.starts_at_s)
    assert parsed.to_json()["drill"] == data["drill"]
    assert parsed.drill_ignored is None


def test_a_document_built_in_code_writes_its_drill_and_one_without_writes_none(document: Any, registry: Any) -> None:
    data = document(12, drill=drill_json())
    parsed = ChainDocument.from_json(data, registry=registry)
    rebuilt = dataclasses.replace(parsed, version=13)  # built in code: written from its fields

    assert rebuilt.to_json()["drill"] == data["drill"]
    assert "drill" not in dataclasses.replace(rebuilt, drill=None).to_json()
    assert "drill" not in ChainDocument.from_json(document(3), registry=registry).to_json()


def test_a_drill_of_the_chains_last_step_built_in_code_is_no_drill(document: Any, registry: Any) -> None:
    parsed = ChainDocument.from_json(document(12), registry=registry)
    last = Drill(7, len(parsed.chain), "server_error", 1000, (), "2026-12-06T07:00:00Z", "2026-12-06T07:15:00Z")

    built = dataclasses.replace(parsed, drill=last)

    assert built.drill is None
    assert built.drill_ignored == "drill.hop 2 is not a step of the chain but its last"


def test_an_expired_pins_default_carries_no_drill(document: Any, registry: Any, default_steps: Any) -> None:
    pin = ChainDocument.from_json(
        document(12, "pin_secondary", expires_at="2026-12-06T08:00:00Z", drill=drill_json()), registry=registry
    )

    assert pin.drill is not None
    assert expired_pin(pin, default_steps).drill is None


def test_a_drill_this_client_cannot_apply_is_logged_once_per_version_and_the_document_applied(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.publish(document(2, drill=drill_json(fault="fire_alarm")))
    client = make_client(report_usage=False).start()
    eventually(lambda: client.current().version == 2)
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 10)  # the same document, again and again

    control_plane.publish(document(3, drill=drill_json(fault="fire_alarm")))
    eventually(lambda: client.current().version == 3)
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 10)

    ignored = [r.getMessage() for r in caplog.records if "ignoring the failover drill" in r.getMessage()]
    assert ignored == [
        f"chain chat: ignoring the failover drill in v{version}: drill.fault 'fire_alarm' is not one this client "
        "knows; the document itself is applied"
        for version in (2, 3)
    ]
    assert client.current().drill is None
    assert client.health()["rejected"] == 0


def test_a_document_bringing_a_drill_is_logged_with_what_it_drills(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="chainclient")
    data = document(2, drill=drill_json(share_bp=1000))
    control_plane.publish(data)
    client = make_client(report_usage=False).start()
    eventually(lambda: client.current().version == 2)

    lines = [r.getMessage() for r in caplog.records if "carries failover drill" in r.getMessage()]
    assert lines == [
        "chain chat: v2 carries failover drill 7: hop 1 (vendor_b/large) fails with a server error (HTTP 500) for "
        f"10 % of requests, from {data['drill']['starts_at']} to {data['drill']['ends_at']}"
    ]


# --- taking part -------------------------------------------------------------------------------


def test_a_client_takes_part_in_a_drill_of_every_service_or_of_its_own(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(token="s3cret")
    mine = drill_service_digest(7, token_sha256("s3cret"))
    theirs = drill_service_digest(7, token_sha256("another"))
    digests: list[int] = []
    real = drill_service_digest
    monkeypatch.setattr("chainclient.drills.drill_service_digest", lambda i, h: digests.append(i) or real(i, h))

    def drill(services: tuple[str, ...], drill_id: int = 7) -> Drill:
        return Drill(drill_id, 1, "server_error", 1000, services, "2026-12-06T07:00:00Z", "2026-12-06T07:15:00Z")

    assert client.takes_part(drill(()))
    assert client.takes_part(drill((theirs, mine)))
    assert all(client.takes_part(drill((theirs, mine))) for _ in range(100))  # a new document, the same drill
    assert not client.takes_part(drill((theirs,), drill_id=8))
    assert not client.takes_part(drill((mine,), drill_id=8))  # the digest names the drill too
    assert digests == [7, 8, 8]


def test_a_client_without_a_token_takes_part_only_in_a_drill_of_every_service(make_client: Any) -> None:
    pytest.importorskip("cryptography")
    from document_signing import SigningKey

    client = make_client(token=None, published=True, trusted_keys=SigningKey.generate("k1").trusted())
    every = Drill(7, 1, "server_error", 1000, (), "2026-12-06T07:00:00Z", "2026-12-06T07:15:00Z")

    assert client.takes_part(every)
    assert not client.takes_part(dataclasses.replace(every, services=(drill_service_digest(7, token_sha256("")),)))


def test_a_drill_ends_on_its_own_with_no_control_plane(
    make_client: Any, write_state_file: Any, document: Any, refused_url: str
) -> None:
    data = document(4, drill=drill_json(starts_at="2026-12-06T07:00:00.000Z", ends_at="2026-12-06T07:15:00.000Z"))
    write_state_file(data)
    client = make_client(base_url=refused_url).start()  # nothing answers: the file's document is all it has
    fakes = transports()
    router = Router(client, transports=fakes.transports)

    with time_machine.travel("2026-12-06T07:14:59Z", tick=False):
        during = [router.complete("hi") for _ in range(4)]
    with time_machine.travel("2026-12-06T07:15:00Z", tick=False):
        after = [router.complete("hi") for _ in range(8)]

    assert client.current().drill is not None and client.current().source == "disk"
    assert [result.provider for result in during] == ["vendor_b", "vendor_b", "vendor_b", "self_hosted"]
    assert [result.provider for result in after] == ["vendor_b"] * 8
    assert all(a.drill is None for result in after for a in result.attempts)


# --- the usage report's drill section --------------------------------------------------------


@pytest.fixture
def drill_interval(monkeypatch: pytest.MonkeyPatch) -> float:
    """A drill's report interval short enough for a test (the cadence logic reads the wire)."""
    monkeypatch.setattr(wire, "DRILL_REPORT_INTERVAL_S", 0.2)
    return 0.2


def test_while_a_drill_is_active_a_client_reports_every_interval_even_with_nothing_counted(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, drill_interval: float
) -> None:
    control_plane.publish(document(2))
    # A usage interval of a minute: only the drill can make reports come this often.
    client = make_client(usage_interval=60).start()
    eventually(lambda: client.current().version == 2)
    assert control_plane.report_count() == 0

    control_plane.publish(document(3, drill=drill_json()))
    eventually(lambda: len(drill_sections(control_plane.accepted_reports())) >= 4)

    sections = drill_sections(control_plane.accepted_reports())
    assert sections[0] == empty_section(7)
    assert all(section == sections[0] for section in sections)


def test_a_drill_section_counts_what_the_routers_recorded_since_the_last_accepted_report(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, write_state_file: Any, drill_interval: float
) -> None:
    data = document(2, drill=drill_json())
    write_state_file(data)
    control_plane.publish(data)
    control_plane.reply_usage(503, {"error": {"code": "unavailable", "message": "db down"}})
    client = make_client(usage_interval=60)
    fakes = transports().configure({"self_hosted": 503})
    router = Router(client, transports=fakes.transports)
    outcomes: list[Any] = []
    for _ in range(8):
        try:
            outcomes.append(router.complete("hi").provider)
        except AllProvidersFailed as failed_request:
            outcomes.append(type(failed_request).__name__)
    client.start()

    eventually(lambda: sum(s["requests"] for s in drill_sections(control_plane.accepted_reports())) == 8)

    assert outcomes == ["vendor_b"] * 3 + ["AllProvidersFailed"] + ["vendor_b"] * 3 + ["AllProvidersFailed"]
    failed = control_plane.reports[0]
    assert failed.accepted is False and failed.body["drill"]["requests"] == 8  # put back, then sent again
    sections = drill_sections(control_plane.accepted_reports())
    totals = {key: sum(s[key] for s in sections) for key in ("requests", "drilled", "failed", "fallback_attempts")}
    totals["fallback_failures"] = sum(s["fallback_failures"] for s in sections)
    assert totals == {"requests": 8, "drilled": 2, "failed": 2, "fallback_attempts": 2, "fallback_failures": 2}
    assert [s["ended_on"] for s in sections if s["requests"]] == [{}]
    assert sum(sum(s["latency_ms"]["drilled"]) for s in sections) == 2
    assert sum(sum(s["latency_ms"]["other"]) for s in sections) == 6


def test_a_drilled_request_served_by_the_fallback_is_counted_on_its_step(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, write_state_file: Any, drill_interval: float
) -> None:
    data = document(2, drill=drill_json(share_bp=2500))
    write_state_file(data)
    control_plane.publish(data)
    client = make_client(usage_interval=60)
    router = Router(client, transports=transports().transports)
    for _ in range(8):
        router.complete("hi")
    client.start()

    eventually(lambda: sum(s["requests"] for s in drill_sections(control_plane.accepted_reports())) == 8)

    section = next(s for s in drill_sections(control_plane.accepted_reports()) if s["requests"])
    assert (section["drilled"], section["ended_on"], section["failed"]) == (2, {"2": 2}, 0)
    assert (section["fallback_attempts"], section["fallback_failures"]) == (2, 0)


@pytest.mark.slow  # some 2 s of real polls: ten drill intervals pass with no report due
def test_after_its_end_a_drill_gets_one_last_report_and_then_none(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, drill_interval: float
) -> None:
    data = document(2, drill=drill_json())
    control_plane.publish(data)
    client = make_client(usage_interval=60)
    wall = {"offset": 0.0}
    client._clock = lambda: time.time() + wall["offset"]
    client.start()
    eventually(lambda: len(drill_sections(control_plane.accepted_reports())) >= 2)

    # Its ends_at passes; the control plane still serves the document with it.
    wall["offset"] = 3600.0
    sent = len(drill_sections([report.body for report in control_plane.reports]))
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 40)  # some 2 s: ten drill intervals

    after = len(drill_sections([report.body for report in control_plane.reports])) - sent
    # The last one, and perhaps one already on its way when the clock moved: not one an interval.
    assert 1 <= after <= 2


@pytest.mark.slow  # some 2 s of real polls: ten drill intervals pass with no report due
def test_a_drill_taken_out_of_the_document_gets_its_last_report_at_once(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, drill_interval: float
) -> None:
    control_plane.publish(document(2, drill=drill_json()))
    client = make_client(usage_interval=60).start()
    eventually(lambda: len(drill_sections(control_plane.accepted_reports())) >= 1)

    control_plane.publish(document(3))  # the control plane ended it early
    eventually(lambda: client.current().version == 3)
    sent = len(drill_sections([report.body for report in control_plane.reports]))
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 40)

    assert 0 <= len(drill_sections([report.body for report in control_plane.reports])) - sent <= 1
    assert drill_sections(control_plane.accepted_reports())[-1]["id"] == 7


def test_a_client_not_taking_part_sends_no_drill_section(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, drill_interval: float
) -> None:
    control_plane.publish(
        document(2, drill=drill_json(services=[drill_service_digest(7, OTHER_SERVICES_TOKEN_SHA256)]))
    )
    client = make_client(usage_interval=0.1).start()
    eventually(lambda: client.current().version == 2)
    client.record_served("vendor_b")

    eventually(lambda: control_plane.accepted_reports())

    assert drill_sections(control_plane.accepted_reports()) == []


def test_with_report_usage_off_nothing_of_a_drill_is_counted(make_client: Any) -> None:
    client = make_client(report_usage=False)
    drill = Drill(7, 1, "server_error", 1000, (), "2026-12-06T07:00:00Z", "2026-12-06T07:15:00Z")

    client.record_drill(drill, DrillRequest(True, 2, None, 1, 0, 0.1))

    assert client._usage.drills.pending() == []
