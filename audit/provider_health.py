"""Provider health from the fleet: what the SDK instances report about each step they
attempted, kept per chain x provider x model in one-minute buckets for a bounded window, and
read back over the last 5 minutes and the last hour.

The SDK's usage report carries a ``health`` section (chainclient 0.3.0): per provider and
model, attempts by outcome class and a fixed histogram of served latency (and, from an SDK
that streams, one of streamed attempts' time to their first chunk, ``first_chunk_ms``); per
provider, circuit-breaker openings. ``record_health`` adds it to the minute it arrived in
(any number of instances merge into one row per minute), ``step_health`` / ``chain_health``
read it, ``prune`` keeps the window (``PROVIDER_HEALTH_RETENTION_HOURS``, 48 by default).

Only an instance fleet status knows (it read its chain within FLEET_INSTANCE_TTL_MINUTES)
reports health (``audit.usage`` drops the rest), and each of its reports is also kept apart,
per instance and minute with the token it came with, as the *evidence* the provider alerts
weigh (``alert_evidence``): an alert needs PROVIDER_ALERT_MIN_INSTANCES instances that see the
condition, and one instance's counts weigh at most as much as the median instance's, so no
single report or instance, and no name that never read the chain, can raise one. Any service
may make up instances, so an alert also needs its evidence from EVIDENCE_MIN_TOKENS distinct
tokens, or one marked sole evidence (``audit.evidence``); short of that it is *held*, and the
chain's health says why.

An attempt is an *error* of the provider when it says something about the provider: server
errors, rate limits, timeouts, unknown outcomes, rejected credentials, failed connections,
failed verification, interrupted streams (a stream that broke after chunks had reached the
caller) and unclassified statuses. A rejected request (400/422) or a content-policy refusal
is the request's doing, so it counts in neither the errors nor the rate's denominator.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Annotated, Any, TypedDict, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.db.models.query import RawQuerySet
from django.utils import timezone

from audit.evidence import TokenEvidence, weigh_tokens
from audit.models import (
    ERROR_CLASSES,
    FIRST_CHUNK_FIELDS,
    LATENCY_FIELDS,
    ProviderEvidence,
    ProviderHealthMinute,
    ProviderReporter,
    ProviderTokenTotal,
    ReportWindow,
)
from presets import environments, statements
from presets.documents import Help, Time, format_time
from presets.models import Chain, Preset
from presets.wire import OUTCOME_CLASSES, TOKEN_FIELDS, latency_percentile

Row = TypeVar("Row", ProviderHealthMinute, ProviderReporter)

RECENT = timedelta(minutes=5)
HOUR = timedelta(hours=1)
# The sparkline: the error rate of each of the last this many minutes.
SPARK_MINUTES = 30


def minute_of(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0)


# --- writing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepReport:
    """One step's share of a usage report, validated (``http_api.fleet`` parses it)."""

    provider: str
    model: str
    outcomes: Mapping[str, int]
    latency_ms: tuple[int, ...]
    first_chunk_ms: tuple[int, ...] = ()
    """Streamed attempts' time to their first chunk, a histogram as ``latency_ms``; empty
    when the report has none (nothing streamed, or an SDK without streams)."""
    input_tokens: int = 0
    output_tokens: int = 0
    served_with_tokens: int = 0
    """Served attempts whose tokens are in the sums (``presets.wire.TOKEN_FIELDS``); a report
    without token counts has 0, and all its served attempts count as unknown."""


