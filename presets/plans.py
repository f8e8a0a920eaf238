"""Pins planned ahead: a reviewed preset for a chain from a start to an end (docs/on-call.md,
"Planned pins"). The operations follow ``presets.services``: keyword-only, one transaction
holding the chain's locks (``services.chain_locked``), refusals as
``InvalidInput``/``NotFound``, and the start made by ``services.start_planned_pin`` (``_apply``,
the single writer of selections).

- **Planning** checks the window (a future start, an end after it, no longer than the longest
  pin, at most ``PLAN_MAX_DAYS_AHEAD`` ahead) and refuses a plan that overlaps another one of the
  chain still holding its time (planned, suspended or started).
- **Starting** (``run_plans``, on the beat every ``RUN_PLANS_EVERY_SECONDS``): a plan whose start
  has come is started as a pin expiring at its end, so the read path never serves it after its
  end (as any pin's expiry) and nothing serves it before its start (nothing selects it before).
  It does not start by itself when the chain was changed by a person after the plan was made,
  when the chain serves a pin then, or when its preset was retired or marked degraded since: it
  is suspended, with the reason, an alert is raised (``events.plan_suspended``), and a person
  starts it anyway (``start_plan_anyway``) or cancels it. A plan whose end comes before it could
  start is missed (``events.plan_missed``).
- **Ending**: a started plan has ended once its chain no longer serves its pin (it expired, or
  a person reverted or replaced it); the sweep records by whom and when.
- Every step is a ``PlanEvent`` (the plan's history): planned, changed, suspended, started,
  ended, cancelled, missed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from presets import environments, events, services
from presets.documents import format_instant, format_time, to_millisecond
from presets.exceptions import InvalidInput, NotFound
from presets.models import (
    HOLDING_PLAN_STATES,
    PlanEvent,
    PlanEventKind,
    PlannedPin,
    PlanState,
    Preset,
    Selection,
)

PLAN_ACTOR = "system:schedule"
# A start later than this after the plan's start says so in its reason.
LATE_START = timedelta(seconds=60)


# --- reads ----------------------------------------------------------------------------------


def holding_plans(*, chain: str | None = None, environment: str | None = None) -> list[PlannedPin]:
    """The plans still to start, suspended or running, soonest first (of one chain of
    ``environment``, the default when empty, or of every chain of ``environment``, of every
    environment when None)."""
    plans = PlannedPin.objects.filter(state__in=HOLDING_PLAN_STATES).select_related("chain", "preset")
    if chain is not None:
        plans = plans.filter(chain__name=chain, chain__environment=environments.resolve(environment))
    elif environment is not None:
        plans = plans.filter(chain__environment=environments.resolve(environment))
    return list(plans)


def recent_plans(*, chain: str, environment: str = "", limit: int = 20) -> list[PlannedPin]:
    """The chain's plans, the latest start first, with their events."""
    plans = (
        PlannedPin.objects.filter(chain__name=chain, chain__environment=environments.resolve(environment))
        .select_related("chain", "preset")
        .prefetch_related("events")
        .order_by("-starts_at", "-id")
    )
    return list(plans[:limit])


def get_plan(*, chain: str, environment: str = "", plan: int) -> PlannedPin:
    environment = environments.resolve(environment)
    found = (
        PlannedPin.objects.filter(pk=plan, chain__name=chain, chain__environment=environment)
        .select_related("chain", "preset")
        .first()
    )
    if found is None:
        raise NotFound(f"{chain} has no plan #{plan}", details={"chain": chain, "plan": plan})
    return found


def describe(plan: PlannedPin) -> str:
    """The plan in one line, as the pages, the CLI and the alerts say it (UTC)."""
    start, end = plan.starts_at.astimezone(UTC), plan.ends_at.astimezone(UTC)
    until = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%a %Y-%m-%d %H:%M}"
    return (
        f"at {start:%H:%M} UTC {start:%a %Y-%m-%d}: {plan.preset.name} until {until} UTC, "
        f"planned by {plan.planned_by} because {plan.reason}"
    )


