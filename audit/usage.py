"""The SDK's usage reports: requests served per provider, versions refused, instances ahead and
provider health, taken as evidence within limits, never as authority.

A report needs a service token (the API's view refuses a session). ``take_report`` then:

- admits it under per-minute limits every web process shares (``admit``): per instance, per
  token and per chain; past one it is refused with the seconds until its minute ends (the
  API answers 429 with ``Retry-After``) and counted under none of them;
- bounds it by the registry and the chain: providers, models and outcome classes the registry
  does not know, refusals of versions the chain never had and refusals past the newest
  ``MAX_REJECTIONS`` are dropped and counted (``Dropped``, in the answer), and reasons are cut
  to ``MAX_REASON`` characters, so a report adds a bounded number of bounded rows;
- takes provider health only from an instance fleet status knows, one that read its chain
  within FLEET_INSTANCE_TTL_MINUTES (``provider_health.record_health`` keeps it as that
  instance's evidence, with the token's name); an unknown instance's health is dropped and
  counted. So storage grows per chain and minute by at most USAGE_REPORTS_PER_CHAIN_PER_MINUTE
  bounded reports, whatever names a fleet makes up.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit import drills, evidence, provider_health
from audit.fleet_recorder import recorder
from audit.models import FleetInstance, ProviderUsage, RefusedReason, RejectedVersion, ReportWindow
from presets import environments
from presets.documents import format_time
from presets.models import Chain, ServiceToken
from presets.providers import get_registry
from presets.wire import OUTCOME_CLASSES

log = logging.getLogger(__name__)

# A report keeps the newest this many refused documents (the SDK sends at most 20, and a
# fleet rarely refuses more than one or two versions at once)...
MAX_REJECTIONS = 5
# ... and this much of each reason (the fleet page shows it; the SDK's are one line).
MAX_REASON = 300


@dataclass(frozen=True)
class Served:
    requests: int
    last_served_at: datetime


@dataclass(frozen=True)
class Refusal:
    """A document the instance refused: its version (0: none could be read) and why."""

    version: int
    reason: str
    at: datetime


@dataclass(frozen=True)
class Ahead:
    """The instance holds a later document than this server serves (see ``note_ahead``)."""

    server_epoch: int
    server_version: int
    since: datetime


@dataclass(frozen=True)
class Health:
    steps: Sequence[provider_health.StepReport]
    breaker_openings: Mapping[str, int]


@dataclass(frozen=True)
class UsageReport:
    """One instance's report, as parsed: counts since its last accepted report."""

    client: str
    providers: Mapping[str, Served] = field(default_factory=dict)
    rejected: Sequence[Refusal] = ()
    health: Health | None = None
    ahead: Ahead | None = None
    drill: drills.Section | None = None


@dataclass
class Dropped:
    """What a report held that the control plane does not keep, counted by kind."""

    providers: int = 0
    """Served counts of providers the registry does not know."""
    steps: int = 0
    """Health of steps (provider and model) the registry does not know."""
    outcome_classes: int = 0
    """Outcome classes the control plane does not know, over the report's steps."""
    breaker_openings: int = 0
    """Breaker openings of providers the registry does not know."""
    rejections: int = 0
    """Refusals of versions the chain never had, or past the newest ``MAX_REJECTIONS``."""
    health: int = 0
    """1: the health section, from an instance that has not read the chain lately."""
    drill: int = 0
    """1: the drill section, of a drill not the chain's, unknown or long ended, or from an
    instance that has not read the chain lately."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Taken:
    """The report was admitted and stored."""

    dropped: Dropped
    evidence: bool
    """Its provider health was recorded (as evidence of an instance fleet status knows)."""


_LIMITS = {
    "instance": (
        "USAGE_REPORTS_PER_INSTANCE_PER_MINUTE",
        "instance (the instances that have not read the chain lately share one, per token)",
    ),
    "token": ("USAGE_REPORTS_PER_TOKEN_PER_MINUTE", "token"),
    "chain": ("USAGE_REPORTS_PER_CHAIN_PER_MINUTE", "chain"),
}


@dataclass(frozen=True)
class Refused:
    """The report was over a limit: nothing of it was stored or counted."""

    limit: str
    """Which: ``instance``, ``token`` or ``chain``."""
    allowed: int
    retry_after: int
    """Seconds until the limit's minute ends."""

    @property
    def message(self) -> str:
        setting, per = _LIMITS[self.limit]
        return (
            f"too many usage reports: at most {self.allowed} a minute per {per} ({setting}); "
            f"send the next one in {self.retry_after} s, with the counts kept meanwhile"
        )


