"""Alerts from the fleet's provider health: ``provider_failing`` when a step is failing by the
evidence of the instances that poll its chain, ``provider_credentials`` when enough of them saw
a provider reject their credentials (``provider_health.alert_evidence``).

Usage reports are evidence, never authority: each alert needs PROVIDER_ALERT_MIN_INSTANCES
distinct instances that read the chain within FLEET_INSTANCE_TTL_MINUTES and see the
condition, one instance's counts weigh at most as much as the median instance's, and the alert
names the tokens its evidence came with: one report, one instance or any number of names that
never read the chain cannot page anyone, and whoever could is named. Since any service may make
up instances, the evidence must also come with EVIDENCE_MIN_TOKENS distinct tokens, or one
marked sole evidence (``audit.evidence``): one token's made-up fleet cannot page anyone either;
such an alert is held, and the chain's health (``GET /api/v1/chains/{name}/health``,
``held_alerts``) says why.

Each is raised once while its condition lasts (one open per chain and subject) and resolves
itself when the condition ends, with a resolution that says how. ``sweep`` runs after usage
reports arrive (at most every ``EVALUATE_EVERY_S`` per process) and from the beat, so alerts
also resolve when reports stop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import actions, provider_health
from audit.alerts import raise_alert, resolve_ended
from audit.models import Alert, AlertKind
from presets import selectors
from presets.models import Selection

# Usage reports arrive many per second from a large fleet: judge at most this often.
EVALUATE_EVERY_S = 5.0
_last_evaluated = 0.0
_evaluating = threading.Lock()


@dataclass(frozen=True)
class ProviderSweep:
    raised: int
    resolved: int


def sweep_after_report() -> ProviderSweep | None:
    """``sweep`` unless this process ran one in the last ``EVALUATE_EVERY_S`` seconds."""
    global _last_evaluated
    with _evaluating:
        if time.monotonic() - _last_evaluated < EVALUATE_EVERY_S:
            return None
        _last_evaluated = time.monotonic()
    return sweep()


def sweep(*, now: datetime | None = None) -> ProviderSweep:
    """Raise the provider alerts whose condition holds now; resolve the open ones whose
    condition ended."""
    now = now or timezone.now()
    evidence = provider_health.alert_evidence(now=now)
    failing = {(step.chain, step.subject): step for step in evidence.failing}
    credentials = {(seen.chain, seen.provider): seen for seen in evidence.credentials}
    raised = resolved = 0
    with transaction.atomic():
        chains = selectors.chains_by_label({c for c, _ in [*failing, *credentials]})
        by_id = dict(Selection.objects.filter(chain__in=chains.values()).values_list("chain_id", "version"))
        versions = {label: by_id[chain.pk] for label, chain in chains.items() if chain.pk in by_id}
        for (chain_name, subject), step in failing.items():
            witnesses = [instance.client for instance in step.failing_instances]
            alert, created = raise_alert(
                kind=AlertKind.PROVIDER_FAILING,
                chain=chains[chain_name],
                version=versions.get(chain_name, 0),
                subject=subject,
                message=step.describe(),
                details={
                    "provider": step.provider,
                    "model": step.model,
                    "error_rate": round(step.error_rate, 4),
                    "errors": round(step.errors),
                    "attempts": round(step.attempts),
                    "worst": step.worst,
                    "window_minutes": settings.PROVIDER_FAILING_MINUTES,
                    "instances": len(step.instances),
                    "failing_instances": len(witnesses),
                    "clients": witnesses[:20],
                    **evidence.tokens[AlertKind.PROVIDER_FAILING, chain_name, subject].as_json(),
                },
                now=now,
            )
            if created:
                actions.remember_suggestion(alert)
            raised += created
        for (chain_name, provider), seen in credentials.items():
            alert, created = raise_alert(
                kind=AlertKind.PROVIDER_CREDENTIALS,
                chain=chains[chain_name],
                version=versions.get(chain_name, 0),
                subject=provider,
                message=seen.describe(),
                details={
                    "provider": provider,
                    "instances": len(seen.clients),
                    "clients": seen.clients[:20],
                    **evidence.tokens[AlertKind.PROVIDER_CREDENTIALS, chain_name, provider].as_json(),
                },
                now=now,
            )
            if created:
                actions.remember_suggestion(alert)
            raised += created
        resolved += _resolve(AlertKind.PROVIDER_FAILING, still=set(failing), now=now)
        resolved += _resolve(AlertKind.PROVIDER_CREDENTIALS, still=set(credentials), now=now)
    return ProviderSweep(raised=raised, resolved=resolved)


def _resolve(kind: str, *, still: set[tuple[str, str]], now: datetime) -> int:
    """Resolve the open alerts of ``kind`` whose (chain, subject) is no longer in ``still``."""
    minutes = settings.PROVIDER_FAILING_MINUTES

    def resolution(alert: Alert) -> str:
        if kind == AlertKind.PROVIDER_FAILING:
            return (
                f"{alert.subject} is below {settings.PROVIDER_FAILING_ERROR_PERCENT} % errors over the last "
                f"{minutes} min, had fewer than {settings.PROVIDER_FAILING_MIN_ATTEMPTS} attempts to judge, or "
                f"fewer than {settings.PROVIDER_ALERT_MIN_INSTANCES} instances polling the chain see it failing, "
                f"or its evidence came from fewer than {settings.EVIDENCE_MIN_TOKENS} tokens"
            )
        return (
            f"fewer than {provider_health.credential_instances_needed()} instances polling the chain saw "
            f"{alert.subject} reject their credentials in the last {minutes} min, or with fewer than "
            f"{settings.EVIDENCE_MIN_TOKENS} tokens"
        )

    return resolve_ended(kind, still=still, now=now, resolution=resolution)


__all__ = ["EVALUATE_EVERY_S", "ProviderSweep", "sweep", "sweep_after_report"]
