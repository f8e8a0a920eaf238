"""Provider health from the fleet: what the SDK instances report about each step they
attempted, kept per chain x provider x model in one-minute buckets for a bounded window, and
read back over the last 5 minutes and the last hour.

The SDK's usage report carries a ``health`` section (chainclient 0.3.0): per provider and
model, attempts by outcome class and a fixed histogram of served latency; per provider,
circuit-breaker openings. ``record_health`` adds it to the minute it arrived in (any number of
instances merge into one row per minute), ``step_health`` / ``chain_health`` read it,
``prune`` keeps the window (``PROVIDER_HEALTH_RETENTION_HOURS``, 48 by default).

An attempt is an *error* of the provider when it says something about the provider: server
errors, rate limits, timeouts, unknown outcomes, rejected credentials, failed connections,
failed verification and unclassified statuses. A rejected request (400/422) or a
content-policy refusal is the request's doing, so it counts in neither the errors nor the
rate's denominator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.db.models.query import RawQuerySet
from django.utils import timezone

from audit.models import LATENCY_BOUNDS_MS, LATENCY_FIELDS, OUTCOME_CLASSES, ProviderHealthMinute, ProviderReporter
from presets import statements
from presets.documents import Help, Time, format_time
from presets.models import Chain, Preset

Row = TypeVar("Row", ProviderHealthMinute, ProviderReporter)

# The classes that are the provider's failures (see the module's docstring).
ERROR_CLASSES = (
    "credentials",
    "rate_limited",
    "server_error",
    "timeout",
    "unknown",
    "unavailable",
    "verify_failed",
    "other",
)
RECENT = timedelta(minutes=5)
HOUR = timedelta(hours=1)
# The sparkline: the error rate of each of the last this many minutes.
SPARK_MINUTES = 30
# The control plane accepts at most this many steps and providers per report.
MAX_STEPS = 50


def minute_of(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0)


# --- writing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepReport:
    """One step's share of a usage report, validated (``audit.fleet_api`` parses it)."""

    provider: str
    model: str
    outcomes: Mapping[str, int]
    latency_ms: tuple[int, ...]


def record_health(
    *,
    chain: Chain,
    client: str,
    steps: Iterable[StepReport],
    breaker_openings: Mapping[str, int],
    now: datetime | None = None,
) -> None:
    """Add one instance's report to the minute it arrived in, and note the instance as a
    reporter of each step (with when it last saw its credentials rejected).

    Three statements whatever the report holds: one upsert adds every step's counts to its
    minute's row, two record the reporters (with and without rejected credentials)."""
    now = now or timezone.now()
    rows: dict[tuple[str, str], dict[str, int]] = {}
    credentials: set[tuple[str, str]] = set()
    for step in steps:
        counts = rows.setdefault((step.provider, step.model), dict.fromkeys(_COUNTED, 0))
        for name in OUTCOME_CLASSES:
            counts[name] += step.outcomes.get(name, 0)
        for name, value in zip(LATENCY_FIELDS, step.latency_ms, strict=True):
            counts[name] += value
        if step.outcomes.get("credentials"):
            credentials.add((step.provider, step.model))
    for provider, openings in breaker_openings.items():
        if openings:
            rows.setdefault((provider, ""), dict.fromkeys(_COUNTED, 0))["breaker_openings"] += openings
    if not rows:
        return
    with transaction.atomic():
        _add(chain=chain, minute=minute_of(now), rows=rows)
        reporters = [
            ProviderReporter(
                chain=chain,
                provider=provider,
                model=model,
                client=client,
                last_reported_at=now,
                last_credentials_failure_at=now if (provider, model) in credentials else None,
            )
            for provider, model in rows
            if model
        ]
        for rejected in (True, False):
            batch = [r for r in reporters if (r.last_credentials_failure_at is not None) is rejected]
            if batch:
                ProviderReporter.objects.bulk_create(
                    batch,
                    update_conflicts=True,
                    unique_fields=["chain", "provider", "model", "client"],
                    update_fields=["last_reported_at", "last_credentials_failure_at"]
                    if rejected
                    else ["last_reported_at"],
                )


