"""Planned pins (presets/plans.py) on a controlled clock: planning's refusals, the start, each
kind of conflict that suspends it with its alert, settling a suspended plan, the end and a
missed plan, and the plan's own history."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import override_settings
from django.utils import timezone

from audit.models import Alert, AlertKind
from presets import plans, services
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.models import PlannedPin, PlanState, Preset, Selection

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 0, 0, tzinfo=UTC)
START = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
END = datetime(2026, 12, 10, 4, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def plan(
    preset: str = "pin_secondary", *, starts_at: datetime = START, ends_at: datetime = END, **kw: Any
) -> PlannedPin:
    return plans.plan_pin(
        chain=kw.pop("chain", "chat"),
        preset=preset,
        starts_at=starts_at,
        ends_at=ends_at,
        actor=kw.pop("actor", "alice"),
        reason=kw.pop("reason", "vendor_a maintenance 02:00-04:00"),
    )


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def state(planned: PlannedPin) -> str:
    return PlannedPin.objects.get(pk=planned.pk).state


def events(planned: PlannedPin) -> list[tuple[str, str]]:
    return [(e.kind, e.actor) for e in PlannedPin.objects.get(pk=planned.pk).events.all()]


# --- planning ---------------------------------------------------------------------------------


def test_a_plan_is_recorded_with_its_window_reason_and_the_version_it_was_planned_on() -> None:
    planned = plan()
    assert (planned.state, planned.preset.name, planned.starts_at, planned.ends_at) == (
        "planned",
        "pin_secondary",
        START,
        END,
    )
    assert (planned.planned_by, planned.based_on_version) == ("alice", 1)
    assert plans.describe(planned) == (
        "at 02:00 UTC Thu 2026-12-10: pin_secondary until 04:00 UTC, planned by alice because "
        "vendor_a maintenance 02:00-04:00"
    )
    assert events(planned) == [("planned", "alice")]
    assert live().version == 1  # planning serves nothing


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"starts_at": T0 - timedelta(minutes=1)}, "starts_at", "not in the future"),
        ({"starts_at": datetime(2026, 12, 10, 2, 0)}, "starts_at", "needs a time zone"),
        ({"ends_at": START}, "ends_at", "not after the start"),
        ({"ends_at": START + timedelta(minutes=1441)}, "ends_at", "longer than the longest pin of 1440"),
        ({"starts_at": T0 + timedelta(days=91), "ends_at": T0 + timedelta(days=91, hours=1)}, "starts_at", "90 days"),
        ({"preset": "normal"}, "preset", "default"),
        ({"preset": "nope"}, "preset", "does not exist"),
        ({"reason": "  "}, "reason", "required"),
    ],
)
def test_planning_refuses_a_bad_window_preset_or_reason_and_writes_nothing(
    kwargs: dict, field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        plan(**kwargs)
    assert refused.value.field == field
    assert words in refused.value.message
    assert not PlannedPin.objects.exists()


def test_overlapping_plans_of_one_chain_are_refused_naming_the_other_and_other_chains_are_free() -> None:
    first = plan()
    for starts, ends in (
        (START - timedelta(hours=1), START + timedelta(minutes=1)),
        (END - timedelta(minutes=1), END + timedelta(hours=1)),
        (START + timedelta(minutes=10), END - timedelta(minutes=10)),
    ):
        with pytest.raises(InvalidInput) as refused:
            plan(starts_at=starts, ends_at=ends)
        assert refused.value.field == "starts_at"
        assert f"overlaps plan #{first.pk}" in refused.value.message
        assert refused.value.details["plan"] == first.pk
    # Back to back is no overlap; another chain is its own.
    plan(starts_at=END, ends_at=END + timedelta(hours=1))
    plan("local_only", chain="incident-summary")
    # A cancelled plan frees its time.
    plans.cancel_plan(chain="chat", plan=first.pk, actor="bob", reason="vendor moved the window")
    plan(starts_at=START, ends_at=START + timedelta(hours=1))
    assert PlannedPin.objects.filter(state=PlanState.PLANNED).count() == 3


def test_changing_a_plan_checks_it_again_and_records_what_it_was() -> None:
    planned = plan()
    other = plan(starts_at=END + timedelta(hours=1), ends_at=END + timedelta(hours=2))
    with pytest.raises(InvalidInput, match=f"overlaps plan #{other.pk}"):
        plans.change_plan(
            chain="chat", plan=planned.pk, ends_at=END + timedelta(hours=1, minutes=30), actor="bob", reason="longer"
        )
    changed = plans.change_plan(
        chain="chat",
        plan=planned.pk,
        starts_at=START + timedelta(minutes=30),
        preset="drop_vendor_b",
        actor="bob",
        reason="window moved",
    )
    assert (changed.preset.name, changed.starts_at, changed.ends_at) == (
        "drop_vendor_b",
        START + timedelta(minutes=30),
        END,
    )
    [_, event] = PlannedPin.objects.get(pk=planned.pk).events.all()
    assert (event.kind, event.actor, event.reason) == ("changed", "bob", "window moved")
    assert event.details["before"] == {
        "preset": "pin_secondary",
        "starts_at": "2026-12-10T02:00:00Z",
        "ends_at": "2026-12-10T04:00:00Z",
    }
    with pytest.raises(NotFound):
        plans.change_plan(chain="incident-summary", plan=planned.pk, actor="bob", reason="wrong chain")


# --- starting and ending ----------------------------------------------------------------------


def test_the_sweep_starts_a_due_plan_as_a_pin_ending_at_its_end_and_never_before_its_start(clock: Any) -> None:
    planned = plan()
    clock.move_to(START - timedelta(milliseconds=1))
    assert plans.run_plans().started == []
    assert live().version == 1
    clock.move_to(START + timedelta(seconds=4))
    assert plans.run_plans().started == [planned.pk]
    selection = live()
    assert (selection.version, selection.preset.name, selection.updated_by) == (2, "pin_secondary", "system:schedule")
    assert selection.expires_at == END
    assert f"planned pin #{planned.pk} by alice" in selection.reason and "vendor_a maintenance" in selection.reason
    assert plans.run_plans().started == []  # once
    assert state(planned) == "started"

    # The end: at the end instant the read path serves the default, with or without a worker.
    clock.move_to(END - timedelta(milliseconds=1))
    assert services.revert_expired_and_read(chain="chat").preset.name == "pin_secondary"
    clock.move_to(END)
    served = services.revert_expired_and_read(chain="chat")
    assert (served.version, served.preset.name, served.updated_by) == (3, "normal", "system:expiry")
    clock.move_to(END + timedelta(seconds=3))
    assert plans.run_plans().ended == [planned.pk]
    ended = PlannedPin.objects.get(pk=planned.pk)
    assert ended.state == "ended" and "v3 (expire by system:expiry)" in ended.state_reason
    assert events(planned) == [("planned", "alice"), ("started", "system:schedule"), ("ended", "system:expiry")]
    assert ended.events.last().at == END


def test_a_late_start_says_so_and_an_extended_plan_pin_runs_on(clock: Any) -> None:
    planned = plan()
    clock.move_to(START + timedelta(minutes=10))
    plans.run_plans()
    assert "600 s late" in live().reason
    services.extend_pin(chain="chat", expires_at=END + timedelta(hours=1), actor="bob", reason="maintenance overran")
    clock.move_to(END + timedelta(minutes=1))
    assert plans.run_plans().ended == []
    assert state(planned) == "started"
    services.revert_to_default(chain="chat", actor="bob", reason="vendor back")
    assert plans.run_plans().ended == [planned.pk]
    assert events(planned)[-1] == ("ended", "bob")


def test_a_plan_whose_end_passed_before_any_sweep_is_missed_with_an_alert(clock: Any) -> None:
    planned = plan()
    clock.move_to(END + timedelta(seconds=1))
    assert plans.run_plans().missed == [planned.pk]
    assert live().version == 1
    assert state(planned) == "missed"
    alert = Alert.objects.get(kind=AlertKind.PLAN_MISSED)
    assert alert.subject == f"plan #{planned.pk}" and not alert.is_open


# --- suspension -------------------------------------------------------------------------------


def suspended_by(clock: Any, planned: PlannedPin) -> Alert:
    clock.move_to(START + timedelta(seconds=2))
    assert plans.run_plans().suspended == [planned.pk]
    assert state(planned) == "suspended"
    return Alert.objects.get(kind=AlertKind.PLAN_SUSPENDED, subject=f"plan #{planned.pk}")


def test_a_change_by_a_person_after_planning_suspends_the_start_with_an_alert_saying_who(clock: Any) -> None:
    planned = plan()
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(minutes=30)
    )
    alert = suspended_by(clock, planned)
    assert live().preset.name == "normal"  # bob's pin expired; the plan did not start anyway
    assert "changed by bob" in alert.message and "INC-9" in alert.message and alert.is_open
    assert alert.details["plan"] == planned.pk
    assert plans.run_plans().suspended == []  # once


def test_a_live_pin_at_the_start_suspends_it_even_when_it_was_there_when_planned(clock: Any) -> None:
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=5)
    )
    planned = plan()
    alert = suspended_by(clock, planned)
    assert "serves the pin drop_vendor_b" in alert.message
    assert live().preset.name == "drop_vendor_b"


def test_system_changes_since_planning_do_not_suspend(clock: Any) -> None:
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(minutes=30)
    )
    planned = plan()
    clock.move_to(T0 + timedelta(minutes=31))
    services.expire_pins()  # system:expiry made v3 after the plan
    clock.move_to(START + timedelta(seconds=1))
    assert plans.run_plans().started == [planned.pk]


def test_a_preset_retired_or_newly_marked_degraded_suspends_the_start(clock: Any) -> None:
    retired, degraded = plan(), plan(starts_at=END, ends_at=END + timedelta(hours=1))
    Preset.objects.filter(chain__name="chat", name="pin_secondary").update(retired_at=T0)
    assert "retired" in suspended_by(clock, retired).message
    Preset.objects.filter(chain__name="chat", name="pin_secondary").update(
        retired_at=None, marking={"degraded": True, "note": "slow"}
    )
    clock.move_to(END + timedelta(seconds=2))
    assert plans.run_plans().suspended == [degraded.pk]
    assert "marked degraded since it was planned (slow)" in PlannedPin.objects.get(pk=degraded.pk).state_reason


def test_a_preset_degraded_when_planned_starts_on_time(clock: Any) -> None:
    planned = plan("local_only")
    clock.move_to(START)
    assert plans.run_plans().started == [planned.pk]


def test_start_anyway_serves_the_plan_until_its_end_and_resolves_the_alert(clock: Any) -> None:
    planned = plan()
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=5)
    )
    alert = suspended_by(clock, planned)
    with pytest.raises(InvalidInput, match="reason"):
        plans.start_plan_anyway(chain="chat", plan=planned.pk, actor="carol", reason="")
    with pytest.raises(Conflict, match="changed since v1"):
        plans.start_plan_anyway(chain="chat", plan=planned.pk, actor="carol", reason="stale page", expected_version=1)
    plans.start_plan_anyway(chain="chat", plan=planned.pk, actor="carol", reason="checked with bob", expected_version=2)
    selection = live()
    assert (selection.preset.name, selection.updated_by, selection.expires_at) == ("pin_secondary", "carol", END)
    alert.refresh_from_db()
    assert not alert.is_open and "started anyway by carol" in alert.resolution
    with pytest.raises(InvalidInput, match="only a suspended plan"):
        plans.start_plan_anyway(chain="chat", plan=planned.pk, actor="carol", reason="again")
    with pytest.raises(InvalidInput, match="revert the chain"):
        plans.cancel_plan(chain="chat", plan=planned.pk, actor="carol", reason="no")


def test_cancelling_or_changing_a_suspended_plan_resolves_its_alert(clock: Any) -> None:
    first = plan(reason="first")
    second = plan(starts_at=END, ends_at=END + timedelta(hours=1), reason="second")
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(minutes=30)
    )
    alert = suspended_by(clock, first)
    plans.cancel_plan(chain="chat", plan=first.pk, actor="carol", reason="not needed")
    alert.refresh_from_db()
    assert (alert.is_open, alert.resolution) == (False, "cancelled by carol: not needed")
    clock.move_to(END + timedelta(seconds=1))
    assert plans.run_plans().suspended == [second.pk]
    plans.change_plan(
        chain="chat", plan=second.pk, starts_at=END + timedelta(minutes=5), actor="carol", reason="rebased"
    )
    assert state(second) == "planned"
    assert not Alert.objects.filter(kind=AlertKind.PLAN_SUSPENDED, resolved_at__isnull=True).exists()
    clock.move_to(END + timedelta(minutes=5))
    assert plans.run_plans().started == [second.pk]  # rebased on the chain as it was when changed


def test_a_suspended_plan_left_alone_is_missed_at_its_end_and_its_alert_resolved(clock: Any) -> None:
    planned = plan()
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(minutes=30)
    )
    alert = suspended_by(clock, planned)
    clock.move_to(END)
    assert plans.run_plans().missed == [planned.pk]
    alert.refresh_from_db()
    assert not alert.is_open and alert.resolution.startswith("missed")
    with pytest.raises(InvalidInput):
        plans.start_plan_anyway(chain="chat", plan=planned.pk, actor="carol", reason="late")


def test_why_a_suspended_plan_waits_is_worked_out_on_the_chain_now_and_its_recorded_reason_stays(
    clock: Any,
) -> None:
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=3)
    )
    planned = plan()
    suspended_by(clock, planned)
    recorded = PlannedPin.objects.get(pk=planned.pk).state_reason
    assert recorded.startswith("chat serves the pin drop_vendor_b (v2 by bob, until 2026-12-10T03:00:00Z)")

    def waiting() -> str:
        return plans.why_waiting(PlannedPin.objects.get(pk=planned.pk), live(), now=timezone.now())

    assert waiting() == f"What stops it starting by itself now: {recorded}."  # the same rule, nothing changed
    clock.move_to(datetime(2026, 12, 10, 3, 0, 1, tzinfo=UTC))
    services.expire_pins()  # v3 by the system: nothing stops it now
    assert waiting() == (
        "Nothing on chat stops it starting now, but a suspended plan waits for a person: start it anyway, or cancel it."
    )
    clock.move_to(datetime(2026, 12, 10, 3, 10, tzinfo=UTC))
    services.select_preset(chain="chat", preset="local_only", actor="carol", reason="INC-10 vendor_a down")
    assert waiting() == (
        "What stops it starting by itself now: chat was changed by carol at 2026-12-10T03:10:00Z after it was "
        "planned (v4, select local_only: INC-10 vendor_a down)."
    )
    clock.move_to(END)
    assert waiting() == "Its end at 2026-12-10T04:00:00Z has passed: it will be marked missed."
    held = PlannedPin.objects.get(pk=planned.pk)
    assert (held.state, held.state_reason) == ("suspended", recorded)  # as suspended, in its history too
    assert [(e.kind, e.reason) for e in held.events.all()][-1] == ("suspended", recorded)


@override_settings(PLAN_MAX_DAYS_AHEAD=1)
def test_how_far_ahead_is_a_setting() -> None:
    with pytest.raises(InvalidInput, match="1 days ahead"):
        plan(starts_at=T0 + timedelta(days=2), ends_at=T0 + timedelta(days=2, hours=1))
