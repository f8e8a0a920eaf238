"""Failover drills on a chain: start or plan one, start the planned ones when their time
comes, end them when their window closes, abort them; their verdict once judged.

A drill fails a share of the chain's live requests on purpose at one hop, in the SDK and
before dispatch (the hop gets no call), so that the fallback to the next hop is proven on
real traffic. The chain's document carries it while it runs (``Selection.drill``): its start
and its end are each a new version (``Action.DRILL``, through ``changes.carry_drill``) with
the actor and the reason, in the chain's history like every change; clients stop injecting
at its ``ends_at`` on their own. Any other change to the chain takes it out of the document
and aborts it (``changes._apply``): a drill never runs while the chain is pinned.

What the fleet reported, the stop conditions and the verdict are ``audit.drills``' (it reads
the evidence, and refuses a drill while a provider alert is open on the chain); this module
knows the chain only. Every operation is keyword-only and runs in one transaction holding
the chain's lock, as ``presets.services``' do.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from presets import environments, events
from presets import services as changes
from presets.documents import format_duration, format_time, to_millisecond
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.models import Chain, Drill, DrillState, Selection, ServiceToken, Verdict
from presets.wire import (
    DRILL_FAULT_WORDS,
    DRILL_FAULTS,
    DRILL_MAX_MINUTES,
    DRILL_SHARE_MAX_BP,
    DRILL_SHARE_MIN_BP,
    drill_service_digest,
)

log = logging.getLogger(__name__)

DRILL_ACTOR = "system:drill"
# How far ahead a drill may be planned, and how often a recurring one may repeat.
MAX_PLAN_AHEAD = timedelta(days=90)
MAX_REPEAT_DAYS = 90
# The stop condition on the fallback hop's error rate: percent, and the fewest attempts it
# is judged on (a few failures of the first attempts are no rate).
DEFAULT_MAX_FALLBACK_ERROR_PCT = 10.0
MIN_FALLBACK_ATTEMPTS = 20


@dataclass
class Sweep:
    """What one run of the beat's drill sweep did, by drill id."""

    started: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)


# --- reads -----------------------------------------------------------------------------------


def get(drill: int) -> Drill:
    """The drill ``drill`` with its chain, or NotFound."""
    found = Drill.objects.select_related("chain", "preset").filter(pk=drill).first()
    if found is None:
        raise NotFound(f"unknown drill {drill}", details={"drill": drill})
    return found


def of_chain(chain: Chain, *, limit: int = 50) -> list[Drill]:
    """The chain's drills, newest start first."""
    return list(Drill.objects.filter(chain=chain).select_related("chain", "preset")[:limit])


def last_judged(chain: Chain) -> dict[int, Drill]:
    """The last judged drill of each of the chain's presets, by preset id."""
    last: dict[int, Drill] = {}
    judged = Drill.objects.filter(chain=chain, preset__isnull=False).exclude(
        verdict__in=[Verdict.PLANNED, Verdict.RUNNING]
    )
    for drill in judged.order_by("-starts_at", "-id").only(
        "id", "preset_id", "starts_at", "started_version", "verdict", "hop", "fault", "share_bp", "chain_id"
    ):
        last.setdefault(drill.preset_id or 0, drill)
    return last


def describe(drill: Drill) -> str:
    """One line: "hop 1 (openai/gpt-4o) fails with a server error (HTTP 500) for 10 % of
    requests of every service"."""
    steps = drill.steps or []
    step = steps[drill.hop - 1] if 0 < drill.hop <= len(steps) else None
    where = f" ({step['provider']}/{step['model']})" if step else ""
    whom = ", ".join(drill.services) if drill.services else "every service"
    return (
        f"hop {drill.hop}{where} fails with {DRILL_FAULT_WORDS.get(drill.fault, drill.fault)} for {drill.share:g} % "
        f"of requests of {whom}"
    )


# --- changes ---------------------------------------------------------------------------------