# Every counter of a minute's row: outcome classes, latency buckets, breaker openings.
_COUNTED = (*OUTCOME_CLASSES, *LATENCY_FIELDS, "breaker_openings")


def _add(*, chain: Chain, minute: datetime, rows: Mapping[tuple[str, str], Mapping[str, int]]) -> None:
    """Add each (provider, model)'s counts to its row for ``minute``, creating the rows a
    first report needs: one ``INSERT ... ON CONFLICT DO UPDATE`` adding to what is there
    (PostgreSQL and SQLite both have it; the ORM's upsert can only overwrite)."""
    table = connection.ops.quote_name(ProviderHealthMinute._meta.db_table)
    key = ("chain_id", "provider", "model", "minute")
    columns = ", ".join(connection.ops.quote_name(name) for name in (*key, *_COUNTED))
    placeholders = f"({statements.placeholders(len(key) + len(_COUNTED))})"
    additions = ", ".join(
        f"{column} = {table}.{column} + EXCLUDED.{column}" for column in map(connection.ops.quote_name, _COUNTED)
    )
    stamp = connection.ops.adapt_datetimefield_value(minute)
    params: list[Any] = []
    for (provider, model), counts in rows.items():
        params.extend((chain.pk, provider, model, stamp, *(counts[name] for name in _COUNTED)))
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join([placeholders] * len(rows))} "
        f"ON CONFLICT (chain_id, provider, model, minute) DO UPDATE SET {additions}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def prune(*, now: datetime | None = None) -> int:
    """Forget buckets and reporters older than the window; returns the buckets deleted."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.PROVIDER_HEALTH_RETENTION_HOURS)
    deleted, _ = ProviderHealthMinute.objects.filter(minute__lt=minute_of(cutoff)).delete()
    ProviderReporter.objects.filter(last_reported_at__lt=cutoff).delete()
    return deleted


# --- reading ----------------------------------------------------------------------------------


class WindowHealth(TypedDict):
    attempts: Annotated[int, Help("Attempts that say something about the provider: served plus errors.")]
    served: int
    errors: Annotated[int, Help("Attempts that failed on the provider's side (see error_classes).")]
    error_rate: Annotated[float | None, Help("errors / attempts, 0..1; null without attempts.")]
    outcomes: Annotated[dict[str, int], Help("Every attempt by outcome class, rejected requests included.")]
    p50_ms: Annotated[int | None, Help("Median served latency: the upper bound of its histogram bucket.")]
    p95_ms: Annotated[int | None, Help("95th percentile served latency, as p50_ms; null if nothing was served.")]
    breaker_openings: int


class StepHealth(TypedDict):
    provider: str
    model: str
    recent: Annotated[WindowHealth, Help("The last 5 minutes.")]
    hour: Annotated[WindowHealth, Help("The last hour.")]
    instances: Annotated[int, Help("Instances that reported on this step in the last 5 minutes.")]
    credential_failures_instances: Annotated[
        int, Help("Instances that saw this provider reject their credentials in the last 5 minutes.")
    ]
    failing: Annotated[
        bool,
        Help(
            "At or over PROVIDER_FAILING_ERROR_PERCENT errors with at least PROVIDER_FAILING_MIN_ATTEMPTS "
            "attempts in the last 5 minutes: the rule of the pages' 'failing now' and of provider_failing."
        ),
    ]
    sparkline: Annotated[
        list[float | None], Help(f"Error rate of each of the last {SPARK_MINUTES} minutes, oldest first.")
    ]
    summary: Annotated[str, Help("The recent figures in words, as the pages show them.")]
    last_reported_at: Annotated[Time | None, Help("When an instance last reported on this step.")]


def step_health(chain: Chain, steps: Iterable[tuple[str, str]], *, now: datetime | None = None) -> list[StepHealth]:
    """Health of each (provider, model) step of ``chain``, in the order given."""
    steps = list(dict.fromkeys(steps))
    return list(_health({chain.pk: steps}, now=now or timezone.now())[chain.pk].values())


def _health(
    wanted: Mapping[int, list[tuple[str, str]]], *, now: datetime
) -> dict[int, dict[tuple[str, str], StepHealth]]:
    """The health of each chain's (provider, model) steps, in the order given, for any number
    of chains (keyed by chain id) in two queries."""
    providers = {provider for steps in wanted.values() for provider, _ in steps}
    since = minute_of(now) - timedelta(minutes=SPARK_MINUTES - 1)
    # Each step's minutes and reporters, and each provider's breaker openings (model ""), by
    # chain: grouped once, not filtered again for every step.
    rows: dict[tuple[int, str, str], list[ProviderHealthMinute]] = defaultdict(list)
    reporters: dict[tuple[int, str, str], list[ProviderReporter]] = defaultdict(list)
    if providers:
        for row in _read(ProviderHealthMinute, list(wanted), providers, since=min(since, now - HOUR)):
            rows[row.chain_id, row.provider, row.model].append(row)
        for reporter in _read(ProviderReporter, list(wanted), providers):
            reporters[reporter.chain_id, reporter.provider, reporter.model].append(reporter)
    return {
        chain: {
            (p, m): _step(
                p, m, rows.get((chain, p, m), []), rows.get((chain, p, ""), []), reporters.get((chain, p, m), []), now
            )
            for p, m in steps
        }
        for chain, steps in wanted.items()
    }


def _read(
    model: type[Row], chains: list[int], providers: set[str], *, since: datetime | None = None
) -> RawQuerySet[Row]:
    """``model``'s rows of ``chains`` x ``providers`` (since the minute ``since``), as the
    pages read them on every load: written out, as the ORM's filter cost several times the
    Python to build and compile that the database took to run it; ``raw`` still converts
    each column as the model's field reads it, on any database."""
    table = connection.ops.quote_name(model._meta.db_table)
    sql = (
        f"SELECT * FROM {table} WHERE chain_id IN ({statements.placeholders(len(chains))}) "
        f"AND provider IN ({statements.placeholders(len(providers))})"
    )
    params: list[Any] = [*chains, *sorted(providers)]
    if since is not None:
        sql += " AND minute >= %s"
        params.append(connection.ops.adapt_datetimefield_value(since))
    return model.objects.raw(sql, params)


