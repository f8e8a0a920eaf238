"""How chains, pins and presets read on the on-call pages. Pure functions of data already
read: nothing here queries the database or decides whether a change is allowed (that is
``presets.services``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from audit import change_review
from audit.change_risks import HealthMap, health_class, reported_health
from presets.documents import format_clock as format_clock  # the pages' templates and views read it here
from presets.documents import format_duration
from presets.models import Action, Drill, DrillState, PlanEvent, PlannedPin, PlanState, Preset, Selection, Verdict
from presets.selectors import PinStart
from presets.services import REASON_MAX
from presets.step_changes import ChainChange, compare_steps
from presets.step_changes import step_label as step_label  # the pages' templates and views read it here
from presets.wire import DRILL_FAULT_WORDS

if TYPE_CHECKING:
    from audit.provider_health import StepHealth


def format_minutes(minutes: int) -> str:
    """A duration choice: 30 -> "30 min", 240 -> "4 h"."""
    return format_duration(timedelta(minutes=minutes))


@dataclass(frozen=True)
class StepRow:
    """One step of a chain as the pages list it: the step, and how the fleet finds it lately
    (None when nobody reported on it in the last hour: nothing worth a line)."""

    step: dict[str, Any]
    health: StepHealth | None = None

    @property
    def health_class(self) -> str:
        """``failing`` by the fleet's rule (``provider_health.is_failing``), ``quiet`` when no
        attempt was reported in the last 5 minutes, else ``ok`` (``change_risks.health_class``)."""
        return health_class(self.health)


def step_rows(steps: list[dict[str, Any]], health: HealthMap | None) -> list[StepRow]:
    """``steps`` with the health of each, for a step list."""
    return [StepRow(step, reported_health(step, health)) for step in steps]


@dataclass(frozen=True)
class ChangeFacts:
    """Who made a change, when, which action and why: what a card's By/When/Why show."""

    actor: str
    at: datetime
    action: str
    reason: str
    until: datetime | None = None  # the pin's new end, for a change that moved it
    shortened: bool = False  # an extension that ended the pin earlier ("End the pin earlier")

    @property
    def done(self) -> str:
        """The action as a past participle: "extended", "shortened", "synced"."""
        return "shortened" if self.shortened else _DONE.get(self.action, self.action)


_DONE = {
    "select": "pinned",
    "revert": "reverted",
    "extend": "extended",
    "restore": "restored",
    "expire": "expired",
    "sync": "synced",
}


def is_shortening(action: str, expires_at: datetime | None, previous_expires_at: datetime | None) -> bool:
    """Whether a change (a live or a history row's fields) ended its pin earlier: the service
    records both ways of moving a pin's end as ``extend``, with the old and the new expiry."""
    if action != Action.EXTEND or expires_at is None or previous_expires_at is None:
        return False
    return expires_at < previous_expires_at


def change_facts(selection: Selection) -> ChangeFacts:
    """The facts of the change that made ``selection`` (its latest)."""
    s = selection
    return ChangeFacts(
        s.updated_by,
        s.updated_at,
        s.action,
        s.reason,
        until=s.expires_at if s.action == Action.EXTEND else None,
        shortened=is_shortening(s.action, s.expires_at, s.previous_expires_at),
    )


# --- reasons the pages write for a person --------------------------------------------------------
#
# A one-click revert or extend, and a restore's prefilled reason, say what the click does; the
# incident reason it belongs to (the one the pin was made with) goes first, so the card, the
# history and every client's log still say which incident it was. The text added is always one
# of the phrases below, after REASON_SEPARATOR, so the next click carries the incident again,
# not everything added so far.

REASON_SEPARATOR = " — "
# Where text these helpers added starts in a reason (what a person typed is never cut).
_ADDED = re.compile(
    re.escape(REASON_SEPARATOR) + r"(?:restored v\d+ \(undo v\d+, |end pin of \S+ \(v\d+\)|keep \S+ pinned \(v\d+\))"
)