def record_health(
    *,
    chain: Chain,
    instance: int,
    token: str,
    steps: Iterable[StepReport],
    breaker_openings: Mapping[str, int],
    now: datetime | None = None,
) -> None:
    """Add one instance's report to the minute it arrived in, keep it as that instance's
    evidence (``instance``: its fleet status row; ``token``: the name of the token it came
    with), and note the instance as a reporter of each step (with when it last saw its
    credentials rejected).

    Four statements whatever the report holds: one upsert adds every step's counts to its
    minute's row, one to the instance's evidence, two record the reporters (with and without
    rejected credentials)."""
    now = now or timezone.now()
    rows: dict[tuple[str, str], dict[str, int]] = {}
    credentials: set[tuple[str, str]] = set()
    for step in steps:
        counts = rows.setdefault((step.provider, step.model), dict.fromkeys(_COUNTED, 0))
        for name in OUTCOME_CLASSES:
            counts[name] += step.outcomes.get(name, 0)
        for name, value in zip(LATENCY_FIELDS, step.latency_ms, strict=True):
            counts[name] += value
        if step.first_chunk_ms:
            for name, value in zip(FIRST_CHUNK_FIELDS, step.first_chunk_ms, strict=True):
                counts[name] += value
        for name in TOKEN_FIELDS:
            counts[name] += getattr(step, name)
        if step.outcomes.get("credentials"):
            credentials.add((step.provider, step.model))
    for provider, openings in breaker_openings.items():
        if openings:
            rows.setdefault((provider, ""), dict.fromkeys(_COUNTED, 0))["breaker_openings"] += openings
    if not rows:
        return
    minute = connection.ops.adapt_datetimefield_value(minute_of(now))
    with transaction.atomic():
        _add(
            ProviderHealthMinute,
            key=("chain_id", "provider", "model", "minute"),
            counted=_COUNTED,
            rows=[(chain.pk, provider, model, minute, *counts.values()) for (provider, model), counts in rows.items()],
        )
        _add(
            ProviderEvidence,
            key=("instance_id", "provider", "model", "minute"),
            counted=_EVIDENCE,
            rows=[
                (instance, provider, model, minute, token, *(counts[name] for name in _EVIDENCE))
                for (provider, model), counts in rows.items()
                if model
            ],
            replaced=("token",),
        )
        reporters = [
            ProviderReporter(
                chain=chain,
                provider=provider,
                model=model,
                instance_id=instance,
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
                    unique_fields=["chain", "provider", "model", "instance"],
                    update_fields=["last_reported_at", "last_credentials_failure_at"]
                    if rejected
                    else ["last_reported_at"],
                )


# Every counter of a minute's row: outcome classes, latency and first-chunk buckets, tokens,
# breaker openings.
_COUNTED = (*OUTCOME_CLASSES, *LATENCY_FIELDS, *FIRST_CHUNK_FIELDS, *TOKEN_FIELDS, "breaker_openings")
# The counters of a step's tokens since its first report (``ProviderTokenTotal``).
_TOKEN_TOTALS = ("input_tokens", "output_tokens")
# The counters of an instance's evidence: what an alert weighs (attempts, errors by class).
_EVIDENCE = ("served", *ERROR_CLASSES)


def _add(
    model: type[ProviderHealthMinute | ProviderEvidence | ProviderTokenTotal],
    *,
    key: tuple[str, ...],
    counted: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    replaced: tuple[str, ...] = (),
) -> None:
    """Add each row's counts to ``model``'s row with the same ``key``, creating the rows a
    first report needs; each row is its key's values, the ``replaced`` columns' (the last
    report's stand) and the ``counted`` ones'. One ``INSERT ... ON CONFLICT DO UPDATE``
    adding to what is there (PostgreSQL and SQLite both have it; the ORM's upsert can only
    overwrite)."""
    if not rows:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    names = (*key, *replaced, *counted)
    columns = ", ".join(connection.ops.quote_name(name) for name in names)
    placeholders = f"({statements.placeholders(len(names))})"
    updates = [f"{column} = EXCLUDED.{column}" for column in map(connection.ops.quote_name, replaced)]
    updates += [
        f"{column} = {table}.{column} + EXCLUDED.{column}" for column in map(connection.ops.quote_name, counted)
    ]
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join([placeholders] * len(rows))} "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {', '.join(updates)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