def reports_refusal(token: ServiceToken) -> str | None:
    """Why ``token`` may not send usage reports (counted), or None when it may."""
    if token.reports:
        return None
    evidence.count_refused(token=token.name, reason=RefusedReason.REPORTS_NOT_ALLOWED)
    return (
        f"token {token.name!r} may not send usage reports (purpose {token.purpose}: a relay forwards each "
        "service's report with the service's own token); send them with the service's token, one made "
        "with manage.py create_token NAME (without --no-reports)"
    )


def take_report(
    *, chain: Chain, live_version: int, token: ServiceToken, report: UsageReport, now: datetime | None = None
) -> Taken | Refused:
    """Admit ``report`` (sent with ``token``) under the limits, bound it, and store it in one
    transaction; or refuse it whole."""
    now = now or timezone.now()
    instance = known_instance(chain=chain, client=report.client, now=now)
    refused = admit(chain=chain, token=token, instance=instance, now=now)
    if refused is not None:
        evidence.count_refused(token=token.name, reason=RefusedReason.REPORTS_TOO_MANY, now=now)
        return refused
    dropped = Dropped()
    registry = get_registry()
    providers = {name: served for name, served in report.providers.items() if name in registry}
    dropped.providers = len(report.providers) - len(providers)
    rejected = _bounded_refusals(report.rejected, live_version=live_version, dropped=dropped)
    health = report.health
    if health is not None and instance is None:
        dropped.health, health = 1, None
    with transaction.atomic():
        _record_usage(chain=chain, client=report.client, providers=providers, rejected=rejected)
        if health is not None and instance is not None:
            steps, openings = _bounded_health(health, dropped=dropped)
            provider_health.record_health(
                chain=chain,
                instance=instance,
                token=token.name,
                steps=steps,
                breaker_openings=openings,
                now=now,
            )
        section = report.drill
        if section is not None and (
            instance is None
            or not drills.record(chain=chain, token=token.name, client=report.client, section=section, now=now)
        ):
            dropped.drill, section = 1, None
    if section is not None:
        # Stored: judging the stop conditions must not fail the report (it would be resent).
        try:
            drills.check_stop(drill=section.id, now=now)
        except Exception:
            log.exception("drill %d: checking the stop conditions after a usage report failed", section.id)
    if report.ahead is not None:
        note_ahead(chain=chain, client=report.client, **asdict(report.ahead))
    if any(dropped.as_dict().values()):
        log.debug("usage report of %r on %s (token %s): dropped %s", report.client, chain.name, token.name, dropped)
    return Taken(dropped=dropped, evidence=health is not None)


def known_instance(*, chain: Chain, client: str, now: datetime) -> int | None:
    """The fleet status row (id) of ``client`` on ``chain`` if it read the chain within
    FLEET_INSTANCE_TTL_MINUTES: what makes a report the evidence of a real instance."""
    polled = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)

    def lookup() -> int | None:
        rows = FleetInstance.objects.filter(chain=chain, client=client, last_seen_at__gte=polled)
        return next(iter(rows.values_list("pk", flat=True)[:1]), None)

    found = lookup()
    # This process's own latest reads are noted, and written once a second: they count too
    # (the read front's notes of this instance among them).
    key = environments.label(chain.environment, chain.name)
    if found is None and (recorder.adopt_noted(key, client) or recorder.has_pending) and recorder.flush():
        found = lookup()
    return found


def admit(*, chain: Chain, token: ServiceToken, instance: int | None, now: datetime) -> Refused | None:
    """Count one report under its instance, its token and its chain for the current minute, or
    refuse it (counted under none) when one of them has had its limit (``count_within``).
    An instance fleet status does not know cannot be told apart from any name made up on the
    spot: those share one instance limit per token and chain."""
    keys = {
        f"instance:{instance}" if instance is not None else f"unknown:{chain.pk}:{token.pk}": "instance",
        f"token:{token.pk}": "token",
        f"chain:{chain.pk}": "chain",
    }
    allowed = {limit: getattr(settings, _LIMITS[limit][0]) for limit in keys.values()}
    over = count_within({key: allowed[limit] for key, limit in keys.items()}, now=now)
    if over is None:
        return None
    limit = min((keys[key] for key in over.keys), key=list(_LIMITS).index)
    return Refused(limit=limit, allowed=allowed[limit], retry_after=over.retry_after)


@dataclass(frozen=True)
class Over:
    """Keys that had their limit this minute (nothing was counted), and the seconds until the
    minute ends."""

    keys: frozenset[str]
    retry_after: int