# The one-click "+1 h" / "+4 h" buttons of a pinned chain: minutes added to its expiry.
QUICK_EXTEND_MINUTES = (60, 240)


def incident_reason(reason: str) -> str:
    """``reason`` without what these helpers added to it: the incident it began with."""
    added = _ADDED.search(reason)
    return reason[: added.start()] if added else reason


def carried_reason(incident: str | None, added: str) -> str:
    """``added`` (what a click does) after the incident reason, within the service's limit
    (the incident is shortened, never the part that says what this change is)."""
    if not incident:
        return added
    room = REASON_MAX - len(REASON_SEPARATOR) - len(added)
    if len(incident) > room:
        incident = incident[: max(room - 1, 0)] + "…"
    return f"{incident}{REASON_SEPARATOR}{added}"


def restore_reason(row: Any, *, incident: str | None) -> str:
    """The prefilled reason for undoing history ``row``: "INC-101 … — restored v5 (undo v6,
    revert by bob)"; ``incident`` is that of the pin the undo brings back, or ends."""
    added = f"restored v{row.previous_version} (undo v{row.version}, {row.action} by {row.updated_by})"
    return carried_reason(incident_reason(incident) if incident else None, added)


def restore_pin_version(row: Any) -> int | None:
    """The version whose pin's incident a restore of ``row`` carries: the pin it brings back,
    else the pin it ends; None when neither value is a pin."""
    if row.previous_expires_at is not None:
        return int(row.previous_version)
    if row.expires_at is not None:
        return int(row.version)
    return None


@dataclass(frozen=True)
class LiveState:
    """A chain's live selection with the facts its card shows."""

    selection: Selection
    is_stale: bool  # pinned for longer than the alert threshold
    pinned_for: timedelta | None
    expires_in: timedelta | None
    fleet_summary: str = ""
    steps: list[StepRow] = field(default_factory=list)  # the live steps, with their health
    pin_start: PinStart | None = None  # the select or restore that began the live pin

    @property
    def origin(self) -> ChangeFacts:
        """The change that made the live preset live: for a pin, who pinned it and why (an
        extension or a sync since does not replace that); else the latest change."""
        start, s = self.pin_start, self.selection
        if start is not None and start.version != s.version:
            return ChangeFacts(start.actor, start.at, start.action, start.reason)
        return change_facts(s)

    @property
    def latest(self) -> ChangeFacts | None:
        """The latest change when it is not the origin (an extension of the pin, say)."""
        start, s = self.pin_start, self.selection
        if start is None or start.version == s.version:
            return None
        return change_facts(s)

    @property
    def incident(self) -> str | None:
        """The live pin's incident reason (from the change that began it); None on the default."""
        return incident_reason(self.origin.reason) if self.is_pinned else None

    @property
    def revert_reason(self) -> str:
        """The prefilled reason for ending the live pin."""
        s = self.selection
        return carried_reason(self.incident, f"end pin of {s.preset.name} (v{s.version}): back to default")

    @property
    def quick_extends(self) -> list[tuple[int, str, str]]:
        """The one-click extensions of the live pin: minutes added, button label, reason; none
        that would take it past the longest pin (the service would refuse it)."""
        s, extends = self.selection, []
        room = timedelta(minutes=settings.PIN_MAX_MINUTES) - (self.expires_in or timedelta(0))
        for minutes in QUICK_EXTEND_MINUTES:
            if timedelta(minutes=minutes) > room:
                continue
            label = f"+{format_minutes(minutes)}"
            added = f"keep {s.preset.name} pinned (v{s.version}): {label}"
            extends.append((minutes, label, carried_reason(self.incident, added)))
        return extends

    @property
    def failing_head(self) -> StepRow | None:
        """The live head step when the fleet finds it failing (``change_risks.health_class``)."""
        head = self.steps[0] if self.steps else None
        return head if head is not None and head.health_class == "failing" else None

    @property
    def state(self) -> str:
        """What the card's border and the summary strip say, worst first: ``failing`` (the live
        head is failing), ``stale``, ``pinned`` or ``default``; never green while the head fails."""
        if self.failing_head is not None:
            return "failing"
        if self.is_stale:
            return "stale"
        return "pinned" if self.is_pinned else "default"

    @property
    def chain(self) -> str:
        return self.selection.chain.name

    @property
    def is_default(self) -> bool:
        return self.selection.is_default

    @property
    def is_pinned(self) -> bool:
        return self.selection.is_pinned


