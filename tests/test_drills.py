"""Failover drills' domain (presets/drills.py, audit/drills.py) on a controlled clock: the
refusals of a start, the document that carries a drill and the history of its start and end,
a change that takes it out, planned and recurring drills, the fleet's reports, the stop
conditions, the verdict, the alert, and the report."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import override_settings

from audit import drills as fleet_drills
from audit.models import Alert, AlertKind, FleetInstance
from presets import drills, services
from presets.exceptions import Conflict, InvalidInput
from presets.models import Chain, Drill, DrillState, Selection, ServiceToken, Verdict
from presets.wire import LATENCY_BOUNDS_MS, drill_service_digest
from tests.conftest import make_token

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 1, 0, tzinfo=UTC)
BUCKETS = len(LATENCY_BOUNDS_MS) + 1


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def start(**kw: Any) -> Drill:
    values: dict[str, Any] = {
        "chain": "chat",
        "hop": 1,
        "fault": "server_error",
        "share": 10,
        "reason": "quarterly drill",
        "actor": "alice",
    }
    values.update(kw)
    return fleet_drills.start_drill(**values)


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset", "drill").get(chain__name=chain)


def report(drill: Drill, client: str = "svc/a", *, token: str = "svc-a", **counts: Any) -> bool:
    chain = Chain.objects.get(name="chat")
    now = counts.pop("now", datetime.now(UTC))
    section = fleet_drills.Section(id=drill.pk, **counts)
    taken = fleet_drills.record(chain=chain, token=token, client=client, section=section, now=now)
    fleet_drills.check_stop(drill=drill.pk, now=now)
    return taken


# --- starting ------------------------------------------------------------------------------------


def test_a_drill_started_now_is_in_the_document_with_its_version_and_history() -> None:
    before = live()
    drill = start()
    after = live()
    assert after.version == before.version + 1
    assert after.action == "drill" and after.updated_by == "alice"
    assert after.preset_id == before.preset_id and after.steps == before.steps
    assert "drill" in after.reason and "quarterly drill" in after.reason
    document = after.to_document()
    assert document["drill"] == {
        "id": drill.pk,
        "hop": 1,
        "fault": "server_error",
        "share_bp": 1000,
        "services": [],
        "starts_at": "2026-12-10T01:00:00.000Z",
        "ends_at": "2026-12-10T01:15:00.000Z",
    }
    drill.refresh_from_db()
    assert (drill.state, drill.verdict, drill.started_version) == ("running", "running", after.version)
    assert drill.preset is not None and drill.preset.name == "normal"


def test_services_are_named_by_digests_of_their_tokens_never_by_their_hashes() -> None:
    raw = make_token("checkout", "read")
    drill = start(services=["checkout"])
    document = live().to_document()
    expected = drill_service_digest(drill.pk, hashlib.sha256(raw.encode()).hexdigest())
    assert document["drill"]["services"] == [expected]
    assert hashlib.sha256(raw.encode()).hexdigest() not in str(document)  # the stored hash: never


def test_services_whose_tokens_do_not_read_the_chain_are_refused_and_a_repeat_leaves_them_out(
    settings: Any, clock: Any
) -> None:
    """A token of another environment, or bound to other chains, never reads the drill's
    document: naming its service would drill nobody there, so it is refused in words."""
    settings.ENVIRONMENTS = ["staging", "production"]
    make_token("staging-checkout", "read", environment="staging")
    make_token("search-only", "read", chains=["search"])
    make_token("checkout", "read")
    version = live().version
    for name, words in [
        ("staging-checkout", "this token is for the staging environment, not production"),
        ("search-only", "this token reads only search in production, not chat"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            start(services=["checkout", name])
        assert refused.value.field == "services"
        assert refused.value.message.startswith(
            f"services: {name} would never take part: its token does not read chat ("
        )
        assert words in refused.value.message
    assert live().version == version and not Drill.objects.exists()

    make_token("billing", "read")
    first = start(services=["checkout", "billing"], minutes=10, repeat_days=7)
    assert len(first.service_digests) == 2
    ServiceToken.objects.filter(name="checkout").update(environment="staging")  # moved since
    clock.move_to(T0 + timedelta(minutes=11))
    fleet_drills.run_drills()
    second = Drill.objects.exclude(pk=first.pk).get()
    assert second.services == ["billing"] and len(second.service_digests) == 1

    # None of its services reads the chain any more: not repeated (an empty list would drill
    # every service).
    ServiceToken.objects.filter(name="billing").update(chains=["search"])
    clock.move_to(second.ends_at + timedelta(minutes=1))
    fleet_drills.run_drills()
    assert Drill.objects.count() == 2


@pytest.mark.parametrize(
    ("field", "values", "words"),
    [
        ("hop", {"hop": 3}, "nothing to fall back to"),
        ("hop", {"hop": 0}, "from 1 to 8"),
        ("fault", {"fault": "meteor"}, "server_error"),
        ("share", {"share": 30}, "0.1 % to 25 %"),
        ("share", {"share": 0.05}, "0.1 % to 25 %"),
        ("minutes", {"minutes": 61}, "from 1 to 60"),
        ("services", {"services": ["nobody"]}, "no live token named nobody"),
        ("reason", {"reason": " "}, "required"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    field: str, values: dict[str, Any], words: str
) -> None:
    version = live().version
    with pytest.raises(InvalidInput) as refused:
        start(**values)
    assert refused.value.field == field and words in refused.value.message
    assert live().version == version and not Drill.objects.exists()


def test_a_drill_is_refused_while_the_chain_is_pinned_or_a_provider_alert_is_open() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="incident")
    with pytest.raises(Conflict) as refused:
        start()
    assert "never runs while the chain is pinned" in refused.value.message
    services.revert_to_default(chain="chat", actor="alice", reason="over")
    chain = Chain.objects.get(name="chat")
    Alert.objects.create(
        kind=AlertKind.PROVIDER_FAILING, chain=chain, version=1, subject="vendor_b/large", message="x", details={}
    )
    with pytest.raises(Conflict) as refused:
        start()
    assert "provider alert on vendor_b/large" in refused.value.message
    assert not Drill.objects.exists()


def test_one_drill_at_a_time_on_a_chain() -> None:
    first = start()
    with pytest.raises(Conflict) as refused:
        start(hop=2)
    assert f"drill {first.pk} is running" in refused.value.message


def test_a_pin_made_during_a_drill_takes_it_out_and_aborts_it_with_an_alert() -> None:
    drill = start()
    pinned = services.select_preset(chain="chat", preset="pin_secondary", actor="bob", reason="incident")
    assert "drill" not in pinned.to_document()
    drill.refresh_from_db()
    assert (drill.state, drill.verdict) == ("ended", "aborted")
    assert "never while it is pinned" in drill.reasons[0]
    alert = Alert.objects.get(kind=AlertKind.DRILL_FAILED)
    assert alert.subject == f"drill {drill.pk}" and "aborted" in alert.message


# --- the window -------------------------------------------------------------------------------------


def test_the_sweep_ends_a_drill_at_its_end_and_judges_it_after_the_fleet_reported(clock: Any) -> None:
    drill = start(minutes=5)
    report(drill, requests=100, drilled=10, ended_on={"2": 10})
    clock.move_to(T0 + timedelta(minutes=5, seconds=1))
    sweep = fleet_drills.run_drills()
    assert sweep.ended == [drill.pk]
    assert "drill" not in live().to_document() and live().action == "drill"
    drill.refresh_from_db()
    assert (drill.state, drill.verdict) == ("ended", "running")
    report(drill, requests=20, drilled=2, ended_on={"2": 2})  # its last report, after the end
    clock.move_to(T0 + timedelta(minutes=5, seconds=16))
    fleet_drills.run_drills()
    drill.refresh_from_db()
    assert drill.verdict == "passed", drill.reasons
    assert "all 12 drilled request(s)" in drill.reasons[0]
    alert = Alert.objects.get(kind=AlertKind.DRILL_PASSED)
    assert alert.resolved_at is not None  # an event: nothing stays open


def test_a_drill_nobody_drilled_fails(clock: Any) -> None:
    drill = start(minutes=1)
    clock.move_to(T0 + timedelta(minutes=2))
    fleet_drills.run_drills()
    drill.refresh_from_db()
    assert drill.verdict == "failed" and "nothing was proven" in drill.reasons[0]
    assert Alert.objects.filter(kind=AlertKind.DRILL_FAILED, subject=f"drill {drill.pk}").exists()


def test_a_planned_drill_waits_for_a_pin_to_end_then_starts(clock: Any) -> None:
    drill = start(start=T0 + timedelta(hours=1), minutes=30)
    assert drill.state == "planned" and "drill" not in live().to_document()
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="bob", reason="incident", expires_at=timedelta(minutes=70)
    )
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    sweep = fleet_drills.run_drills()
    assert sweep.waiting == [drill.pk]
    drill.refresh_from_db()
    assert "waiting since" in drill.reasons[0] and "pinned" in drill.reasons[0]
    clock.move_to(T0 + timedelta(hours=1, minutes=11))
    services.expire_pins()
    sweep = fleet_drills.run_drills()
    assert sweep.started == [drill.pk]
    assert live().to_document()["drill"]["id"] == drill.pk


def test_a_planned_drill_whose_window_passed_is_recorded_as_missed(clock: Any) -> None:
    drill = start(start=T0 + timedelta(hours=1), minutes=10)
    clock.move_to(T0 + timedelta(hours=2))
    sweep = fleet_drills.run_drills()
    assert sweep.missed == [drill.pk]
    drill.refresh_from_db()
    assert drill.verdict == "aborted" and "missed" in drill.reasons[0]


def test_a_recurring_drill_plans_the_next_one_when_it_ends(clock: Any) -> None:
    drill = start(minutes=10, repeat_days=7)
    clock.move_to(T0 + timedelta(minutes=11))
    fleet_drills.run_drills()
    following = Drill.objects.exclude(pk=drill.pk).get()
    assert following.state == "planned" and following.starts_at == T0 + timedelta(days=7)
    assert following.repeat_days == 7 and following.reason == drill.reason


def test_abort_takes_it_out_at_once_with_actor_and_reason() -> None:
    drill = start()
    drills.abort_drill(drill=drill.pk, actor="carol", reason="customer demo now")
    selection = live()
    assert "drill" not in selection.to_document()
    assert selection.updated_by == "carol" and "customer demo now" in selection.reason
    drill.refresh_from_db()
    assert drill.verdict == "aborted" and drill.reasons == ["aborted by carol: customer demo now"]
    with pytest.raises(InvalidInput) as refused:
        drills.abort_drill(drill=drill.pk, actor="carol", reason="again")
    assert "already ended" in refused.value.message


# --- the fleet's reports and the stop conditions ---------------------------------------------------


def test_a_drilled_request_failing_for_the_caller_aborts_the_drill_at_once() -> None:
    drill = start()
    report(drill, requests=50, drilled=5, ended_on={"2": 5})
    assert Drill.objects.get(pk=drill.pk).state == "running"
    report(drill, "svc/b", requests=50, drilled=5, failed=1, deadline=1, ended_on={"2": 4})
    drill.refresh_from_db()
    assert drill.verdict == "aborted"
    assert "1 drilled request(s) failed for the caller, 1 missing their deadline" in drill.reasons[0]
    assert "drill" not in live().to_document()


def test_the_fallback_failing_too_often_aborts_the_drill() -> None:
    drill = start(max_fallback_error_pct=10)
    report(drill, requests=200, drilled=20, ended_on={"2": 20}, fallback_attempts=20, fallback_failures=2)
    assert Drill.objects.get(pk=drill.pk).state == "running"  # 10 %: not above
    report(drill, requests=10, drilled=1, ended_on={"3": 1}, fallback_attempts=1, fallback_failures=1)
    drill.refresh_from_db()
    assert drill.verdict == "aborted" and "fallback hop 2 failed 3 of 21" in drill.reasons[0]


def test_a_report_of_another_chains_drill_is_not_taken() -> None:
    drill = start()
    other = Chain.objects.get(name="incident-summary")
    section = fleet_drills.Section(id=drill.pk, requests=5)
    assert not fleet_drills.record(chain=other, token="t", client="c", section=section, now=datetime.now(UTC))


def test_the_report_accounts_for_every_instance(clock: Any) -> None:
    drill = start()
    chain = Chain.objects.get(name="chat")
    token = ServiceToken.objects.get(name=make_token_name())
    for client, version in (("svc/a", drill.started_version), ("svc/old", drill.started_version), ("svc/slow", 1)):
        FleetInstance.objects.create(
            chain=chain,
            client=client,
            applied_version=version,
            version_seen_at=T0,
            first_seen_at=T0,
            last_seen_at=T0 + timedelta(seconds=30),
            token=token,
        )
    latency = [0, 5, 5, 0, 0, 0, 0, 0, 0]
    report(
        drill,
        requests=100,
        drilled=10,
        ended_on={"2": 10},
        latency_drilled=tuple(latency),
        latency_other=(90,) + (0,) * (BUCKETS - 1),
    )
    document = fleet_drills.report(drill)
    assert document["totals"]["drilled"] == 10 and document["totals"]["drilled_pct"] == 10.0
    assert document["totals"]["ended_on"] == {"2": 10}
    assert document["totals"]["latency_ms"]["drilled"] == {"p50": 250, "p95": 500}
    assert document["totals"]["latency_ms"]["other"] == {"p50": 100, "p95": 100}
    assert [m["client"] for m in document["not_taking_part"]] == ["svc/old"]
    assert [m["client"] for m in document["not_polled"]] == ["svc/slow"]
    assert [row["client"] for row in document["instances"]] == ["svc/a"]
    text = fleet_drills.report_text(document)
    assert "1 took part, 1 read it but did not take part, 1 did not poll it" in text


def make_token_name() -> str:
    make_token("svc-a", "read")
    return "svc-a"


@override_settings(DRILL_JUDGE_AFTER_SECONDS=15)
def test_last_drill_of_each_preset(clock: Any) -> None:
    drill = start(minutes=1)
    report(drill, requests=10, drilled=1, ended_on={"2": 1})
    clock.move_to(T0 + timedelta(minutes=2))
    fleet_drills.run_drills()
    last = fleet_drills.last_drills(Chain.objects.get(name="chat"))
    assert last == {
        "normal": {"id": drill.pk, "at": "2026-12-10T01:00:00Z", "version": drill.started_version, "verdict": "passed"}
    }
    assert DrillState.ENDED == Drill.objects.get(pk=drill.pk).state and Verdict.PASSED == "passed"