def chain_health(
    chain: Chain, *, first: Iterable[tuple[str, str]] = (), now: datetime | None = None
) -> list[StepHealth]:
    """Health of the ``first`` steps in their order (the live chain's, say), then of every
    other step reported for ``chain`` in the last hour, worst error rate first."""
    now = now or timezone.now()
    first = list(dict.fromkeys(first))
    reported = (
        ProviderHealthMinute.objects.filter(chain=chain, minute__gte=minute_of(now - HOUR))
        .exclude(model="")
        .values_list("provider", "model")
        .distinct()
    )
    others = sorted(set(reported) - set(first))
    health = step_health(chain, first + others, now=now)
    ordered, rest = health[: len(first)], health[len(first) :]
    return ordered + sorted(rest, key=lambda step: -(step["recent"]["error_rate"] or 0.0))


def health_by_step(
    chain: Chain, step_lists: Iterable[Iterable[Mapping[str, Any]]], *, now: datetime | None = None
) -> dict[tuple[str, str], StepHealth]:
    """The health of every step in ``step_lists`` (chains of steps as presets hold them),
    keyed by (provider, model): what the pages show beside each step, in one read."""
    return health_by_chain({chain: step_lists}, now=now)[chain.pk]


def health_by_chain(
    wanted: Mapping[Chain, Iterable[Iterable[Mapping[str, Any]]]], *, now: datetime | None = None
) -> dict[int, dict[tuple[str, str], StepHealth]]:
    """``health_by_step`` for many chains at once (the dashboard), by chain id: two queries
    however many chains."""
    keys = {
        chain.pk: list(dict.fromkeys((step["provider"], step["model"]) for steps in lists for step in steps))
        for chain, lists in wanted.items()
    }
    return _health(keys, now=now or timezone.now())