def live_state(
    selection: Selection,
    *,
    now: datetime,
    alert_after: timedelta,
    fleet_summary: str = "",
    health: HealthMap | None = None,
    pin_start: PinStart | None = None,
) -> LiveState:
    """The card facts of one live selection at ``now``; ``pin_start`` is where the live pin
    began (``selectors.live_pin_start``), ``health`` the fleet's view of its steps."""
    pinned_for = pin_start.age(now) if pin_start is not None else None
    return LiveState(
        selection=selection,
        is_stale=pinned_for is not None and pinned_for > alert_after,
        pinned_for=pinned_for,
        pin_start=pin_start,
        expires_in=selection.expires_at - now if selection.expires_at else None,
        fleet_summary=fleet_summary,
        steps=step_rows(selection.steps, health),
    )


@dataclass(frozen=True)
class PresetChoice:
    """A reviewed preset offered on the chain page, with what it would change."""

    preset: Preset
    is_live: bool
    change: ChainChange
    warning: str | None = None  # e.g. its head has not served a request lately
    steps: list[StepRow] = field(default_factory=list)  # its steps, with their health
    last_drill: dict[str, Any] | None = None  # its last judged drill (``audit.drills.last_drills``)

    @property
    def name(self) -> str:
        return self.preset.name

    @property
    def degraded(self) -> bool:
        return self.preset.is_degraded

    @property
    def note(self) -> str:
        return str((self.preset.marking or {}).get("note") or "")


def preset_choices(
    presets: list[Preset],
    selection: Selection,
    warn: Callable[[list[dict[str, Any]]], str | None] | None = None,
    *,
    health: HealthMap | None = None,
    last_drills: dict[str, Any] | None = None,
) -> list[PresetChoice]:
    """The presets one can pin (the default is reached with "Revert to default"); with
    ``last_drills`` (by preset name), each one's last drill."""
    return [
        PresetChoice(
            preset=p,
            is_live=p.pk == selection.preset_id,
            change=compare_steps(selection.steps, p.steps),
            warning=warn(p.steps) if warn and p.pk != selection.preset_id else None,
            steps=step_rows(p.steps, health),
            last_drill=(last_drills or {}).get(p.name),
        )
        for p in presets
        if not p.is_default
    ]


# --- alerts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionLink:
    """A suggested action (``audit.actions``) as the alerts page offers it: its Slack button's
    words, the address of its review, prefilled, and whether it ends a pin (amber)."""

    label: str
    href: str
    caution: bool = False


# --- planned pins ------------------------------------------------------------------------------


def format_day(value: datetime, *, now: datetime) -> str:
    """A moment with its day, in UTC, as a plan's start and end read: "Sun 14 Mar 06:00 UTC"
    ("Sun 14 Mar 2027 06:00 UTC" in another year). The script writes the browser's clock the
    same way beside it ("Sun 14 Mar 01:00 EST")."""
    value = value.astimezone(UTC)
    year = f" {value:%Y}" if value.year != now.astimezone(UTC).year else ""
    return f"{value:%a %d %b}{year} {value:%H:%M} UTC"


def plan_preset_choices(presets: list[Preset]) -> list[tuple[str, str]]:
    """The presets a pin may be planned of (not the default, which the chain serves without
    one), as a plan form offers them."""
    return [(p.name, f"{p.name} (degraded)" if p.is_degraded else p.name) for p in presets if not p.is_default]