def start_drill(
    *,
    chain: str,
    environment: str = "",
    hop: Any,
    fault: Any,
    share: Any,
    reason: Any,
    actor: str,
    services: Sequence[Any] = (),
    start: datetime | None = None,
    minutes: Any = 15,
    repeat_days: Any = None,
    max_failed: Any = 0,
    max_fallback_error_pct: Any = DEFAULT_MAX_FALLBACK_ERROR_PCT,
    blocked: str | None = None,
    now: datetime | None = None,
) -> Drill:
    """Start a drill on ``chain`` now (``start`` None or not later than now), or plan it for
    ``start``. ``blocked``: why it may not start now (``audit.drills`` says: an open provider
    alert), refused when it would start now; a planned one waits at its start instead."""
    reason = changes.clean_reason(reason)
    now = now or changes._now()
    hop_n = _whole("hop", hop, low=1, high=8)
    share_bp = _share_bp(share)
    length = _whole("minutes", minutes, low=1, high=DRILL_MAX_MINUTES)
    fault = _fault(fault)
    repeat = None if repeat_days in (None, "", 0) else _whole("repeat_days", repeat_days, low=1, high=MAX_REPEAT_DAYS)
    failed = _whole("max_failed", max_failed, low=0, high=1_000_000)
    fallback_bp = _percent_bp("max_fallback_error_pct", max_fallback_error_pct)
    names = _service_names(services)
    starts = now if start is None or start <= now else to_millisecond(start)
    if start is not None and start < now - timedelta(minutes=1):
        raise InvalidInput("start", f"{format_time(start)} has passed; leave it out to start now, or give a later time")
    if starts - now > MAX_PLAN_AHEAD:
        raise InvalidInput("start", f"is more than {MAX_PLAN_AHEAD.days} days ahead; plan the drill closer to its time")
    ends = starts + timedelta(minutes=length)
    with changes.locked(chain, environment) as selection:
        _check_hop(selection, hop_n)
        tokens = _tokens(names, selection.chain)
        _check_overlap(selection.chain, starts, ends)
        begin_now = starts <= now
        if begin_now:
            why = start_refusal(selection, now=now) or blocked
            if why is not None:
                raise Conflict(f"{chain}: the drill cannot start now: {why}", details={"chain": chain})
        drill = Drill.objects.create(
            chain=selection.chain,
            hop=hop_n,
            fault=fault,
            share_bp=share_bp,
            services=names,
            starts_at=starts,
            ends_at=ends,
            reason=reason,
            created_by=actor,
            created_at=now,
            max_failed=failed,
            max_fallback_error_bp=fallback_bp,
            repeat_days=repeat,
            steps=selection.steps,
        )
        _set_digests(drill, tokens)
        if begin_now:
            _begin(selection, drill, actor=actor, now=now)
        log.info("chain %s: drill %d %s by %s: %s", chain, drill.pk, drill.state, actor, reason)
        return drill


def abort_drill(*, drill: int, actor: str, reason: Any, now: datetime | None = None) -> Drill:
    """Abort a running drill (its document loses it at once) or cancel a planned one."""
    reason = changes.clean_reason(reason)
    return _end(drill, actor=actor, why=f"aborted by {actor}: {reason}", verdict=Verdict.ABORTED, now=now)


def abort_for(*, drill: int, why: str, now: datetime | None = None) -> Drill | None:
    """Abort a running drill for a stop condition ``why`` (``audit.drills``); None if it had
    ended already."""
    try:
        return _end(drill, actor=DRILL_ACTOR, why=f"aborted: {why}", verdict=Verdict.ABORTED, now=now)
    except InvalidInput:
        return None


def judge(*, drill: int, verdict: str, reasons: list[str], now: datetime) -> bool:
    """Record the verdict of an ended drill (``audit.drills``), once; whether this call did."""
    with transaction.atomic():
        row = Drill.objects.select_for_update(of=("self",)).select_related("chain", "preset").get(pk=drill)
        if row.state != DrillState.ENDED or row.is_judged:
            return False
        row.verdict, row.reasons, row.judged_at = verdict, reasons, now
        row.save(update_fields=["verdict", "reasons", "judged_at"])
        events.drill_ended.send(sender=Drill, drill=row, now=now)
        return True