def prune(*, now: datetime | None = None) -> int:
    """Forget buckets and reporters older than the window, evidence older than the alerts'
    window and the usage-report limits' past minutes; returns the buckets deleted."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.PROVIDER_HEALTH_RETENTION_HOURS)
    # The minutes' tokens move to the totals as they are deleted, in one transaction; the rows a
    # DELETE ... RETURNING hands back are its own, so a prune running at once cannot count them too.
    table = connection.ops.quote_name(ProviderHealthMinute._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE minute < %s RETURNING chain_id, provider, model, input_tokens, output_tokens",
            [connection.ops.adapt_datetimefield_value(minute_of(cutoff))],
        )
        deleted_rows = cursor.fetchall()
        moved: dict[tuple[int, str, str], list[int]] = {}
        for chain, provider, model, tokens_in, tokens_out in deleted_rows:
            if model and (tokens_in or tokens_out):
                sums = moved.setdefault((chain, provider, model), [0, 0])
                sums[0] += tokens_in
                sums[1] += tokens_out
        _add(
            ProviderTokenTotal,
            key=("chain_id", "provider", "model"),
            counted=_TOKEN_TOTALS,
            rows=[(*key, *sums) for key, sums in sorted(moved.items())],
        )
    deleted = len(deleted_rows)
    ProviderReporter.objects.filter(last_reported_at__lt=cutoff).delete()
    ProviderEvidence.objects.filter(minute__lt=_evidence_since(now)).delete()
    ReportWindow.objects.filter(window_start__lt=minute_of(now)).delete()
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
    first_chunk_p50_ms: Annotated[
        int | None,
        Help(
            "Median time from a streamed attempt's start to its first chunk, as p50_ms (every streamed "
            "attempt that sent one, interrupted ones included); null if nothing was streamed."
        ),
    ]
    first_chunk_p95_ms: Annotated[
        int | None, Help("95th percentile time to a stream's first chunk, as first_chunk_p50_ms.")
    ]
    input_tokens: Annotated[int, Help("Input tokens the attempts said they used.")]
    output_tokens: Annotated[int, Help("Output tokens the attempts said they used.")]
    served_with_tokens: Annotated[
        int, Help("Served attempts whose tokens were reported; the other served ones used unknown tokens.")
    ]
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
    chain: Chain,
    *,
    first: Iterable[tuple[str, str]] = (),
    now: datetime | None = None,
    known: Mapping[tuple[str, str], StepHealth] | None = None,
) -> list[StepHealth]:
    """Health of the ``first`` steps in their order (the live chain's, say), then of every
    other step reported for ``chain`` in the last hour, worst error rate first. ``known``:
    health already read at ``now`` (``health_by_step``), not read again."""
    now = now or timezone.now()
    first = list(dict.fromkeys(first))
    reported = (
        ProviderHealthMinute.objects.filter(chain=chain, minute__gte=minute_of(now - HOUR))
        .exclude(model="")
        .values_list("provider", "model")
        .distinct()
    )
    others = sorted(set(reported) - set(first))
    known = known or {}
    missing = [step for step in first + others if step not in known]
    read = dict(zip(missing, step_health(chain, missing, now=now), strict=True)) if missing else {}
    health = [known.get(step) or read[step] for step in first + others]
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


def window_of(rows: list[ProviderHealthMinute]) -> WindowHealth:
    """One step's figures over the minutes ``rows`` (the guards': no breaker openings)."""
    return _window(rows, [])


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
            first_chunk_p50_ms=None,
            first_chunk_p95_ms=None,
            input_tokens=0,
            output_tokens=0,
            served_with_tokens=0,
            breaker_openings=0,
        )
    outcomes = {name: sum(getattr(row, name) for row in rows) for name in OUTCOME_CLASSES}
    errors = sum(outcomes[name] for name in ERROR_CLASSES)
    attempts = outcomes["served"] + errors
    histogram = [sum(getattr(row, name) for row in rows) for name in LATENCY_FIELDS]
    first_chunk = [sum(getattr(row, name) for row in rows) for name in FIRST_CHUNK_FIELDS]
    return WindowHealth(
        attempts=attempts,
        served=outcomes["served"],
        errors=errors,
        error_rate=errors / attempts if attempts else None,
        outcomes={name: count for name, count in outcomes.items() if count},
        p50_ms=latency_percentile(histogram, 0.50),
        p95_ms=latency_percentile(histogram, 0.95),
        first_chunk_p50_ms=latency_percentile(first_chunk, 0.50),
        first_chunk_p95_ms=latency_percentile(first_chunk, 0.95),
        **{name: sum(getattr(row, name) for row in rows) for name in TOKEN_FIELDS},  # type: ignore[typeddict-item]
        breaker_openings=sum(row.breaker_openings for row in openings),
    )


def _rate(row: ProviderHealthMinute | None) -> float | None:
    if row is None:
        return None
    errors = sum(getattr(row, name) for name in ERROR_CLASSES)
    attempts = row.served + errors
    return errors / attempts if attempts else None


def describe(provider: str, window: WindowHealth, instances: int) -> str:
    """One line an on-call engineer reads: ``vendor_a: 41.2 % errors (mostly 5xx), p95
    2.5 s, 38 instances`` (the last 5 minutes); with streamed attempts, their time to the
    first chunk beside the latency (``p95 2.5 s, first chunk p95 500 ms``)."""
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
    if window["first_chunk_p95_ms"] is not None:
        parts.append(f"first chunk p95 {_seconds(window['first_chunk_p95_ms'])}")
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
    "interrupted": "interrupted streams",
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


def is_failing(*, attempts: float, errors: float) -> bool:
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
    for row in rows.values("chain__environment", "chain__name", "provider", "model").annotate(**sums):
        errors_by_class = {name: row[name] or 0 for name in ERROR_CLASSES}
        errors = sum(errors_by_class.values())
        attempts = errors + (row["served"] or 0)
        if not is_failing(attempts=attempts, errors=errors):
            continue
        worst = max(ERROR_CLASSES, key=lambda name: errors_by_class[name])
        label = environments.label(row["chain__environment"], row["chain__name"])
        failing.append(Failing(label, row["provider"], row["model"], attempts, errors, worst))
    return sorted(failing, key=lambda step: (-step.error_rate, step.chain, step.provider, step.model))


# --- evidence: what provider alerts weigh ------------------------------------------------------


def _evidence_since(now: datetime) -> datetime:
    """The first minute the alerts' window reads (as ``failing_steps``)."""
    return minute_of(now - timedelta(minutes=settings.PROVIDER_FAILING_MINUTES))