def plan_entry(plan: PlannedPin, *, events: bool = False) -> dict[str, Any]:
    """A plan as the API and the CLI's JSON give it (``events``: with its history, oldest first)."""
    entry: dict[str, Any] = {
        "id": plan.pk,
        "chain": plan.chain.name,
        "preset": plan.preset.name,
        "starts_at": format_instant(plan.starts_at),
        "ends_at": format_instant(plan.ends_at),
        "reason": plan.reason,
        "planned_by": plan.planned_by,
        "planned_at": format_instant(plan.planned_at),
        "state": plan.state,
        "state_reason": plan.state_reason,
        "based_on_version": plan.based_on_version,
        "started_version": plan.started_version,
        "summary": describe(plan),
    }
    if events:
        entry["events"] = [
            {
                "kind": event.kind,
                "actor": event.actor,
                "reason": event.reason,
                "at": format_instant(event.at),
                "details": event.details,
            }
            for event in plan.events.all()
        ]
    return entry


# --- operations -----------------------------------------------------------------------------


def plan_pin(
    *,
    chain: str,
    environment: str = "",
    preset: str,
    starts_at: datetime,
    ends_at: datetime,
    actor: str,
    reason: str,
) -> PlannedPin:
    """Plan a pin of ``preset`` on ``chain`` from ``starts_at`` to ``ends_at``."""
    reason = services.clean_reason(reason)
    now = _now()
    with services.chain_locked(chain, environment, preset=preset) as selection:
        target = _plannable(selection, preset)
        starts_at, ends_at = _window(starts_at, ends_at, now=now)
        _refuse_overlap(selection, starts_at, ends_at)
        plan = PlannedPin.objects.create(
            chain=selection.chain,
            preset=target,
            starts_at=starts_at,
            ends_at=ends_at,
            reason=reason,
            planned_by=actor,
            planned_at=now,
            based_on_version=selection.version,
            planned_degraded=target.is_degraded,
            updated_at=now,
        )
        _record(plan, PlanEventKind.PLANNED, actor=actor, reason=reason, now=now, details=_window_details(plan))
        return plan


def change_plan(
    *,
    chain: str,
    environment: str = "",
    plan: int,
    actor: str,
    reason: str,
    preset: str | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
) -> PlannedPin:
    """Change a plan not started yet (its preset, start or end). It is checked as a new plan,
    against the chain as it is now: a suspended plan changed is planned again."""
    reason = services.clean_reason(reason)
    now = _now()
    with services.chain_locked(chain, environment, preset=preset) as selection:
        held = _locked_plan(selection, plan)
        if held.state not in (PlanState.PLANNED, PlanState.SUSPENDED):
            raise InvalidInput("plan", f"plan #{plan} is {held.state}: only a plan not started yet can be changed")
        before = _window_details(held)
        target = _plannable(selection, preset) if preset is not None else held.preset
        new_start, new_end = _window(starts_at or held.starts_at, ends_at or held.ends_at, now=now)
        _refuse_overlap(selection, new_start, new_end, besides=held.pk)
        was_suspended = held.state == PlanState.SUSPENDED
        held.preset, held.starts_at, held.ends_at = target, new_start, new_end
        held.based_on_version, held.planned_degraded = selection.version, target.is_degraded
        held.state, held.state_reason, held.updated_at = PlanState.PLANNED, "", now
        held.save()
        details = {"before": before, **_window_details(held)}
        _record(held, PlanEventKind.CHANGED, actor=actor, reason=reason, now=now, details=details)
        if was_suspended:
            events.plan_settled.send(
                sender=PlannedPin, plan=held, now=now, resolution=f"changed by {actor}; planned again: {reason}"
            )
        return held


def cancel_plan(*, chain: str, environment: str = "", plan: int, actor: str, reason: str) -> PlannedPin:
    """Cancel a plan not started yet (a started one is a live pin: revert it instead)."""
    reason = services.clean_reason(reason)
    now = _now()
    with services.chain_locked(chain, environment) as selection:
        held = _locked_plan(selection, plan)
        if held.state == PlanState.STARTED:
            raise InvalidInput(
                "plan", f"plan #{plan} has started: its pin is live on {chain}; revert the chain to end it"
            )
        if held.state not in (PlanState.PLANNED, PlanState.SUSPENDED):
            raise InvalidInput("plan", f"plan #{plan} is {held.state}; there is nothing to cancel")
        was_suspended = held.state == PlanState.SUSPENDED
        _move(held, PlanState.CANCELLED, f"cancelled by {actor}: {reason}", now=now)
        _record(held, PlanEventKind.CANCELLED, actor=actor, reason=reason, now=now)
        if was_suspended:
            events.plan_settled.send(
                sender=PlannedPin, plan=held, now=now, resolution=f"cancelled by {actor}: {reason}"
            )
        return held


