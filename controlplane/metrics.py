"""Prometheus metrics at ``GET /metrics`` (DESIGN §7), correct with many web processes.

Two kinds of figures, kept apart on purpose:

- Facts about chains (active version, pinned or not, pin age, changes by action, expiries,
  alerts by kind, documents the publisher replaced at its targets (from their alerts),
  provider health over the last 5 minutes) are read from the database at scrape time by
  ``ChainCollector``. The
  database is shared, so any web process answers the scrape exactly; nothing is counted in
  memory that a restart or a second process could lose or double.
- What one process saw (chain reads by status, long polls waiting, request durations by
  route, its database pool's use, a Celery worker's tasks) only that process knows:
  ``read_path.counters``, ``controlplane.pool_metrics`` and
  ``controlplane.celery_metrics`` write them to the multiprocess files summed here.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from audit import provider_health
from audit.models import Alert, AlertKind, RefusedEvidence
from controlplane import pool_metrics
from presets import environments
from presets.models import Action, Selection
from presets.providers import price_of
from presets.selectors import pin_age
from presets.wire import OUTCOME_CLASSES
from read_path.http import bearer_token

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# --- facts from the database ----------------------------------------------------------------


class ChainCollector(Collector):
    """Chain state, changes, expiries and alerts, computed from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        version = GaugeMetricFamily("controlplane_chain_version", "Active version of each chain", labels=["chain"])
        pinned = GaugeMetricFamily(
            "controlplane_chain_pinned", "1 when a pin (a non-default preset) is live, else 0", labels=["chain"]
        )
        pin_ages = GaugeMetricFamily(
            "controlplane_chain_pin_age_seconds",
            "Seconds since the live pin started (0 when not pinned)",
            labels=["chain"],
        )
        for selection in Selection.objects.select_related("chain"):
            name = selection.chain.label
            version.add_metric([name], selection.version)
            pinned.add_metric([name], 1 if selection.is_pinned else 0)
            age = pin_age(selection, now=now)
            pin_ages.add_metric([name], max(0.0, age.total_seconds()) if age is not None else 0.0)
        yield from (version, pinned, pin_ages)

        changes = CounterMetricFamily(
            "controlplane_selection_changes",
            "Selection changes (versions) by chain and action",
            labels=["chain", "action"],
        )
        expiries = CounterMetricFamily(
            "controlplane_pin_expiries", "Pins reverted because they expired, by chain", labels=["chain"]
        )
        counted = (
            Selection.history.values("chain__environment", "chain__name", "action")
            .annotate(n=Count("history_id"))
            .order_by("chain__name", "chain__environment", "action")
        )
        for row in counted:
            chain = environments.label(row["chain__environment"], row["chain__name"])
            changes.add_metric([chain, row["action"]], row["n"])
            if row["action"] == Action.EXPIRE:
                expiries.add_metric([chain], row["n"])
        yield from (changes, expiries)

        alerts = CounterMetricFamily("controlplane_alerts", "Alerts raised, by kind", labels=["kind"])
        open_alerts = GaugeMetricFamily("controlplane_alerts_open", "Alerts not yet resolved", labels=["kind"])
        for row in Alert.objects.values("kind").annotate(n=Count("id")).order_by("kind"):
            alerts.add_metric([row["kind"]], row["n"])
        for row in (
            Alert.objects.filter(resolved_at__isnull=True).values("kind").annotate(n=Count("id")).order_by("kind")
        ):
            open_alerts.add_metric([row["kind"]], row["n"])
        yield from (alerts, open_alerts)
        yield _publish_replaced()
        yield from _provider_health(now)
        yield _refused_evidence()


def _publish_replaced() -> Metric:
    """Documents the publisher found at a target and replaced because they were not the control
    plane's: one ``publish_forged`` alert each (a ``manage.py publish`` or a worker on another
    host counts here too, which no per-process counter would)."""
    replaced = CounterMetricFamily(
        "controlplane_publish_replaced",
        "Documents a publishing target held that were not the control plane's, replaced, by chain, target and "
        "reason (unsigned, malformed, untrusted_key, bad_signature, not_a_document, beyond_record)",
        labels=["chain", "target", "reason"],
    )
    rows = (
        Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED)
        .values("chain__environment", "chain__name", "subject", "details__reason")
        .annotate(n=Count("id"))
        .order_by("chain__name", "chain__environment", "subject", "details__reason")
    )
    for row in rows:
        chain = environments.label(row["chain__environment"], row["chain__name"])
        replaced.add_metric([chain, row["subject"], str(row["details__reason"] or "")], row["n"])
    return replaced


