"""``spend`` alerts: a chain's spend, or what its steps other than the live head cost (fallback
spend), runs past a bound for SPEND_ALERT_MINUTES (``controlplane/settings.py``), or a pin's
own spend bound (set with the pin: ``presets.services.select_preset(spend_bound=)``).

The pace is the fleet's reported tokens over the window at the registry's prices
(``audit.spend``), an hour; a step with requests but no price or no token counts makes the pace
unknown, and an unknown pace raises nothing (the chain page says why). Two bounds, each off at
0: an absolute pace (SPEND_ALERT_PER_HOUR, SPEND_ALERT_FALLBACK_PER_HOUR), and a ratio over
the same pace in the SPEND_BASELINE_HOURS before the window (SPEND_ALERT_RATIO; only with an
hour of reports there, and a pace of at least SPEND_ALERT_MIN_PER_HOUR, so cents never page; a
baseline under SPEND_ALERT_MIN_PER_HOUR counts as that much).

Usage reports are evidence, never authority: a spend alert also needs the reports of
PROVIDER_ALERT_MIN_INSTANCES instances that poll the chain, from EVIDENCE_MIN_TOKENS tokens (or
one marked sole evidence), as a provider alert does, and the control plane refuses a report
claiming more tokens than its attempts could use (``http_api.fleet``). One service's made-up
fleet cannot page anyone about money.

``sweep`` runs from the beat, in the provider alerts' task (every PROVIDER_ALERTS_EVERY_SECONDS),
never after a usage report: it weighs a day of every chain's spend, and a window of
SPEND_ALERT_MINUTES needs no answer within seconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Min, Sum
from django.utils import timezone

from audit.alerts import raise_alert, resolve_ended
from audit.evidence import weigh_tokens
from audit.models import Alert, AlertKind, ProviderEvidence, ProviderHealthMinute
from audit.provider_health import minute_of
from audit.spend import currency, format_money, tokens_cost
from presets.models import Chain, Selection
from presets.providers import price_of

TOTAL = "total"
FALLBACK = "fallback"
SUBJECTS = (TOTAL, FALLBACK)


@dataclass(frozen=True)
class Pace:
    """A chain's spend an hour over the window, and over its baseline (None: unknown)."""

    now: float | None
    baseline: float | None
    baseline_hours: float


@dataclass(frozen=True)
class SpendSweep:
    raised: int
    resolved: int


def paces(*, now: datetime) -> dict[tuple[int, str], Pace]:
    """Every chain's total and fallback pace (keyed by chain id and subject): two queries."""
    window_start = minute_of(now - timedelta(minutes=settings.SPEND_ALERT_MINUTES))
    baseline_start = window_start - timedelta(hours=settings.SPEND_BASELINE_HOURS)
    heads = {
        chain: (steps[0]["provider"], steps[0]["model"]) if steps else None
        for chain, steps in Selection.objects.values_list("chain_id", "steps")
    }
    rows = (
        ProviderHealthMinute.objects.filter(minute__gte=baseline_start)
        .exclude(model="")
        .values_list("chain_id", "provider", "model")
        .annotate(Sum("served"), Sum("input_tokens"), Sum("output_tokens"))
        .order_by()
    )
    window_rows = rows.filter(minute__gte=window_start)
    baseline_rows = rows.filter(minute__lt=window_start)
    first = dict(
        ProviderHealthMinute.objects.filter(minute__gte=baseline_start, minute__lt=window_start)
        .values_list("chain_id")
        .annotate(Min("minute"))
        .order_by()
    )
    window_span = (now - window_start).total_seconds() / 3600
    costs: dict[tuple[int, str, str], float | None] = defaultdict(float)
    for side, found in (("now", window_rows), ("baseline", baseline_rows)):
        for chain, provider, model, served, tokens_in, tokens_out in found:
            cost = tokens_cost(
                price_of(provider, model), served=served, input_tokens=tokens_in, output_tokens=tokens_out
            )
            for subject in (TOTAL, FALLBACK) if heads.get(chain) != (provider, model) else (TOTAL,):
                known = costs[chain, subject, side]
                costs[chain, subject, side] = None if known is None or cost is None else known + cost
    result = {}
    for chain in {key[0] for key in costs}:
        baseline_hours = (window_start - first[chain]).total_seconds() / 3600 if chain in first else 0.0
        for subject in SUBJECTS:
            spent_now = costs.get((chain, subject, "now"), 0.0)
            spent_before = costs.get((chain, subject, "baseline"), 0.0)
            result[chain, subject] = Pace(
                now=None if spent_now is None else spent_now / window_span,
                baseline=None if spent_before is None or baseline_hours < 1 else spent_before / baseline_hours,
                baseline_hours=baseline_hours,
            )
    return result