def start_plan_anyway(
    *, chain: str, environment: str = "", plan: int, actor: str, reason: str, expected_version: int | None = None
) -> PlannedPin:
    """Start a suspended plan: a person has read why it did not start and starts it, until
    its end. Its pin replaces whatever the chain serves (``expected_version``: the version
    they saw it replace; Conflict if the chain changed since)."""
    reason = services.clean_reason(reason)
    now = _now()
    with services.chain_locked(chain, environment, expected_version=expected_version) as selection:
        held = _locked_plan(selection, plan)
        refusal = start_anyway_refusal(held, selection, now=now)
        if refusal is not None:
            raise refusal
        _start(held, selection, actor=actor, reason=f"{reason} (plan #{held.pk}: {held.reason})", now=now)
        _record(
            held, PlanEventKind.STARTED, actor=actor, reason=reason, now=now, details={"version": selection.version}
        )
        events.plan_settled.send(
            sender=PlannedPin, plan=held, now=now, resolution=f"started anyway by {actor} as v{selection.version}"
        )
        return held


def start_anyway_refusal(plan: PlannedPin, selection: Selection, *, now: datetime) -> InvalidInput | None:
    """Why starting ``plan`` by hand on the chain serving ``selection`` is refused, or None
    (``start_plan_anyway`` raises it; the review of starting it says it)."""
    if plan.state != PlanState.SUSPENDED:
        return InvalidInput("plan", f"plan #{plan.pk} is {plan.state}: only a suspended plan is started by hand")
    if plan.ends_at <= now:
        return InvalidInput("plan", f"plan #{plan.pk} ended at {format_time(plan.ends_at)}; plan it again")
    target = plan.preset
    if target.is_retired:
        return InvalidInput(
            "plan", f"{target.name!r} has been retired from the presets file: it cannot be served; cancel the plan"
        )
    if selection.preset_id == target.pk:
        return InvalidInput(
            "plan",
            f"{target.name!r} is already live on {selection.chain.name}: extend the pin instead, or cancel the plan",
        )
    return None


@dataclass
class PlanSweep:
    """What one run of the plans did, by plan id."""

    started: list[int] = field(default_factory=list)
    suspended: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)


def run_plans(*, now: datetime | None = None) -> PlanSweep:
    """Start the plans whose start has come, suspend those that conflict, record the end of
    started plans no longer served and miss those whose end came first. Idempotent and safe
    with several workers: each plan is decided under its chain's locks, re-read there."""
    now = now or _now()
    sweep = PlanSweep()
    due = PlannedPin.objects.filter(
        state__in=(PlanState.PLANNED, PlanState.SUSPENDED, PlanState.STARTED), starts_at__lte=now
    ).values_list("id", "chain_id", "chain__name", "chain__environment")
    for plan_id, chain_id, chain, environment in due:
        # A pin past its expiry is no longer served (the read path reverts it too): revert it
        # first, so that the plan is decided on what the chain serves now.
        services.expire_pins(now=now, chain_ids=[chain_id])
        with services.chain_locked(chain, environment) as selection:
            plan = _locked_plan(selection, plan_id)
            if plan.state == PlanState.PLANNED:
                _run_due(plan, selection, now=now, sweep=sweep)
            elif plan.state == PlanState.SUSPENDED and plan.ends_at <= now:
                _miss(plan, now=now, sweep=sweep)
            elif plan.state == PlanState.STARTED:
                _end_if_over(plan, selection, now=now, sweep=sweep)
    return sweep


# --- rules ----------------------------------------------------------------------------------


def _run_due(plan: PlannedPin, selection: Selection, *, now: datetime, sweep: PlanSweep) -> None:
    if plan.ends_at <= now:
        _miss(plan, now=now, sweep=sweep)
        return
    refusal = start_refusal(plan, selection, now=now)
    if refusal is not None:
        _move(plan, PlanState.SUSPENDED, refusal, now=now)
        _record(plan, PlanEventKind.SUSPENDED, actor=PLAN_ACTOR, reason=refusal, now=now)
        events.plan_suspended.send(sender=PlannedPin, plan=plan, selection=selection, now=now)
        sweep.suspended.append(plan.pk)
        return
    late = now - plan.starts_at
    when = f", {int(late.total_seconds())} s late" if late > LATE_START else ""
    reason = f"planned pin #{plan.pk} by {plan.planned_by}{when}: {plan.reason}"
    _start(plan, selection, actor=PLAN_ACTOR, reason=services.fit_reason(reason), now=now)
    _record(
        plan,
        PlanEventKind.STARTED,
        actor=PLAN_ACTOR,
        reason=services.fit_reason(reason),
        now=now,
        details={"version": selection.version},
    )
    sweep.started.append(plan.pk)