def run_drills(*, now: datetime | None = None, blocked: Callable[[Chain], str | None] | None = None) -> Sweep:
    """The beat's sweep: start the planned drills whose time has come (or say why they wait),
    end the running ones whose window closed, and record the ones whose window passed before
    they could start. Safe with several workers: each is re-checked under its chain's lock."""
    now = now or changes._now()
    sweep = Sweep()
    due = Drill.objects.filter(state=DrillState.RUNNING, ends_at__lte=now).values_list("pk", flat=True)
    for pk in list(due):
        if _close(pk, now=now):
            sweep.ended.append(pk)
    planned = Drill.objects.filter(state=DrillState.PLANNED, starts_at__lte=now).select_related("chain")
    for drill in list(planned):
        if drill.ends_at <= now:
            why = "missed: its window passed before it could start"
            if drill.reasons:
                why += f" ({drill.reasons[-1]})"
            try:
                _end(drill.pk, actor=DRILL_ACTOR, why=why, verdict=Verdict.ABORTED, now=now)
                sweep.missed.append(drill.pk)
            except InvalidInput:
                pass
            continue
        if _start_planned(drill.pk, blocked=blocked(drill.chain) if blocked is not None else None, now=now):
            sweep.started.append(drill.pk)
        else:
            sweep.waiting.append(drill.pk)
    return sweep


def start_refusal(selection: Selection, *, now: datetime) -> str | None:
    """Why no drill may start on the chain as ``selection`` serves it, or None."""
    if selection.is_pinned and not selection.is_expired(now):
        return (
            f"it serves the pin {selection.preset.name} (v{selection.version} by {selection.updated_by}) until "
            f"{format_time(selection.expires_at)}, and a drill never runs while the chain is pinned: revert the "
            "pin first, or plan the drill after it"
        )
    if selection.drill_id is not None:
        return f"drill {selection.drill_id} runs on it; abort it first"
    return None


# --- the work under the chain's lock ----------------------------------------------------------


def _begin(selection: Selection, drill: Drill, *, actor: str, now: datetime) -> None:
    drill.state, drill.verdict, drill.reasons = DrillState.RUNNING, Verdict.RUNNING, []
    drill.preset, drill.steps = selection.preset, selection.steps
    drill.started_version = selection.version + 1
    drill.save(update_fields=["state", "verdict", "reasons", "preset", "steps", "started_version"])
    text = f"drill {drill.pk} started: {describe(drill)} until {format_time(drill.ends_at)}: {drill.reason}"
    changes.carry_drill(selection, drill=drill, actor=actor, reason=text, now=now)


def _start_planned(pk: int, *, blocked: str | None, now: datetime) -> bool:
    drill = Drill.objects.select_related("chain").get(pk=pk)
    with changes.locked(drill.chain.name, drill.chain.environment) as selection:
        drill = Drill.objects.select_for_update().get(pk=pk)
        if drill.state != DrillState.PLANNED:
            return drill.state == DrillState.RUNNING
        why = start_refusal(selection, now=now) or blocked
        if why is None and drill.hop >= len(selection.steps):
            why = f"hop {drill.hop} is now the last hop of {selection.chain.name} ({len(selection.steps)} steps)"
        if why is not None:
            waiting = f"waiting since {format_time(now)}: {why}"
            if not drill.reasons or not drill.reasons[-1].endswith(why):
                drill.reasons = [waiting]
                drill.save(update_fields=["reasons"])
            return False
        _begin(selection, drill, actor=DRILL_ACTOR, now=now)
        return True


