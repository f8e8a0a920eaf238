"""The review of a change, worked out once for every surface that offers one (the pages' review,
Slack's modal, the deep links, the runbook commands): given a chain as it is live now and an
action (pin, extend, revert, restore, a suspended plan's start), what would be served, until when, which pin it ends,
its dangers (``change_risks``), what the guard would do on today's evidence, what it would
cost, and whether the services would refuse it and in which words (the services' own
refusals: ``presets.services.*_refusal``). Each surface renders this; none works it out again.

A review changes nothing; the change itself is still one ``presets.services`` call, which
checks the same refusals again under its lock."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit import guards as guard_evidence
from audit import provider_health, spend
from audit.change_risks import HealthMap, change_risks
from audit.fleet import idle_head_warning
from presets import plans, services
from presets.documents import format_duration
from presets.exceptions import InvalidInput
from presets.models import PlannedPin, Preset, Selection
from presets.step_changes import ChainChange, compare_steps, step_label

PIN, EXTEND, REVERT, RESTORE, PLAN_START = "pin", "extend", "revert", "restore", "plan_start"


@dataclass(frozen=True)
class GuardForecast:
    """What a pin's guard will do, said before the pin is made: ``acts`` when it is made and
    can act on today's evidence; ``text`` says so, or why not, in words."""

    acts: bool
    text: str


@dataclass(frozen=True)
class ChangeReview:
    """One change, reviewed against ``live``. ``refusal`` is the services' refusal (nothing
    else is worth showing then but the refusal and what is live)."""

    kind: str
    live: Selection
    target: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    marking: dict[str, Any] = field(default_factory=dict)
    until: datetime | None = None
    was_until: datetime | None = None
    change: ChainChange | None = None
    ends: str | None = None
    dangers: list[str] = field(default_factory=list)
    warning: str | None = None
    guard: GuardForecast | None = None
    cost: spend.ChangeCost | None = None
    health: HealthMap = field(default_factory=dict)
    refusal: InvalidInput | None = None

    @property
    def to_default(self) -> bool:
        """Whether the change serves the chain's default again (no expiry)."""
        return self.until is None

    def refuse(self) -> None:
        """Raise the services' refusal, if there is one."""
        if self.refusal is not None:
            raise self.refusal


def review_pin(
    live: Selection, *, preset: str, expires_at: services.Expiry, guard: bool | None, now: datetime | None = None
) -> ChangeReview:
    """Pinning ``preset`` for ``expires_at`` (a duration, a time, None for the default); choosing
    the chain's default serves it again with no expiry. ``guard`` as the pin would ask it
    (None: as GUARD_PINS_BY_DEFAULT says)."""
    now = now or timezone.now()
    target = Preset.objects.filter(chain_id=live.chain_id, name=preset).select_related("chain").first()
    refusal = services.preset_refusal(live.chain, preset, target)
    if refusal is None:
        assert target is not None
        refusal = services.already_live_refusal(live, target)
    if refusal is not None:
        return ChangeReview(PIN, live, target=preset, refusal=refusal)
    assert target is not None
    if target.is_default:
        return _review(REVERT, live, target, until=None, now=now)
    until = services.resolve_expiry(expires_at, now=now)
    review = _review(PIN, live, target, until=until, now=now)
    return replace(review, guard=guard_forecast(live, target.steps, asked=guard, now=now))


def review_extend(live: Selection, *, expires_at: services.Expiry, shorten: bool = False) -> ChangeReview:
    """Moving the live pin's expiry to ``expires_at`` (later, or earlier with ``shorten``)."""
    now = timezone.now()
    refusal = services.extend_refusal(live)
    if refusal is None:
        until = services.resolve_expiry(expires_at, now=now)
        refusal = services.expiry_change_refusal(live, until, shorten=shorten, expires_at=expires_at)
    if refusal is not None:
        return ChangeReview(EXTEND, live, target=live.preset.name, refusal=refusal)
    review = _review(EXTEND, live, live.preset, until=until, now=now)
    return replace(review, was_until=live.expires_at)


def review_revert(live: Selection) -> ChangeReview:
    """Serving the chain's default again."""
    refusal = services.revert_refusal(live)
    if refusal is not None:
        return ChangeReview(REVERT, live, target=live.chain.default.name, refusal=refusal)
    return _review(REVERT, live, live.chain.default, until=None, now=timezone.now())