def start_refusal(plan: PlannedPin, selection: Selection, *, now: datetime) -> str | None:
    """Why the plan must not start by itself on the chain as ``selection`` serves it, or None."""
    preset = plan.preset
    if preset.is_retired:
        return f"its preset {preset.name} was retired from the presets file at {format_time(preset.retired_at)}"
    if preset.is_degraded and not plan.planned_degraded:
        note = (preset.marking or {}).get("note")
        return f"its preset {preset.name} has been marked degraded since it was planned" + (
            f" ({note})" if note else ""
        )
    change = (
        Selection.history.filter(chain_id=selection.chain_id, version__gt=plan.based_on_version)
        .exclude(updated_by__startswith="system:")
        .order_by("version")
        .first()
    )
    if change is not None:
        return (
            f"{selection.chain.name} was changed by {change.updated_by} at {format_time(change.updated_at)} "
            f"after it was planned (v{change.version}, {change.action} {_preset_name(change)}: {change.reason})"
        )
    if selection.is_pinned and not selection.is_expired(now):
        return (
            f"{selection.chain.name} serves the pin {selection.preset.name} (v{selection.version} by "
            f"{selection.updated_by}, until {format_time(selection.expires_at)}): a plan never replaces "
            "a live pin by itself"
        )
    return None


def why_waiting(plan: PlannedPin, selection: Selection, *, now: datetime) -> str:
    """Why a suspended ``plan`` still waits, worked out against the chain as ``selection``
    serves it at ``now`` by the rule that suspended it (``start_refusal``), as the pages and
    the alerts say it: what would stop it starting by itself now, or that nothing would (a
    suspended plan still waits for a person). The reason it was suspended with stays as it
    was, in ``state_reason`` and its history."""
    if plan.ends_at <= now:
        return f"Its end at {format_time(plan.ends_at)} has passed: it will be marked missed."
    refusal = start_refusal(plan, selection, now=now)
    if refusal is None:
        return (
            f"Nothing on {selection.chain.name} stops it starting now, but a suspended plan waits for a "
            "person: start it anyway, or cancel it."
        )
    return f"What stops it starting by itself now: {refusal}."


def _start(plan: PlannedPin, selection: Selection, *, actor: str, reason: str, now: datetime) -> None:
    preset = plan.preset
    services.start_planned_pin(selection, preset=preset, ends_at=plan.ends_at, actor=actor, reason=reason, now=now)
    plan.started_version = selection.version
    _move(plan, PlanState.STARTED, f"started as v{selection.version} by {actor}", now=now)


def _end_if_over(plan: PlannedPin, selection: Selection, *, now: datetime, sweep: PlanSweep) -> None:
    if selection.preset_id == plan.preset_id and selection.is_pinned:
        return  # its pin is live (perhaps extended)
    ended_by = (
        Selection.history.filter(chain_id=selection.chain_id, version__gt=plan.started_version or 0)
        .exclude(preset_id=plan.preset_id, expires_at__isnull=False)
        .order_by("version")
        .first()
    )
    at = ended_by.updated_at if ended_by is not None else now
    how = (
        f"ended by v{ended_by.version} ({ended_by.action} by {ended_by.updated_by}): {ended_by.reason}"
        if ended_by is not None
        else "ended"
    )
    _move(plan, PlanState.ENDED, services.fit_reason(how), now=now)
    actor = ended_by.updated_by if ended_by is not None else PLAN_ACTOR
    details = {"version": ended_by.version} if ended_by is not None else {}
    _record(plan, PlanEventKind.ENDED, actor=actor, reason=services.fit_reason(how), now=at, details=details)
    sweep.ended.append(plan.pk)


def _miss(plan: PlannedPin, *, now: datetime, sweep: PlanSweep) -> None:
    was_suspended = plan.state == PlanState.SUSPENDED
    why = (
        f"suspended and not started before its end at {format_time(plan.ends_at)}: {plan.state_reason}"
        if was_suspended
        else f"not started before its end at {format_time(plan.ends_at)}: no worker ran the plans in its window"
    )
    _move(plan, PlanState.MISSED, services.fit_reason(why), now=now)
    _record(plan, PlanEventKind.MISSED, actor=PLAN_ACTOR, reason=services.fit_reason(why), now=now)
    if was_suspended:
        events.plan_settled.send(
            sender=PlannedPin, plan=plan, now=now, resolution=services.fit_reason(f"missed: {why}")
        )
    else:
        events.plan_missed.send(sender=PlannedPin, plan=plan, now=now)
    sweep.missed.append(plan.pk)