@dataclass(frozen=True)
class PlanItem:
    """A plan as the chain page lists it: its one line, its history and, for someone on call,
    the forms that change, cancel or start it (``open``: the one shown open)."""

    plan: PlannedPin
    summary: str
    events: list[PlanEvent]
    replaces: str = ""  # what starting a suspended plan by hand would replace now
    waiting: str = ""  # why a suspended plan still waits, on the chain as it is now
    start_blocked: str = ""  # why it cannot be started by hand now
    forms: dict[str, Any] = field(default_factory=dict)
    open: str = ""

    @property
    def is_suspended(self) -> bool:
        return self.plan.state == PlanState.SUSPENDED


@dataclass(frozen=True)
class PlanAhead:
    """A plan a chain's card shows: a suspended one with why it still waits, on the chain as
    it is now (``plans.why_waiting``), or the next to start."""

    plan: PlannedPin
    waiting: str = ""


def start_words(plan: PlannedPin, live: LiveState, *, now: datetime) -> tuple[str, str]:
    """What starting a suspended ``plan`` by hand replaces on the chain ``live`` shows, with the
    dangers of its review (``audit.change_review``), or why it cannot be, in the words the
    plans refuse it with: (replaces, blocked)."""
    review = change_review.review_plan_start(live.selection, plan)
    if review.refusal is not None:
        words = review.refusal.field_message
        return "", f"{words[0].upper()}{words[1:]}."
    s, chain = live.selection, live.chain
    if s.is_pinned and s.expires_at is not None:
        now_serving = (
            f"the pin of {s.preset.name} (v{s.version}, pinned by {live.origin.actor}, "
            f"until {format_clock(s.expires_at, now=now)})"
        )
    else:
        now_serving = f"{chain}'s default, {s.preset.name} (v{s.version})"
    until = format_clock(plan.ends_at, now=now)
    words = f"Starting it replaces {now_serving} with {review.target} until {until}, now."
    if review.dangers:
        words += f" Check first: {'; '.join(review.dangers)}."
    return words, ""


# --- failover drills ---------------------------------------------------------------------------


def fault_words(fault: str) -> str:
    """A drill's fault as its form offers it: "Server error (HTTP 500)"."""
    words = re.sub(r"^an? ", "", DRILL_FAULT_WORDS.get(fault, fault))
    return words[:1].upper() + words[1:]


def fault_choices() -> list[tuple[str, str]]:
    """The faults a drill injects, in the wire's order, in words."""
    return [(fault, fault_words(fault)) for fault in DRILL_FAULT_WORDS]


def hop_choices(steps: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The hops a drill may fail: every step but the last (something must serve instead),
    each with its provider and model and the one that would serve in its place."""
    return [
        (str(hop), f"Hop {hop}: {step_label(steps[hop - 1])} (then {step_label(steps[hop])})")
        for hop in range(1, len(steps))
    ]


# A drill's state in words, as its badge says it: planned, running, ended and waiting for the
# fleet's last reports (``judging``), then its verdict.
DRILL_STATUS_WORDS = {
    "planned": "Planned",
    "running": "Running",
    "judging": "Ended: being judged",
    Verdict.PASSED: "Passed",
    Verdict.FAILED: "Failed",
    Verdict.ABORTED: "Aborted",
}


def drill_status(drill: Drill) -> str:
    """``planned``, ``running``, ``judging`` (its window closed, the fleet's last reports are
    awaited) or its verdict."""
    if drill.state == DrillState.PLANNED:
        return "planned"
    if drill.state == DrillState.RUNNING:
        return "running"
    return "judging" if not drill.is_judged else str(drill.verdict)


@dataclass(frozen=True)
class DrillItem:
    """A drill as the chain page lists it: its one line, its state, the fleet's counts while it
    runs (``audit.drills.report``) and, for someone on call, the form that aborts it."""

    drill: Drill
    summary: str
    status: str
    report: dict[str, Any] | None = None
    abort_form: Any = None

    @property
    def status_words(self) -> str:
        return DRILL_STATUS_WORDS.get(self.status, self.status)