def count_within(allowed: Mapping[str, int], *, now: datetime) -> Over | None:
    """Count one under each key (``ReportWindow``) for the current minute, or under none when
    one of them has had its ``allowed``: the per-minute limits usage reports and relays' fleet
    reports (``audit.fleet_seen``) share.

    The counts are rows in the database, not in the web process: the production server runs
    several worker processes (and hosts), and the product promises everything but Celery works
    without Redis. One statement: an upsert of the rows that adds one only where the limit is
    not reached (the conditional ``ON CONFLICT ... DO UPDATE ... WHERE``); a row it leaves
    alone is not returned, and then the transaction is rolled back, so a refused call counts
    nowhere. Rows are upserted in key order, so two calls never wait on each other's rows in
    opposite orders."""
    window = provider_health.minute_of(now)
    quote = connection.ops.quote_name
    table = quote(ReportWindow._meta.db_table)
    key, start, reports, limit = (quote(name) for name in ("key", "window_start", "reports", "allowed"))
    newer = f"EXCLUDED.{start} > {table}.{start}"
    sql = (
        f"INSERT INTO {table} ({key}, {start}, {reports}, {limit}) VALUES "
        + ", ".join(["(%s, %s, 1, %s)"] * len(allowed))
        + f" ON CONFLICT ({key}) DO UPDATE SET "
        f"{reports} = CASE WHEN {newer} THEN 1 ELSE {table}.{reports} + 1 END, "
        f"{start} = CASE WHEN {newer} THEN EXCLUDED.{start} ELSE {table}.{start} END, "
        f"{limit} = EXCLUDED.{limit} "
        f"WHERE {newer} OR {table}.{reports} < EXCLUDED.{limit} "
        f"RETURNING {key}"
    )
    stamp = connection.ops.adapt_datetimefield_value(window)
    params = [value for name in sorted(allowed) for value in (name, stamp, allowed[name])]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        counted = {name for (name,) in cursor.fetchall()}
        if len(counted) == len(allowed):
            return None
        transaction.set_rollback(True)
    ends = window + timedelta(minutes=1)
    return Over(keys=frozenset(allowed.keys() - counted), retry_after=max(1, math.ceil((ends - now).total_seconds())))


def _bounded_refusals(refusals: Sequence[Refusal], *, live_version: int, dropped: Dropped) -> list[Refusal]:
    """The newest ``MAX_REJECTIONS`` refusals of versions the chain has had (0: unreadable),
    one per version, reasons cut to ``MAX_REASON``."""
    newest: dict[int, Refusal] = {}
    for refusal in sorted(refusals, key=lambda refusal: refusal.at):
        if refusal.version <= live_version:
            newest[refusal.version] = Refusal(refusal.version, refusal.reason[:MAX_REASON], refusal.at)
    kept = sorted(newest.values(), key=lambda refusal: refusal.at)[-MAX_REJECTIONS:]
    dropped.rejections = len(refusals) - len(kept)
    return kept


def _bounded_health(health: Health, *, dropped: Dropped) -> tuple[list[provider_health.StepReport], dict[str, int]]:
    """The steps and breaker openings the registry knows, with the outcome classes the control
    plane knows."""
    registry = get_registry()
    steps = []
    for step in health.steps:
        known = registry.get(step.provider)
        if known is None or step.model not in known.models:
            dropped.steps += 1
            continue
        outcomes = {name: count for name, count in step.outcomes.items() if name in OUTCOME_CLASSES}
        dropped.outcome_classes += len(step.outcomes) - len(outcomes)
        steps.append(replace(step, outcomes=outcomes))
    openings = {name: count for name, count in health.breaker_openings.items() if name in registry}
    dropped.breaker_openings = len(health.breaker_openings) - len(openings)
    return steps, openings


def _record_usage(*, chain: Chain, client: str, providers: Mapping[str, Served], rejected: Sequence[Refusal]) -> None:
    for provider, usage in providers.items():
        row, created = ProviderUsage.objects.get_or_create(
            chain=chain,
            client=client,
            provider=provider,
            defaults={"requests": usage.requests, "last_served_at": usage.last_served_at},
        )
        if not created:
            row.requests += usage.requests
            row.last_served_at = max(row.last_served_at, usage.last_served_at)
            row.save()
    for refusal in rejected:
        RejectedVersion.objects.update_or_create(
            chain=chain,
            client=client,
            version=refusal.version,
            defaults={"reason": refusal.reason, "at": refusal.at},
        )


def note_ahead(*, chain: Chain, client: str, server_epoch: int, server_version: int, since: datetime) -> None:
    """An instance reports holding a later document than this server serves: the database
    was restored and the epoch not raised yet (the fleet page counts such instances)."""
    log.warning(
        "chain %s: instance %r holds a later document than this server's "
        "v%d (epoch %d) since %s: restored database? run manage.py raise_epoch",
        chain.name,
        client,
        server_version,
        server_epoch,
        format_time(since),
    )