def _plannable(selection: Selection, name: str) -> Preset:
    """The preset ``name`` of the chain, if a pin of it may be planned."""
    preset = services.active_preset(selection, name)
    if preset.is_default:
        raise InvalidInput(
            "preset",
            f"{name!r} is {selection.chain.name}'s default, which it serves when no pin is live: "
            "plan a pin of another preset",
        )
    return preset


def _window(starts_at: datetime, ends_at: datetime, *, now: datetime) -> tuple[datetime, datetime]:
    for name, value in (("starts_at", starts_at), ("ends_at", ends_at)):
        if not isinstance(value, datetime):
            raise InvalidInput(name, "must be a time, e.g. 2026-12-10T02:00:00Z")
        if timezone.is_naive(value):
            raise InvalidInput(name, "needs a time zone, e.g. 2026-12-10T02:00:00Z")
    starts_at, ends_at = to_millisecond(starts_at), to_millisecond(ends_at)
    if starts_at <= now:
        raise InvalidInput("starts_at", f"{format_time(starts_at)} is not in the future: to pin now, select the preset")
    latest = now + timedelta(days=settings.PLAN_MAX_DAYS_AHEAD)
    if starts_at > latest:
        raise InvalidInput(
            "starts_at",
            f"{format_time(starts_at)} is more than {settings.PLAN_MAX_DAYS_AHEAD} days ahead; plan it later",
            max_days=settings.PLAN_MAX_DAYS_AHEAD,
        )
    if ends_at <= starts_at:
        raise InvalidInput("ends_at", f"{format_time(ends_at)} is not after the start {format_time(starts_at)}")
    longest = timedelta(minutes=settings.PIN_MAX_MINUTES)
    if ends_at - starts_at > longest:
        raise InvalidInput(
            "ends_at",
            f"the plan lasts {int((ends_at - starts_at).total_seconds() // 60)} minutes, longer than the longest "
            f"pin of {settings.PIN_MAX_MINUTES}; end it by {format_time(starts_at + longest)}",
            max_minutes=settings.PIN_MAX_MINUTES,
        )
    return starts_at, ends_at


def _refuse_overlap(
    selection: Selection, starts_at: datetime, ends_at: datetime, *, besides: int | None = None
) -> None:
    others = PlannedPin.objects.filter(
        chain_id=selection.chain_id, state__in=HOLDING_PLAN_STATES, starts_at__lt=ends_at, ends_at__gt=starts_at
    ).select_related("preset")
    if besides is not None:
        others = others.exclude(pk=besides)
    other = others.order_by("starts_at").first()
    if other is not None:
        raise InvalidInput(
            "starts_at",
            f"overlaps plan #{other.pk} ({other.state}: {other.preset.name} from {format_time(other.starts_at)} to "
            f"{format_time(other.ends_at)}, planned by {other.planned_by}); one chain has one plan at a time: "
            "change or cancel that one first",
            plan=other.pk,
        )


def _locked_plan(selection: Selection, plan_id: int) -> PlannedPin:
    plan = (
        PlannedPin.objects.select_for_update(of=("self",))
        .select_related("preset", "chain")
        .filter(pk=plan_id, chain_id=selection.chain_id)
        .first()
    )
    if plan is None:
        chain = selection.chain.name
        raise NotFound(f"{chain} has no plan #{plan_id}", details={"chain": chain, "plan": plan_id})
    return plan


def _move(plan: PlannedPin, state: str, why: str, *, now: datetime) -> None:
    plan.state, plan.state_reason, plan.updated_at = state, services.fit_reason(why, 600), now
    plan.save(update_fields=["state", "state_reason", "updated_at", "started_version"])


def _record(
    plan: PlannedPin, kind: str, *, actor: str, reason: str, now: datetime, details: dict[str, Any] | None = None
) -> None:
    PlanEvent.objects.create(
        plan=plan,
        chain_id=plan.chain_id,
        kind=kind,
        actor=actor,
        reason=services.fit_reason(reason, 600),
        at=now,
        details=details or {},
    )


def _window_details(plan: PlannedPin) -> dict[str, Any]:
    return {"preset": plan.preset.name, "starts_at": format_time(plan.starts_at), "ends_at": format_time(plan.ends_at)}


def _preset_name(entry: Any) -> str:
    preset = Preset.objects.filter(pk=entry.preset_id).values_list("name", flat=True).first()
    return preset or "?"


def _now() -> datetime:
    return to_millisecond(timezone.now())