def _step(
    provider: str,
    model: str,
    mine: list[ProviderHealthMinute],
    openings: list[ProviderHealthMinute],
    ours: list[ProviderReporter],
    now: datetime,
) -> StepHealth:
    """One step's health from its own minutes, its provider's breaker openings and its
    reporters."""
    recent_from, hour_from = minute_of(now - RECENT), minute_of(now - HOUR)
    recent = _window([r for r in mine if r.minute >= recent_from], [r for r in openings if r.minute >= recent_from])
    seen_from = now - RECENT
    last = max((r.last_reported_at for r in ours), default=None)
    if mine:
        this_minute = minute_of(now)
        by_minute = {row.minute: row for row in mine}
        sparkline = [
            _rate(by_minute.get(this_minute - timedelta(minutes=back))) for back in range(SPARK_MINUTES - 1, -1, -1)
        ]
    else:  # nothing reported: no minute has a rate
        sparkline = [None] * SPARK_MINUTES
    instances = sum(1 for r in ours if r.last_reported_at >= seen_from)
    return StepHealth(
        provider=provider,
        model=model,
        recent=recent,
        hour=_window([r for r in mine if r.minute >= hour_from], [r for r in openings if r.minute >= hour_from]),
        instances=instances,
        credential_failures_instances=sum(
            1 for r in ours if r.last_credentials_failure_at is not None and r.last_credentials_failure_at >= seen_from
        ),
        failing=is_failing(attempts=recent["attempts"], errors=recent["errors"]),
        sparkline=sparkline,
        summary=describe(provider, recent, instances),
        last_reported_at=format_time(last),
    )


def _window(rows: list[ProviderHealthMinute], openings: list[ProviderHealthMinute]) -> WindowHealth:
    if not rows and not openings:  # nothing reported in the window: nothing to add up
        return WindowHealth(
            attempts=0,
            served=0,
            errors=0,
            error_rate=None,
            outcomes={},
            p50_ms=None,
            p95_ms=None,
            breaker_openings=0,
        )
    outcomes = {name: sum(getattr(row, name) for row in rows) for name in OUTCOME_CLASSES}
    errors = sum(outcomes[name] for name in ERROR_CLASSES)
    attempts = outcomes["served"] + errors
    histogram = [sum(getattr(row, name) for row in rows) for name in LATENCY_FIELDS]
    return WindowHealth(
        attempts=attempts,
        served=outcomes["served"],
        errors=errors,
        error_rate=errors / attempts if attempts else None,
        outcomes={name: count for name, count in outcomes.items() if count},
        p50_ms=_percentile(histogram, 0.50),
        p95_ms=_percentile(histogram, 0.95),
        breaker_openings=sum(row.breaker_openings for row in openings),
    )


def _rate(row: ProviderHealthMinute | None) -> float | None:
    if row is None:
        return None
    errors = sum(getattr(row, name) for name in ERROR_CLASSES)
    attempts = row.served + errors
    return errors / attempts if attempts else None


def _percentile(histogram: list[int], share: float) -> int | None:
    """The upper bound of the bucket holding the ``share`` quantile (the last bucket, above
    the highest bound, reads as that bound)."""
    total = sum(histogram)
    if not total:
        return None
    wanted, seen = share * total, 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= wanted:
            return LATENCY_BOUNDS_MS[min(index, len(LATENCY_BOUNDS_MS) - 1)]
    return LATENCY_BOUNDS_MS[-1]


