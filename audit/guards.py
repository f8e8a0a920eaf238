"""Weighing a guarded pin's evidence (``presets.guards``): the beat's ``check_guards`` every
GUARD_EVERY_SECONDS.

For each guard still watching:
- its pin no longer live (reverted, replaced, expired) → the guard ends;
- its bake window (GUARD_BAKE_MINUTES from the pin) over → it has passed;
- the **baseline**: the replaced head's figures over the bake window's span before the pin
  (and the pin's minute and the next, as usage reports land in the minute they arrive in).
  Too few attempts or instances → the guard cannot judge and never acts; the replaced head
  failing before the pin (the provider alerts' rule) or its preset marked degraded → restoring
  it would not help, the guard never acts;
- the **now**: the pin's head over the current and the previous minute (not before the pin).
  It is *worse* when its error rate is GUARD_ERROR_MARGIN_PERCENT points above the baseline's,
  or its p95 latency GUARD_LATENCY_MARGIN_PERCENT % above it, on at least GUARD_MIN_ATTEMPTS
  attempts from GUARD_MIN_INSTANCES instances (thin evidence is never worse);
- the now's evidence must come with EVIDENCE_MIN_TOKENS distinct tokens, or one marked sole
  evidence (``audit.evidence``): short of that the guard holds, and its ``evidence`` says why
  (one token's made-up instances cannot move a pin);
- worse without a break for GUARD_SUSTAINED_SECONDS → the selection the pin replaced is
  restored (``presets.guards.restore``, actor ``system:guard``, the evidence in its reason),
  a ``guard_restored`` alert is raised and the notifiers are told. Once per pin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import provider_health
from audit.alerts import raise_alert
from audit.evidence import weigh_tokens
from audit.models import AlertKind, ProviderEvidence, ProviderHealthMinute
from presets import guards
from presets.documents import format_duration, format_time
from presets.models import GuardState, PinGuard, Preset, Selection


@dataclass(frozen=True)
class Figures:
    """One head's figures over some minutes."""

    attempts: int
    errors: int
    p95_ms: int | None
    instances: int
    tokens: tuple[str, ...] = ()
    """The tokens the reports came with."""

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.attempts if self.attempts else None

    @property
    def thin(self) -> bool:
        return self.attempts < settings.GUARD_MIN_ATTEMPTS or self.instances < settings.GUARD_MIN_INSTANCES

    def as_json(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "p95_ms": self.p95_ms,
            "instances": self.instances,
            "tokens": list(self.tokens),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        return cls(data["attempts"], data["errors"], data["p95_ms"], data["instances"], tuple(data.get("tokens", ())))

    def words(self) -> str:
        rate = "no" if self.error_rate is None else f"{self.error_rate * 100:.1f} %"
        p95 = f", p95 {self.p95_ms} ms" if self.p95_ms is not None else ""
        return f"{rate} errors{p95} ({self.attempts} attempts from {self.instances} instances)"


def head_figures(chain_id: int, head: dict[str, str], *, first: datetime, last: datetime) -> Figures:
    """``head``'s figures on the chain over the minutes ``first``..``last`` (inclusive)."""
    rows = list(
        ProviderHealthMinute.objects.filter(
            chain_id=chain_id, provider=head["provider"], model=head["model"], minute__gte=first, minute__lte=last
        )
    )
    window = provider_health.window_of(rows)
    reporters = set(
        ProviderEvidence.objects.filter(
            instance__chain_id=chain_id,
            provider=head["provider"],
            model=head["model"],
            minute__gte=first,
            minute__lte=last,
        )
        .order_by()
        .values_list("instance_id", "token")
        .distinct()
    )
    instances = len({instance for instance, _ in reporters})
    tokens = tuple(sorted({token for _, token in reporters}))
    return Figures(window["attempts"], window["errors"], window["p95_ms"], instances, tokens)


@dataclass
class GuardSweep:
    acted: list[int] = field(default_factory=list)
    passed: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)


def check_guards(*, now: datetime | None = None) -> GuardSweep:
    """Weigh every watching guard's evidence once; act where it says to."""
    now = now or timezone.now()
    sweep = GuardSweep()
    for guard in guards.watching():
        _check(guard, now=now, sweep=sweep)
    return sweep