def _close(pk: int, *, now: datetime) -> bool:
    """A running drill's window closed: its document loses it; judged later."""
    drill = Drill.objects.select_related("chain").get(pk=pk)
    with changes.locked(drill.chain.name, drill.chain.environment) as selection:
        drill = Drill.objects.select_for_update().get(pk=pk)
        if drill.state != DrillState.RUNNING:
            return False
        version = selection.version
        if selection.drill_id == drill.pk:
            text = f"drill {drill.pk} ended: its window closed at {format_time(drill.ends_at)}"
            version = changes.carry_drill(selection, drill=None, actor=DRILL_ACTOR, reason=text, now=now).version
        drill.state, drill.ended_at, drill.ended_by, drill.ended_version = DrillState.ENDED, now, DRILL_ACTOR, version
        drill.save(update_fields=["state", "ended_at", "ended_by", "ended_version"])
        _plan_next(drill, now=now)
        return True


def _end(pk: int, *, actor: str, why: str, verdict: str, now: datetime | None) -> Drill:
    now = now or changes._now()
    drill = get(pk)
    with changes.locked(drill.chain.name, drill.chain.environment) as selection:
        drill = Drill.objects.select_for_update(of=("self",)).select_related("chain", "preset").get(pk=pk)
        if drill.state == DrillState.ENDED:
            raise InvalidInput("drill", f"drill {pk} has already ended ({drill.verdict}); nothing to abort")
        version = selection.version
        if selection.drill_id == drill.pk:
            text = f"drill {drill.pk} {why}"
            version = changes.carry_drill(selection, drill=None, actor=actor, reason=text, now=now).version
        if drill.state == DrillState.PLANNED:
            why = why.replace("aborted by", "cancelled before its start by", 1)
        drill.state, drill.verdict, drill.judged_at = DrillState.ENDED, verdict, now
        drill.reasons = [why]
        drill.ended_at, drill.ended_by, drill.ended_version = now, actor, version
        drill.save(update_fields=["state", "verdict", "judged_at", "reasons", "ended_at", "ended_by", "ended_version"])
        events.drill_ended.send(sender=Drill, drill=drill, now=now)
        _plan_next(drill, now=now)
        return drill


def _plan_next(drill: Drill, *, now: datetime) -> Drill | None:
    """A recurring drill plans its next one ``repeat_days`` after its start (skipping
    occurrences already past), unless one is planned already. It names the services it named
    whose tokens still read the chain; when none does any more, none is planned: an empty list
    would drill every service."""
    if not drill.repeat_days:
        return None
    tokens = _tokens(drill.services, drill.chain, strict=False)
    if drill.services and not tokens:
        log.warning(
            "chain %s: drill %d is not repeated: no token of its services (%s) is live and reads the chain any more; "
            "plan a new drill naming services that do",
            environments.label(drill.chain.environment, drill.chain.name),
            drill.pk,
            ", ".join(drill.services),
        )
        return None
    step = timedelta(days=drill.repeat_days)
    starts = drill.starts_at + step
    while starts + (drill.ends_at - drill.starts_at) <= now:
        starts += step
    ends = starts + (drill.ends_at - drill.starts_at)
    if Drill.objects.filter(chain=drill.chain_id, state=DrillState.PLANNED, starts_at__lt=ends, ends_at__gt=starts):
        return None
    following = Drill.objects.create(
        chain_id=drill.chain_id,
        hop=drill.hop,
        fault=drill.fault,
        share_bp=drill.share_bp,
        services=sorted(t.name for t in tokens),
        starts_at=starts,
        ends_at=ends,
        reason=drill.reason,
        created_by=drill.created_by,
        created_at=now,
        max_failed=drill.max_failed,
        max_fallback_error_bp=drill.max_fallback_error_bp,
        repeat_days=drill.repeat_days,
        steps=drill.steps,
    )
    _set_digests(following, tokens)
    return following


# --- checks ----------------------------------------------------------------------------------