@dataclass(frozen=True)
class InstanceEvidence:
    """One instance's attempts on one step over the alerts' window, and the tokens its
    reports came with."""

    client: str
    tokens: frozenset[str]
    served: int
    errors: Mapping[str, int]
    """Attempts by error class (``ERROR_CLASSES``)."""

    @property
    def attempts(self) -> int:
        return self.served + sum(self.errors.values())

    @property
    def sees_failing(self) -> bool:
        """Whether this instance's own attempts are failing by the error-rate rule."""
        errors = sum(self.errors.values())
        return errors > 0 and errors * 100 >= settings.PROVIDER_FAILING_ERROR_PERCENT * self.attempts


@dataclass(frozen=True)
class StepEvidence:
    """What the instances that poll a chain reported about one of its steps over the alerts'
    window: the ``provider_failing`` alert's rule and its words."""

    chain: str
    provider: str
    model: str
    instances: tuple[InstanceEvidence, ...]

    @property
    def subject(self) -> str:
        return f"{self.provider}/{self.model}"

    @cached_property
    def weighed(self) -> dict[str, float]:
        """Attempts by class over every reporting instance, each instance's weighing at most
        as much as the median instance's (its own error rate kept): an instance that claims a
        thousand times what the others saw counts as one typical instance."""
        attempts = [evidence.attempts for evidence in self.instances if evidence.attempts]
        cap = statistics.median(attempts) if attempts else 0.0
        totals = dict.fromkeys(("served", *ERROR_CLASSES), 0.0)
        for evidence in self.instances:
            if not evidence.attempts:
                continue
            weight = min(1.0, cap / evidence.attempts)
            totals["served"] += evidence.served * weight
            for name, count in evidence.errors.items():
                totals[name] += count * weight
        return totals

    @property
    def attempts(self) -> float:
        return sum(self.weighed.values())

    @property
    def errors(self) -> float:
        return self.attempts - self.weighed["served"]

    @property
    def error_rate(self) -> float:
        return self.errors / self.attempts if self.attempts else 0.0

    @property
    def worst(self) -> str:
        """The error class with the most (weighed) attempts."""
        return max(ERROR_CLASSES, key=lambda name: self.weighed[name])

    @property
    def failing_instances(self) -> tuple[InstanceEvidence, ...]:
        """The instances whose own attempts are failing."""
        return tuple(evidence for evidence in self.instances if evidence.sees_failing)

    @property
    def tokens(self) -> list[str]:
        """The tokens the failing instances' reports came with: where the evidence came from."""
        return sorted({token for evidence in self.failing_instances for token in evidence.tokens})

    @property
    def alerting(self) -> bool:
        """PROVIDER_ALERT_MIN_INSTANCES polling instances see it failing, and the weighed
        attempts are failing by the error-rate rule (``is_failing``)."""
        return len(self.failing_instances) >= settings.PROVIDER_ALERT_MIN_INSTANCES and is_failing(
            attempts=self.attempts, errors=self.errors
        )

    def describe(self) -> str:
        failing = len(self.failing_instances)
        return (
            f"{self.subject} on {self.chain}: {self.error_rate * 100:.1f} % errors "
            f"(mostly {_CLASS_WORDS[self.worst]}) over the last {settings.PROVIDER_FAILING_MINUTES} min, "
            f"{self.errors:.0f} of {self.attempts:.0f} attempts; {failing} of {len(self.instances)} instance(s) "
            f"polling the chain see it failing ({_tokens(self.tokens)})"
        )