def describe(provider: str, window: WindowHealth, instances: int) -> str:
    """One line an on-call engineer reads: ``vendor_a: 41.2 % errors (mostly 5xx), p95
    2.5 s, 38 instances`` (the last 5 minutes)."""
    reporting = f"{instances} instance{'' if instances == 1 else 's'}"
    if not window["attempts"]:
        return f"{provider}: no attempts reported in the last 5 min ({reporting})"
    rate = window["error_rate"] or 0.0
    parts = [f"{provider}: {rate * 100:.1f} % errors"]
    worst = max(ERROR_CLASSES, key=lambda name: window["outcomes"].get(name, 0))
    if window["outcomes"].get(worst):
        parts[0] += f" (mostly {_CLASS_WORDS[worst]})"
    if window["p95_ms"] is not None:
        parts.append(f"p95 {_seconds(window['p95_ms'])}")
    parts.append(reporting)
    return ", ".join(parts)


_CLASS_WORDS = {
    "credentials": "rejected credentials",
    "rate_limited": "429 rate limits",
    "server_error": "5xx",
    "timeout": "timeouts",
    "unknown": "unknown outcomes",
    "unavailable": "refused connections",
    "verify_failed": "failed verification",
    "other": "other statuses",
}


def _seconds(milliseconds: int) -> str:
    return f"{milliseconds} ms" if milliseconds < 1000 else f"{milliseconds / 1000:g} s"


@dataclass(frozen=True)
class Failing:
    """A step over the failure threshold now: what the pages' "failing now" line and the
    ``provider_failing`` alert say."""

    chain: str
    provider: str
    model: str
    attempts: int
    errors: int
    worst: str
    """The error class with the most attempts."""

    @property
    def error_rate(self) -> float:
        return self.errors / self.attempts

    def describe(self) -> str:
        return (
            f"{self.provider}/{self.model} on {self.chain}: {self.error_rate * 100:.1f} % errors "
            f"(mostly {_CLASS_WORDS[self.worst]}) over the last {settings.PROVIDER_FAILING_MINUTES} min, "
            f"{self.errors} of {self.attempts} attempts"
        )


def is_failing(*, attempts: int, errors: int) -> bool:
    """A step is failing at PROVIDER_FAILING_ERROR_PERCENT errors or more, judged on at least
    PROVIDER_FAILING_MIN_ATTEMPTS attempts (fewer say too little)."""
    return (
        attempts >= settings.PROVIDER_FAILING_MIN_ATTEMPTS
        and errors * 100 >= settings.PROVIDER_FAILING_ERROR_PERCENT * attempts
    )


def failing_steps(*, now: datetime | None = None, chain: Chain | None = None) -> list[Failing]:
    """Steps whose error rate over the last PROVIDER_FAILING_MINUTES is at least
    PROVIDER_FAILING_ERROR_PERCENT with PROVIDER_FAILING_MIN_ATTEMPTS attempts or more,
    worst first."""
    now = now or timezone.now()
    since = minute_of(now - timedelta(minutes=settings.PROVIDER_FAILING_MINUTES))
    rows = ProviderHealthMinute.objects.filter(minute__gte=since).exclude(model="")
    if chain is not None:
        rows = rows.filter(chain=chain)
    sums = {name: Sum(name) for name in OUTCOME_CLASSES}
    failing = []
    for row in rows.values("chain__name", "provider", "model").annotate(**sums):
        errors_by_class = {name: row[name] or 0 for name in ERROR_CLASSES}
        errors = sum(errors_by_class.values())
        attempts = errors + (row["served"] or 0)
        if not is_failing(attempts=attempts, errors=errors):
            continue
        worst = max(ERROR_CLASSES, key=lambda name: errors_by_class[name])
        failing.append(Failing(row["chain__name"], row["provider"], row["model"], attempts, errors, worst))
    return sorted(failing, key=lambda step: (-step.error_rate, step.chain, step.provider, step.model))