def over_bound(subject: str, pace: Pace, *, pin: Selection | None = None) -> str | None:
    """The bound ``pace`` is over, in words; None when it is within them all (or unknown).
    ``pin``: the chain's live pin, whose own spend bound (if it has one) bounds its total."""
    if pace.now is None:
        return None
    unit = currency()
    if pin is not None and pin.is_pinned and pin.spend_bound_per_hour is not None and subject == TOTAL:
        bound = float(pin.spend_bound_per_hour)
        if pace.now > bound:
            return f"over the bound of {format_money(bound, unit)} an hour set with pin {pin.preset.name}"
    limit = settings.SPEND_ALERT_PER_HOUR if subject == TOTAL else settings.SPEND_ALERT_FALLBACK_PER_HOUR
    if limit and pace.now > limit:
        name = "SPEND_ALERT_PER_HOUR" if subject == TOTAL else "SPEND_ALERT_FALLBACK_PER_HOUR"
        return f"over {format_money(limit, unit)} an hour ({name})"
    ratio = settings.SPEND_ALERT_RATIO
    # A baseline of nothing (fallback steps that never served) is taken as SPEND_ALERT_MIN_PER_HOUR:
    # any spend is infinitely more than none, and a head's brief hiccup must not page anyone.
    if (
        ratio
        and pace.baseline is not None
        and pace.now >= settings.SPEND_ALERT_MIN_PER_HOUR
        and pace.now > ratio * max(pace.baseline, settings.SPEND_ALERT_MIN_PER_HOUR)
    ):
        return (
            f"over {ratio:g}× its pace of the {pace.baseline_hours:.0f} h before "
            f"({format_money(pace.baseline, unit)} an hour, SPEND_ALERT_RATIO)"
        )
    return None


def sweep(*, now: datetime | None = None) -> SpendSweep:
    """Raise the spend alerts whose bound is crossed now, with enough evidence; resolve the
    open ones whose pace is back under it."""
    now = now or timezone.now()
    found = paces(now=now)
    bounded = {
        selection.chain_id: selection
        for selection in Selection.objects.filter(spend_bound_per_hour__isnull=False).select_related("preset")
    }
    over = {
        key: bound
        for key, pace in found.items()
        if (bound := over_bound(key[1], pace, pin=bounded.get(key[0]))) is not None
    }
    raised = resolved = 0
    with transaction.atomic():
        chains = Chain.objects.in_bulk({chain for chain, _ in over})
        live = {s.chain_id: s for s in Selection.objects.filter(chain__in=chains).select_related("preset")}
        evidence = _evidence({chain for chain, _ in over}, now=now)
        still: set[tuple[str, str]] = set()
        for (chain_id, subject), bound in over.items():
            clients, tokens = evidence.get(chain_id, (set(), set()))
            weighed = weigh_tokens(tokens)
            if len(clients) < settings.PROVIDER_ALERT_MIN_INSTANCES or not weighed.enough:
                continue  # not enough evidence: an open alert resolves, none is raised
            chain, pace = chains[chain_id], found[chain_id, subject]
            still.add((chain.label, subject))
            unit = currency()
            words = f"{format_money(pace.now or 0.0, unit)} an hour, {bound}"
            alert, created = raise_alert(
                kind=AlertKind.SPEND,
                chain=chain,
                version=live[chain_id].version if chain_id in live else 0,
                subject=subject,
                message=(
                    f"{chain.name}'s {'spend' if subject == TOTAL else 'fallback spend (steps other than the head)'} "
                    f"runs at {words} over the last {settings.SPEND_ALERT_MINUTES} min"
                ),
                details={
                    "words": words,
                    "per_hour": round(pace.now or 0.0, 6),
                    "baseline_per_hour": None if pace.baseline is None else round(pace.baseline, 6),
                    "currency": unit,
                    "window_minutes": settings.SPEND_ALERT_MINUTES,
                    "instances": len(clients),
                    # A pin moved the traffic: the alert offers to end it (``actions.for_alert``).
                    "pin": live[chain_id].preset.name if chain_id in live and live[chain_id].is_pinned else None,
                    **weighed.as_json(),
                },
                now=now,
            )
            raised += created
        resolved = _resolve(still=still, now=now)
    return SpendSweep(raised=raised, resolved=resolved)


def _evidence(chains: set[int], *, now: datetime) -> dict[int, tuple[set[str], set[str]]]:
    """The instances that reported served attempts on each chain in the alerts' window, and
    the tokens their reports came with (instances that still poll their chain only)."""
    if not chains:
        return {}
    polled = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    since = minute_of(now - timedelta(minutes=min(settings.SPEND_ALERT_MINUTES, settings.PROVIDER_FAILING_MINUTES)))
    rows = ProviderEvidence.objects.filter(
        instance__chain__in=chains, minute__gte=since, served__gt=0, instance__last_seen_at__gte=polled
    ).values_list("instance__chain_id", "instance__client", "token")
    found: dict[int, tuple[set[str], set[str]]] = {}
    for chain, client, token in rows:
        clients, tokens = found.setdefault(chain, (set(), set()))
        clients.add(client)
        tokens.add(token)
    return found


def _resolve(*, still: set[tuple[str, str]], now: datetime) -> int:
    def resolution(alert: Alert) -> str:
        return (
            f"the {alert.subject} spend of the last {settings.SPEND_ALERT_MINUTES} min is back within its bounds "
            f"(or no longer known, or reported by fewer than {settings.PROVIDER_ALERT_MIN_INSTANCES} instances "
            f"or {settings.EVIDENCE_MIN_TOKENS} tokens)"
        )

    return resolve_ended(AlertKind.SPEND, still=still, now=now, resolution=resolution)


__all__ = ["FALLBACK", "SUBJECTS", "TOTAL", "Pace", "SpendSweep", "over_bound", "paces", "sweep"]