@dataclass(frozen=True)
class CredentialEvidence:
    """The polling instances that saw a provider reject their credentials over the alerts'
    window, and the tokens their reports came with: the ``provider_credentials`` alert's."""

    chain: str
    provider: str
    clients: list[str]
    tokens: list[str]

    def describe(self) -> str:
        shown = ", ".join(self.clients[:5]) + (f" and {len(self.clients) - 5} more" if len(self.clients) > 5 else "")
        return (
            f"{self.provider} rejected the credentials (HTTP 401/403) of {len(self.clients)} instance(s) of "
            f"{self.chain} in the last {settings.PROVIDER_FAILING_MINUTES} min: {shown} ({_tokens(self.tokens)}); "
            "check its API key"
        )


def _tokens(names: list[str]) -> str:
    return f"token{'' if len(names) == 1 else 's'} {', '.join(names)}"


class HeldAlert(TypedDict):
    """A provider alert whose condition holds by its instances but not by its tokens: not
    raised (it would page), and why."""

    kind: Annotated[str, Help("provider_failing or provider_credentials")]
    subject: Annotated[str, Help("the step (provider/model) or the provider")]
    tokens: Annotated[list[str], Help("the tokens its evidence came with")]
    why: Annotated[str, Help("why it is not raised, in plain words")]


@dataclass(frozen=True)
class AlertEvidence:
    failing: list[StepEvidence]
    """The steps ``provider_failing`` is raised for, worst first."""
    credentials: list[CredentialEvidence]
    """The providers ``provider_credentials`` is raised for."""
    tokens: dict[tuple[str, str, str], TokenEvidence]
    """The tokens of each raised alert's evidence, by (kind, chain, subject)."""
    held: dict[str, list[HeldAlert]]
    """By chain: the alerts whose instances are enough but whose tokens are not."""


def _held(kind: str, subject: str, tokens: TokenEvidence) -> HeldAlert:
    return {
        "kind": kind,
        "subject": subject,
        "tokens": list(tokens.tokens),
        "why": f"{kind} on {subject} not raised: {tokens.why_not()}",
    }


def credential_instances_needed() -> int:
    """How many polling instances must see a provider reject their credentials."""
    return max(settings.PROVIDER_CREDENTIALS_INSTANCES, settings.PROVIDER_ALERT_MIN_INSTANCES)