def credential_failures(*, now: datetime | None = None) -> dict[tuple[str, str], list[str]]:
    """Per (chain, provider): the instances that saw its credentials rejected in the last
    PROVIDER_FAILING_MINUTES, when at least PROVIDER_CREDENTIALS_INSTANCES did."""
    now = now or timezone.now()
    since = now - timedelta(minutes=settings.PROVIDER_FAILING_MINUTES)
    seen: dict[tuple[str, str], set[str]] = {}
    for chain, provider, client in ProviderReporter.objects.filter(last_credentials_failure_at__gte=since).values_list(
        "chain__name", "provider", "client"
    ):
        seen.setdefault((chain, provider), set()).add(client)
    return {
        key: sorted(clients)
        for key, clients in sorted(seen.items())
        if len(clients) >= settings.PROVIDER_CREDENTIALS_INSTANCES
    }


@dataclass(frozen=True)
class Suggestion:
    """The reviewed preset whose steps look healthiest, and why: shown, never applied."""

    preset: str
    reason: str


def healthiest_preset(
    presets: Iterable[Preset], health: Mapping[tuple[str, str], StepHealth], *, live: str
) -> Suggestion | None:
    """The active preset to consider when the live one's head is failing, or None.

    ``health`` holds every step of ``presets`` (``health_by_step``). Presets are ranked by
    their steps' recent error rates in chain order (the head counts most); a step nobody
    reported on ranks behind every healthy one and ahead of a failing one, and a preset
    marked degraded ranks behind every other. Only a preset whose head is healthier than the
    failing live head is suggested."""
    candidates = [preset for preset in presets if not preset.is_retired]

    def rank(preset: Preset) -> tuple[float, ...]:
        return tuple(_risk(health[(step["provider"], step["model"])]) for step in preset.steps)

    def degraded(preset: Preset) -> bool:
        return bool((preset.marking or {}).get("degraded"))

    by_name = {preset.name: preset for preset in candidates}
    if live not in by_name:
        return None
    best = min(candidates, key=lambda preset: (degraded(preset), rank(preset), preset.name))
    live_head, best_head = rank(by_name[live])[0], rank(best)[0]
    if best.name == live or best_head >= live_head or live_head < _FAILING:
        return None
    head = health[(best.steps[0]["provider"], best.steps[0]["model"])]
    return Suggestion(best.name, f"its head {head['summary']}")


# A step's risk for ranking presets: its recent error rate; unknown (no attempts) sits between
# a healthy step and one at the failure threshold.
_FAILING = 1.0


def _risk(step: StepHealth) -> float:
    rate = step["recent"]["error_rate"]
    if step["failing"]:
        return _FAILING + (rate or 0.0)
    if rate is None:
        return settings.PROVIDER_FAILING_ERROR_PERCENT / 100 / 2
    return rate


def totals(*, now: datetime | None = None) -> list[dict[str, Any]]:
    """Per chain x provider x model over the last 5 minutes, for ``/metrics``."""
    now = now or timezone.now()
    sums = {name: Sum(name) for name in (*OUTCOME_CLASSES, "breaker_openings")}
    return list(
        ProviderHealthMinute.objects.filter(minute__gte=minute_of(now - RECENT))
        .values("chain__name", "provider", "model")
        .annotate(**sums)
        .order_by("chain__name", "provider", "model")
    )


__all__ = [
    "ERROR_CLASSES",
    "Failing",
    "credential_failures",
    "failing_steps",
    "health_by_chain",
    "health_by_step",
    "healthiest_preset",
    "is_failing",
    "LATENCY_BOUNDS_MS",
    "OUTCOME_CLASSES",
    "StepHealth",
    "StepReport",
    "Suggestion",
    "WindowHealth",
    "chain_health",
    "describe",
    "prune",
    "record_health",
    "step_health",
    "totals",
]