def _whole(name: str, value: Any, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidInput(name, f"must be a whole number from {low} to {high}")
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput(name, f"{value!r} is not a whole number; give one from {low} to {high}") from None
    if not low <= number <= high:
        raise InvalidInput(name, f"{number} is out of range: give a whole number from {low} to {high}")
    return number


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInput(name, "must be a number")
    try:
        number = float(value)
    except ValueError:
        raise InvalidInput(name, f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise InvalidInput(name, "must be a finite number")
    return number


def _share_bp(value: Any) -> int:
    low, high = DRILL_SHARE_MIN_BP / 100, DRILL_SHARE_MAX_BP / 100
    share = _number("share", value)
    bp = round(share * 100)
    if not DRILL_SHARE_MIN_BP <= bp <= DRILL_SHARE_MAX_BP:
        raise InvalidInput("share", f"{share:g} % is out of range: drill from {low:g} % to {high:g} % of requests")
    return bp


def _percent_bp(name: str, value: Any) -> int:
    number = _number(name, value)
    if not 0 <= number <= 100:
        raise InvalidInput(name, f"{number:g} is not a percentage from 0 to 100")
    return round(number * 100)


def _fault(value: Any) -> str:
    if value not in DRILL_FAULTS:
        raise InvalidInput("fault", f"{value!r} is not a fault a drill knows: use one of {', '.join(DRILL_FAULTS)}")
    return str(value)


def _service_names(values: Sequence[Any]) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) and v.strip() for v in values):
        raise InvalidInput("services", "must be a list of token names (empty: every service)")
    return sorted({v.strip() for v in values})


def _tokens(names: Sequence[str], chain: Chain, *, strict: bool = True) -> list[ServiceToken]:
    """The live tokens ``names`` name that read ``chain``: a token of another environment, or
    bound to other chains, never reads the drill's document, so it would never take part.
    ``strict``: refuse a name that is not such a token, in words (a repeat keeps the others)."""
    if not names:
        return []
    tokens = list(ServiceToken.objects.active().filter(name__in=names))
    unknown = sorted(set(names) - {t.name for t in tokens})
    if unknown and strict:
        raise InvalidInput(
            "services",
            f"no live token named {', '.join(unknown)}: name the services by their tokens' names "
            "(manage.py list_tokens), or leave the list empty for every service",
        )
    refusals = {
        t.name: why
        for t in tokens
        if (why := environments.token_refusal(t.environment, t.chains, chain.environment, chain.name)) is not None
    }
    if refusals and strict:
        name, why = sorted(refusals.items())[0]
        raise InvalidInput(
            "services",
            f"{name} would never take part: its token does not read {environments.label(chain.environment, chain.name)}"
            f" ({why}); name services whose tokens read the chain",
        )
    return [t for t in tokens if t.name not in refusals]


def _set_digests(drill: Drill, tokens: Sequence[ServiceToken]) -> None:
    if tokens:
        drill.service_digests = sorted(drill_service_digest(drill.pk, t.token_hash) for t in tokens)
        drill.save(update_fields=["service_digests"])


def _check_hop(selection: Selection, hop: int) -> None:
    steps = selection.steps
    if hop >= len(steps):
        chain = selection.chain.name
        raise InvalidInput(
            "hop",
            f"hop {hop} would leave {chain} nothing to fall back to ({len(steps)} step(s)): a drill fails a hop "
            + (f"from 1 to {len(steps) - 1}" if len(steps) > 1 else "only on a chain of two steps or more"),
        )


def _check_overlap(chain: Chain, starts: datetime, ends: datetime) -> None:
    other = Drill.objects.filter(
        chain=chain, state__in=[DrillState.PLANNED, DrillState.RUNNING], starts_at__lt=ends, ends_at__gt=starts
    ).first()
    if other is not None:
        raise Conflict(
            f"{chain.name}: drill {other.pk} is {other.state} from {format_time(other.starts_at)} to "
            f"{format_time(other.ends_at)} ({format_duration(other.ends_at - other.starts_at)}); one drill at a "
            "time on a chain: abort it first, or pick a window after it",
            details={"drill": other.pk},
        )