def alert_evidence(*, now: datetime | None = None) -> AlertEvidence:
    """What the provider alerts stand on now: the evidence of the instances that polled their
    chain within FLEET_INSTANCE_TTL_MINUTES, over the last PROVIDER_FAILING_MINUTES (one
    query); a report from an instance that stopped polling no longer counts."""
    now = now or timezone.now()
    polled = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    rows = (
        ProviderEvidence.objects.filter(minute__gte=_evidence_since(now), instance__last_seen_at__gte=polled)
        .values_list(
            "instance__chain__environment", "instance__chain__name", "provider", "model", "instance__client", "token"
        )
        .annotate(*(Sum(name) for name in _EVIDENCE))
        .order_by()
    )
    by_instance: dict[tuple[str, str, str, str], tuple[set[str], list[int]]] = {}
    for environment, name, provider, model, client, token, *sums in rows:
        chain = environments.label(environment, name)
        tokens, counts = by_instance.setdefault((chain, provider, model, client), (set(), [0] * len(_EVIDENCE)))
        tokens.add(token)
        for index, count in enumerate(sums):
            counts[index] += count or 0
    steps: dict[tuple[str, str, str], list[InstanceEvidence]] = defaultdict(list)
    for (chain, provider, model, client), (tokens, (served, *errors)) in sorted(by_instance.items()):
        steps[chain, provider, model].append(
            InstanceEvidence(client, frozenset(tokens), served, dict(zip(ERROR_CLASSES, errors, strict=True)))
        )
    every = [StepEvidence(chain, provider, model, tuple(found)) for (chain, provider, model), found in steps.items()]
    weighed: dict[tuple[str, str, str], TokenEvidence] = {}
    held: dict[str, list[HeldAlert]] = defaultdict(list)
    failing = []
    for step in sorted(
        (step for step in every if step.alerting),
        key=lambda step: (-step.error_rate, step.chain, step.provider, step.model),
    ):
        agreeing = weigh_tokens(step.tokens)
        if agreeing.enough:
            failing.append(step)
            weighed["provider_failing", step.chain, step.subject] = agreeing
        else:
            held[step.chain].append(_held("provider_failing", step.subject, agreeing))
    rejected: dict[tuple[str, str], dict[str, frozenset[str]]] = defaultdict(dict)
    for step in every:
        for evidence in step.instances:
            if evidence.errors.get("credentials"):
                seen = rejected[step.chain, step.provider]
                seen[evidence.client] = seen.get(evidence.client, frozenset()) | evidence.tokens
    credentials = []
    for (chain, provider), seen in sorted(rejected.items()):
        if len(seen) < credential_instances_needed():
            continue
        found = CredentialEvidence(chain, provider, sorted(seen), sorted(set().union(*seen.values())))
        agreeing = weigh_tokens(found.tokens)
        if agreeing.enough:
            credentials.append(found)
            weighed["provider_credentials", chain, provider] = agreeing
        else:
            held[chain].append(_held("provider_credentials", provider, agreeing))
    return AlertEvidence(failing=failing, credentials=credentials, tokens=weighed, held=dict(held))


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
        return preset.is_degraded

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


def token_totals() -> dict[tuple[str, str, str], tuple[int, int]]:
    """Input and output tokens of each (chain, provider, model) since its first report: the
    minutes kept plus what ``prune`` moved out of them, for ``/metrics`` (two queries)."""
    totals: dict[tuple[str, str, str], tuple[int, int]] = {}
    kept = (
        ProviderHealthMinute.objects.exclude(model="")
        .values_list("chain__environment", "chain__name", "provider", "model")
        .annotate(Sum("input_tokens"), Sum("output_tokens"))
        .order_by()
    )
    moved = ProviderTokenTotal.objects.values_list(
        "chain__environment", "chain__name", "provider", "model", "input_tokens", "output_tokens"
    )
    for environment, name, provider, model, tokens_in, tokens_out in [*kept, *moved]:
        chain = environments.label(environment, name)
        before = totals.get((chain, provider, model), (0, 0))
        totals[chain, provider, model] = (before[0] + (tokens_in or 0), before[1] + (tokens_out or 0))
    return {key: counts for key, counts in sorted(totals.items()) if any(counts)}


def totals(*, now: datetime | None = None) -> list[dict[str, Any]]:
    """Per chain x provider x model over the last 5 minutes, for ``/metrics`` (the chain by its
    label: ``chain``)."""
    now = now or timezone.now()
    sums = {name: Sum(name) for name in (*OUTCOME_CLASSES, "breaker_openings")}
    rows = (
        ProviderHealthMinute.objects.filter(minute__gte=minute_of(now - RECENT))
        .values("chain__environment", "chain__name", "provider", "model")
        .annotate(**sums)
        .order_by("chain__name", "chain__environment", "provider", "model")
    )
    return [{**row, "chain": environments.label(row["chain__environment"], row["chain__name"])} for row in rows]


__all__ = [
    "ERROR_CLASSES",
    "AlertEvidence",
    "CredentialEvidence",
    "Failing",
    "InstanceEvidence",
    "StepEvidence",
    "alert_evidence",
    "credential_instances_needed",
    "failing_steps",
    "health_by_chain",
    "health_by_step",
    "healthiest_preset",
    "is_failing",
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