def review_restore(live: Selection, *, version: int, previous: Preset | None) -> ChangeReview:
    """Undoing ``version``, whose previous value was ``previous``: it is served again (a pin
    gets a fresh expiry of the default duration)."""
    refusal = services.restore_refusal(
        chain=live.chain.name, version=version, previous=previous, live_preset_id=live.preset_id
    )
    if refusal is not None:
        return ChangeReview(RESTORE, live, refusal=refusal)
    assert previous is not None
    now = timezone.now()
    until = None if previous.is_default else services.resolve_expiry(None, now=now)
    return _review(RESTORE, live, previous, until=until, now=now)


def review_plan_start(live: Selection, plan: PlannedPin) -> ChangeReview:
    """Starting the suspended ``plan`` by hand: its preset pinned until the plan's end, now."""
    now = timezone.now()
    refusal = plans.start_anyway_refusal(plan, live, now=now)
    if refusal is not None:
        return ChangeReview(PLAN_START, live, target=plan.preset.name, refusal=refusal)
    return _review(PLAN_START, live, plan.preset, until=plan.ends_at, now=now)


def review_of(
    live: Selection,
    kind: str,
    *,
    preset: str = "",
    minutes: int = 0,
    guard: bool | None = None,
) -> ChangeReview:
    """A suggested action (``audit.actions``: a notification's buttons and deep links): pin
    ``preset`` for ``minutes`` (guarded as ``guard`` says), extend the pin by ``minutes`` from
    its expiry, or (any other kind) revert."""
    if kind == PIN:
        return review_pin(live, preset=preset, expires_at=timedelta(minutes=minutes), guard=guard)
    if kind == EXTEND:
        extended = live.expires_at + timedelta(minutes=minutes) if live.expires_at else timedelta(minutes=minutes)
        return review_extend(live, expires_at=extended)
    return review_revert(live)


def guard_forecast(
    live: Selection, steps: list[dict[str, Any]], *, asked: bool | None, now: datetime | None = None
) -> GuardForecast:
    """What the guard of a pin of ``steps`` made now would do (``presets.services._watch``
    decides whether one is made; ``audit.guards`` whether it can act): the replaced head's
    evidence so far is what it would be judged against."""
    if not services.guard_wanted(asked):
        return GuardForecast(False, "Not guarded: nothing undoes this pin by itself before its expiry.")
    new, old = step_label(steps[0]), step_label(live.steps[0])
    if new == old:
        return GuardForecast(
            False, f"Not guarded: the pin keeps the first step {old}, so the guard would have nothing to compare."
        )
    first, last = guard_evidence.baseline_minutes(now or timezone.now())
    baseline = guard_evidence.head_figures(live.chain_id, live.steps[0], first=first, last=last)
    why = guard_evidence.unfit(old_head=old, previous_preset=live.preset, baseline=baseline, final=True, ahead=True)
    if why is not None:
        return GuardForecast(False, f"The guard will not act: {why}. Nothing undoes this pin by itself.")
    return GuardForecast(
        True,
        f"Guarded for {format_duration(timedelta(minutes=settings.GUARD_BAKE_MINUTES))}: if {new} does clearly "
        f"worse than {old} did before the pin, {live.preset.name} (v{live.version}) is restored, once.",
    )


def _review(kind: str, live: Selection, target: Preset, *, until: datetime | None, now: datetime) -> ChangeReview:
    steps = target.steps
    health = provider_health.health_by_step(live.chain, [live.steps, steps], now=now)
    marking = target.marking or {}
    return ChangeReview(
        kind,
        live,
        target=target.name,
        steps=steps,
        marking=marking,
        until=until,
        change=compare_steps(live.steps, steps),
        ends=ending_pin(live, steps) if until is None else None,
        dangers=change_risks(
            chain=live.chain.name,
            target=target.name,
            marking=marking,
            live_steps=live.steps,
            steps=steps,
            health=health,
        ),
        warning=idle_head_warning(live.chain, steps, now) if kind in (PIN, PLAN_START) else None,
        cost=spend.change_cost(live_steps=live.steps, steps=steps, health=health, now=now),
        health=health,
    )


def ending_pin(live: Selection, steps: list[dict[str, Any]]) -> str | None:
    """What ending the live pin does, said before it is confirmed."""
    if not live.is_pinned or not steps:
        return None
    return f"This ends the pin of {live.preset.name}: {step_label(steps[0])} serves first again."