def _check(guard: PinGuard, *, now: datetime, sweep: GuardSweep) -> None:
    selection = Selection.objects.filter(chain_id=guard.chain_id).select_related("preset").first()
    if selection is None or not selection.is_pinned or guards.pin_start(selection) != guard.pin_version:
        guards.settle(guard.pk, state=GuardState.ENDED, why="its pin is no longer live", now=now)
        sweep.ended.append(guard.pk)
        return
    if now >= guard.bake_until:
        guards.settle(
            guard.pk,
            state=GuardState.PASSED,
            why=f"its bake window ended at {format_time(guard.bake_until)} without cause to act",
            now=now,
        )
        sweep.passed.append(guard.pk)
        return
    baseline, final = _baseline(guard, now=now)
    unfit = _unfit_baseline(guard, baseline, final=final)
    if unfit is not None:
        guards.settle(guard.pk, state=GuardState.PASSED, why=unfit, now=now)
        sweep.passed.append(guard.pk)
        return
    this_minute = provider_health.minute_of(now)
    current = head_figures(
        guard.chain_id,
        guard.new_head,
        first=max(provider_health.minute_of(guard.pinned_at), this_minute - timedelta(minutes=1)),
        last=this_minute,
    )
    worse = _worse(current, baseline)
    if worse is None:
        if guard.worse_since is not None:
            guards.note(guard.pk, worse_since=None)
        if guard.evidence:
            guards.note(guard.pk, evidence={})
        return
    tokens = weigh_tokens(current.tokens)
    held = tokens.why_not()
    if held is not None:
        # Worse by the figures, but on too few tokens' word: the guard says so and holds, and
        # the sustained span starts only once enough tokens agree.
        guards.note(
            guard.pk,
            worse_since=None,
            evidence={"current": current.as_json(), **tokens.as_json(), "held": f"the guard does not act: {held}"},
        )
        return
    if guard.evidence.get("held"):
        guards.note(guard.pk, evidence={})
    since = guard.worse_since or now
    if guard.worse_since is None:
        guards.note(guard.pk, worse_since=now)
    if (now - since).total_seconds() < settings.GUARD_SUSTAINED_SECONDS:
        return
    reason = (
        f"guard: {guard.head_text} did worse than {guard.old_head_text} did before the pin, for "
        f"{format_duration(now - since)}: {worse}. Now {current.words()}; before the pin {baseline.words()}; "
        f"{tokens.words()}."
    )
    evidence = {
        "baseline": baseline.as_json(),
        "current": current.as_json(),
        "worse_since": format_time(since),
        **tokens.as_json(),
    }
    with transaction.atomic():
        restored = guards.restore(guard=guard.pk, reason=reason, evidence=evidence)
        if restored is None:
            return
        raise_alert(
            kind=AlertKind.GUARD_RESTORED,
            chain=restored.chain,
            version=restored.version,
            message=(
                f"{restored.chain.name}: the guard on pin {guard.pin_preset.name} (v{guard.pin_version} by "
                f"{guard.pinned_by}) restored {restored.preset.name} as v{restored.version}. {reason}"
            ),
            details={
                "pin_version": guard.pin_version,
                "preset": guard.pin_preset.name,
                "pinned_by": guard.pinned_by,
                "restored": restored.preset.name,
                **evidence,
            },
            now=now,
            resolution=f"reported: restored {restored.preset.name} as v{restored.version}",
        )
    sweep.acted.append(guard.pk)


def _baseline(guard: PinGuard, *, now: datetime) -> tuple[Figures, bool]:
    """The replaced head's figures before the pin, and whether they are final: read until its
    last minute has closed, then kept."""
    if guard.baseline is not None:
        return Figures.from_json(guard.baseline), True
    first, last = baseline_minutes(guard.pinned_at)
    figures = head_figures(guard.chain_id, guard.old_head, first=first, last=last)
    final = now >= last + timedelta(minutes=1)
    if final:
        guards.note(guard.pk, baseline=figures.as_json())
    return figures, final


def baseline_minutes(pinned_at: datetime) -> tuple[datetime, datetime]:
    """The minutes a pin made at ``pinned_at`` is judged against: the bake window's span before
    it, and the pin's minute and the next (usage reports land in the minute they arrive in)."""
    pin_minute = provider_health.minute_of(pinned_at)
    first = provider_health.minute_of(pinned_at - timedelta(minutes=settings.GUARD_BAKE_MINUTES))
    return first, pin_minute + timedelta(minutes=1)


def _unfit_baseline(guard: PinGuard, baseline: Figures, *, final: bool) -> str | None:
    """Why the guard can never act on this baseline, or None."""
    why = unfit(old_head=guard.old_head_text, previous_preset=guard.previous_preset, baseline=baseline, final=final)
    return None if why is None else f"{why}, so the guard does not act"


def unfit(*, old_head: str, previous_preset: Preset, baseline: Figures, final: bool, ahead: bool = False) -> str | None:
    """Why a guard could never act on ``baseline`` (the replaced head's figures before the pin),
    or None. ``ahead``: said before the pin is made (the review of a change), of the evidence
    now, rather than of the pin's."""
    was, before = ("is", "now") if ahead else ("was", "before the pin")
    if final and baseline.thin:
        return (
            f"there is too little evidence about {old_head} {before} to judge by ({baseline.words()}; "
            f"needs {settings.GUARD_MIN_ATTEMPTS} attempts from {settings.GUARD_MIN_INSTANCES} instances)"
        )
    if provider_health.is_failing(attempts=baseline.attempts, errors=baseline.errors):
        return f"{old_head} {was} failing {before} ({baseline.words()}): restoring it would not help"
    if previous_preset.is_degraded:
        return f"the replaced preset {previous_preset.name} is marked degraded"
    return None


def _worse(current: Figures, baseline: Figures) -> str | None:
    """How the pin's head is clearly worse than the baseline, or None (thin evidence never is)."""
    if current.thin or baseline.thin or current.error_rate is None or baseline.error_rate is None:
        return None
    margin = settings.GUARD_ERROR_MARGIN_PERCENT / 100
    if current.error_rate > baseline.error_rate + margin:
        return (
            f"{current.error_rate * 100:.1f} % errors against {baseline.error_rate * 100:.1f} % "
            f"(margin {settings.GUARD_ERROR_MARGIN_PERCENT} points)"
        )
    if current.p95_ms is not None and baseline.p95_ms is not None:
        if current.p95_ms > baseline.p95_ms * (1 + settings.GUARD_LATENCY_MARGIN_PERCENT / 100):
            return (
                f"p95 {current.p95_ms} ms against {baseline.p95_ms} ms "
                f"(margin {settings.GUARD_LATENCY_MARGIN_PERCENT} %)"
            )
    return None