def _refused_evidence() -> Metric:
    """What each token's evidence lost: instance rows pruned at its cap, fleet reports and
    usage reports refused (``audit.evidence.count_refused``), counted in the database so that
    every process's count is in any scrape."""
    refused = CounterMetricFamily(
        "controlplane_evidence_refused",
        "Evidence not kept, by token and reason: instances_pruned (rows past FLEET_MAX_INSTANCES_PER_TOKEN), "
        "seen_not_relay, seen_too_many (POST /api/v1/fleet/seen refused), reports_not_allowed, reports_too_many "
        "(usage reports refused)",
        labels=["token", "reason"],
    )
    rows = RefusedEvidence.objects.values("token", "reason").annotate(n=Sum("count")).order_by("token", "reason")
    for row in rows:
        refused.add_metric([row["token"], row["reason"]], row["n"])
    return refused


def _provider_health(now: datetime) -> Iterator[Metric]:
    """The fleet's reports on each provider and model over the last 5 minutes."""
    attempts = GaugeMetricFamily(
        "controlplane_provider_attempts_5m",
        "Attempts the fleet reported in the last 5 minutes, by chain, provider, model and outcome class",
        labels=["chain", "provider", "model", "outcome"],
    )
    error_ratio = GaugeMetricFamily(
        "controlplane_provider_error_ratio_5m",
        "Share of the last 5 minutes' attempts that failed on the provider's side (0..1)",
        labels=["chain", "provider", "model"],
    )
    openings = GaugeMetricFamily(
        "controlplane_provider_breaker_openings_5m",
        "Circuit-breaker openings the fleet reported in the last 5 minutes",
        labels=["chain", "provider"],
    )
    for row in provider_health.totals(now=now):
        chain, provider, model = row["chain"], row["provider"], row["model"]
        if not model:
            openings.add_metric([chain, provider], row["breaker_openings"] or 0)
            continue
        for outcome in OUTCOME_CLASSES:
            if row[outcome]:
                attempts.add_metric([chain, provider, model, outcome], row[outcome])
        errors = sum(row[name] or 0 for name in provider_health.ERROR_CLASSES)
        total = errors + (row["served"] or 0)
        if total:
            error_ratio.add_metric([chain, provider, model], errors / total)
    yield from (attempts, error_ratio, openings)
    yield from _spend()


def _spend() -> Iterator[Metric]:
    """Tokens the fleet reported since each step's first report, and their estimated cost at the
    registry's price now (a step without a price has no cost sample: unknown, not zero)."""
    tokens = CounterMetricFamily(
        "chain_tokens",
        "Tokens the fleet reported using, by chain, provider, model and direction (input or output)",
        labels=["chain", "provider", "model", "direction"],
    )
    cost = CounterMetricFamily(
        "chain_cost_estimated",
        "The reported tokens' cost at the provider registry's current price, in its currency (label currency); "
        "a price change re-prices the tokens counted",
        labels=["chain", "provider", "model", "currency"],
    )
    for (chain, provider, model), (tokens_in, tokens_out) in provider_health.token_totals().items():
        tokens.add_metric([chain, provider, model, "input"], tokens_in)
        tokens.add_metric([chain, provider, model, "output"], tokens_out)
        price = price_of(provider, model)
        if price is not None:
            cost.add_metric([chain, provider, model, price.currency], price.cost(tokens_in, tokens_out))
    yield from (tokens, cost)


def registry() -> CollectorRegistry:
    """A fresh registry per scrape: the host's per-process files plus the database's facts."""
    scrape = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(scrape, path=settings.PROMETHEUS_MULTIPROC_DIR)
    scrape.register(ChainCollector())
    return scrape


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition; with METRICS_TOKEN set, only for that bearer token."""
    if settings.METRICS_TOKEN:
        raw = bearer_token(request.headers.get("Authorization"))
        if raw is None or not hmac.compare_digest(raw.encode(), settings.METRICS_TOKEN.encode()):
            response = HttpResponse(
                "metrics need 'Authorization: Bearer <METRICS_TOKEN>'\n", status=401, content_type="text/plain"
            )
            response["WWW-Authenticate"] = "Bearer"
            return response
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET"})
    pool_metrics.record()  # this process's pool as of now; the others' as of their last second
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE)
