"""Fleet status, read: which service instances follow each chain, at which version, since
when; which providers served its requests lately; which versions were refused and why.
(``audit.fleet_recorder`` writes instances as they read; ``audit.usage`` takes the SDK's
usage reports.)"""

from __future__ import annotations

import operator
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from typing import Annotated, Any, TypedDict

from django.conf import settings
from django.db import connection, models
from django.db.models import Count, F, Max, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from audit import evidence
from audit.models import FleetInstance, ProviderUsage, RejectedVersion
from presets.documents import Help, Time, format_time
from presets.models import Chain, Selection


def last_served(chain: Chain) -> dict[str, datetime]:
    """When each provider last served a request of this chain, across the fleet."""
    rows = ProviderUsage.objects.filter(chain=chain).values("provider").annotate(last=models.Max("last_served_at"))
    return {row["provider"]: row["last"] for row in rows}


def idle_head_warning(chain: Chain, steps: list[dict[str, Any]], now: datetime | None = None) -> str | None:
    """A warning when a preset's head has not served a request of this chain in 24 h."""
    return idle_head_warnings(chain, now)(steps)


def idle_head_warnings(chain: Chain, now: datetime | None = None) -> Callable[[list[dict[str, Any]]], str | None]:
    """``idle_head_warning`` for many presets of one chain, with the usage read once.

    Only a chain whose services report usage can tell an idle provider from one nobody
    measures: with no usage reported for the chain in 24 h, nothing is warned about."""
    now = now or timezone.now()
    last = last_served(chain)
    measured = any(now - served <= timedelta(hours=24) for served in last.values())

    def warning(steps: list[dict[str, Any]]) -> str | None:
        if not measured:
            return None
        head = steps[0]["provider"]
        served = last.get(head)
        if served is not None and now - served <= timedelta(hours=24):
            return None
        when = f"since {format_time(served)}" if served else "in the usage reports"
        return (
            f"{head} has not served a {chain.name} request in the last 24 h ({when} none "
            f"reported): check it is reachable before pinning it first"
        )

    return warning


# GET /api/v1/fleet lists each chain's first DETAIL_SHOWN live instances (``?detail=`` up to
# DETAIL_MAX) and its newest REJECTED_SHOWN refusals: a fleet of thousands pages through
# GET /api/v1/chains/{name}/instances instead (INSTANCES_PAGE_MAX a page).
DETAIL_SHOWN = 100
DETAIL_MAX = 500
REJECTED_SHOWN = 100
INSTANCES_PAGE_MAX = 500


def live_instances(chain: Chain, now: datetime | None = None) -> QuerySet[FleetInstance]:
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    return FleetInstance.objects.filter(chain=chain, last_seen_at__gte=cutoff)


class Refusal(TypedDict):
    client: str
    reason: str
    at: Time


class InstanceStatus(TypedDict):
    client: str
    applied_version: int
    version_seen_at: Time
    last_seen_at: Time


class FleetStatus(TypedDict):
    """How far a chain's live version has reached across the service instances."""

    name: str
    version: int
    instances: int
    on_version: int
    ahead: Annotated[
        int, Help("instances on a later version than the server's: a restored database whose epoch was not raised")
    ]
    applied_p50_s: float | None
    applied_max_s: float | None
    rejected: Annotated[
        list[Refusal], Help(f"the newest {REJECTED_SHOWN} refusals of this version (rejected_count has them all)")
    ]
    rejected_count: Annotated[int, Help("how many instances refused this version")]
    detail: Annotated[
        list[InstanceStatus],
        Help(
            f"the first live instances by client ({DETAIL_SHOWN} unless ?detail= says how many, up to "
            f"{DETAIL_MAX}); the rest from GET /api/v1/chains/{{name}}/instances?after=<detail_after>"
        ),
    ]
    detail_after: Annotated[
        str | None,
        Help(
            "null when detail lists every live instance; else the after= that continues it on "
            "GET /api/v1/chains/{name}/instances (empty with ?detail=0: from the first)"
        ),
    ]
    capped_tokens: Annotated[
        list[str],
        Help(
            "tokens whose instance rows on this chain were pruned at FLEET_MAX_INSTANCES_PER_TOKEN within "
            "FLEET_INSTANCE_TTL_MINUTES: the counts from them are partial (the oldest were dropped)"
        ),
    ]


class FleetSummary(FleetStatus):
    """A chain's fleet status with its one line for people."""

    summary: str


def fleet_statuses(
    selections: Iterable[Selection],
    now: datetime | None = None,
    *,
    detail: int = DETAIL_SHOWN,
    rejected: int = REJECTED_SHOWN,
) -> dict[int, FleetStatus]:
    """Each chain's fleet status, by chain id: how far its live version has reached (counts,
    apply delays, refusals), with its first ``detail`` live instances by client and its
    newest ``rejected`` refusals (a page's one line needs neither: 0 reads none).

    Two queries for any number of chains and instances, none of which sends an instance's
    row to Python: the live instances counted by chain and version with the median and
    slowest apply (``live_versions``); the refusals. Plus one a chain for ``detail``."""
    selections = list(selections)
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    on_versions, applies = live_versions(selections, cutoff)
    # Each chain's refusals of its live version: read as every listed chain's refusals of any
    # listed version (two plain conditions), counted by chain and version, the pairs kept.
    live_pairs = {(s.chain_id, s.version) for s in selections}
    refusals = RejectedVersion.objects.filter(
        chain__in={chain for chain, _ in live_pairs}, version__in={version for _, version in live_pairs}
    ).order_by()
    shown: dict[int, list[Refusal]] = defaultdict(list)
    rejected_counts: dict[int, int] = {}
    if rejected:
        # The newest refusals of each with the count of them all, in one read.
        each = [F("chain"), F("version")]
        newest = (
            refusals.annotate(
                rank=Window(RowNumber(), partition_by=each, order_by=[F("at").desc(), F("pk").desc()]),
                total=Window(Count("pk"), partition_by=each),
            )
            .filter(rank__lte=rejected)
            .values_list("chain", "version", "rank", "total", "client", "reason", "at")
        )
        for chain, version, _, total, client, reason, at in sorted(newest, key=lambda row: row[2]):
            if (chain, version) in live_pairs:
                shown[chain].append({"client": client, "reason": reason, "at": format_time(at)})
                rejected_counts[chain] = total
    else:
        counted = refusals.values("chain", "version").annotate(n=Count("pk")).values_list("chain", "version", "n")
        rejected_counts = {chain: n for chain, version, n in counted if (chain, version) in live_pairs}
    capped = evidence.capped_tokens([s.chain.name for s in selections], now=now)
    statuses: dict[int, FleetStatus] = {}
    for selection in selections:
        chain, version, changed_at = selection.chain_id, selection.version, selection.updated_at
        versions = on_versions[chain]
        instances = sum(versions.values())
        middle, slowest = applies.get(chain, ([], None))
        delays = [(seen - changed_at).total_seconds() for seen in middle]
        page = instances_page(selection.chain, now=now, size=detail) if detail else None
        statuses[chain] = {
            "name": selection.chain.name,
            "version": version,
            "instances": instances,
            "on_version": versions.get(version, 0),
            # Only a restored database (its versions went back) leaves instances on a later one.
            "ahead": sum(count for v, count in versions.items() if v > version),
            "applied_p50_s": round(statistics.median(delays), 3) if delays else None,
            "applied_max_s": round((slowest - changed_at).total_seconds(), 3) if slowest else None,
            "rejected": shown[chain],
            "rejected_count": rejected_counts.get(chain, 0),
            "detail": page.instances if page else [],
            # With detail=0 every live instance is still to be read: from the start.
            "detail_after": page.after if page else ("" if instances else None),
            "capped_tokens": capped.get(selection.chain.name, []),
        }
    return statuses


def live_versions(
    selections: list[Selection], cutoff: datetime, *, one_statement: bool | None = None
) -> tuple[dict[int, dict[int, int]], dict[int, tuple[list[datetime], datetime]]]:
    """For each chain, how many instances seen since ``cutoff`` are on each version, and the
    version_seen_at of the middle one or two whose apply delay counts and of the latest
    (``middle_applies``): those on the chain's live version, running before the change and
    on it since (an instance started later never waited for it).

    On PostgreSQL (``one_statement``, its default there) one scan of the live instances
    does both, each row compared with its own chain's version and change time only, passed
    in as a list of values: the ORM's form of that condition (one term a chain, OR-ed) cost
    more Python to build and compile than the database took to run it."""
    if one_statement is None:
        one_statement = connection.vendor == "postgresql"
    on_versions: dict[int, dict[int, int]] = defaultdict(dict)
    if not selections:
        return on_versions, {}
    if not one_statement:
        live = FleetInstance.objects.filter(chain__in=[s.chain_id for s in selections], last_seen_at__gte=cutoff)
        for chain, version, count in (
            live.order_by()
            .values("chain", "applied_version")
            .annotate(n=Count("pk"))
            .values_list("chain", "applied_version", "n")
        ):
            on_versions[chain][version] = count
        timed = _any(
            Q(
                chain=s.chain_id,
                applied_version=s.version,
                first_seen_at__lt=s.updated_at,
                version_seen_at__gte=s.updated_at,
            )
            for s in selections
        )
        return on_versions, middle_applies(live.filter(timed))
    table = connection.ops.quote_name(FleetInstance._meta.db_table)
    counts = "f.applied_version = s.version AND f.first_seen_at < s.updated_at AND f.version_seen_at >= s.updated_at"
    values = ", ".join(["(%s::bigint, %s::integer, %s::timestamptz)"] * len(selections))  # the columns' types
    sql = (
        f"WITH s (chain_id, version, updated_at) AS (VALUES {values}) "
        "SELECT f.chain_id, f.applied_version, count(*), "
        f"{_MIDDLE_TWO.format('f.version_seen_at')} "
        f"FILTER (WHERE {counts}), max(f.version_seen_at) FILTER (WHERE {counts}) "
        f"FROM {table} f JOIN s ON f.chain_id = s.chain_id WHERE f.last_seen_at >= %s "
        "GROUP BY f.chain_id, f.applied_version"
    )
    params: list[Any] = [value for s in selections for value in (s.chain_id, s.version, s.updated_at)]
    applies: dict[int, tuple[list[datetime], datetime]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, cutoff])
        for chain, version, count, middle, slowest in cursor.fetchall():
            on_versions[chain][version] = count
            if slowest is not None:
                applies[chain] = (middle, slowest)
    return on_versions, applies


def middle_applies(timed: QuerySet[FleetInstance]) -> dict[int, tuple[list[datetime], datetime]]:
    """For each chain of ``timed`` (instances whose apply delay counts), the version_seen_at
    of its middle instance or two, and the latest one, wherever the database is (SQLite:
    ``make run``).

    A delay is version_seen_at - the change's updated_at, so a chain's delays sort as its
    version_seen_at do: the median is the middle one of n (odd n: rank (n + 1) / 2) or the
    mean of the middle two (even n: ranks n / 2 and n / 2 + 1), as statistics.median takes
    it. Window functions rank each chain's rows and keep those whose 2 * rank - n is 0, 1 or
    2; PostgreSQL's ordered-set aggregate (``_MIDDLE_TWO``) picks the same rows in half the
    time (bench/history_pages.py), in ``live_versions``."""
    by_chain = F("chain")
    ranked = (
        timed.order_by()
        .annotate(
            rank=Window(RowNumber(), partition_by=by_chain, order_by=F("version_seen_at").asc()),
            n=Window(Count("pk"), partition_by=by_chain),
            slowest=Window(Max("version_seen_at"), partition_by=by_chain),
        )
        .annotate(middle=2 * F("rank") - F("n"))
        .filter(middle__gte=0, middle__lte=2)
        .values_list("chain", "version_seen_at", "slowest")
    )
    applies: dict[int, tuple[list[datetime], datetime]] = {}
    for chain, seen, slowest in ranked:
        applies.setdefault(chain, ([], slowest))[0].append(seen)
    return applies


# PostgreSQL: the lower and the upper middle value of a sorted column, as an array (the same
# value twice for an odd count). percentile_disc(p) is the value at row ceil(p * n): 0.5
# gives the lower middle (row n / 2 of an even n, (n + 1) / 2 of an odd one), and 0.5 + 1e-10
# the next row for an even n but the same row for an odd one: n * 1e-10 is above float
# rounding for any n, and below the half row an odd n has to spare for any n under 5 * 10**9.
_MIDDLE_TWO = "percentile_disc(ARRAY[0.5, 0.5000000001]) WITHIN GROUP (ORDER BY {})"


def fleet_summaries(selections: Iterable[Selection], now: datetime | None = None) -> dict[int, str]:
    """Each chain's one line for people (``fleet_summary``), by chain id, read at once."""
    statuses = fleet_statuses(selections, now, detail=0, rejected=0)
    return {chain: fleet_summary(status) for chain, status in statuses.items()}


def _any(conditions: Iterable[Q]) -> Q:
    """The conditions OR-ed; none matches nothing."""
    return reduce(operator.or_, conditions, Q(pk__in=[]))


@dataclass(frozen=True)
class InstancesPage:
    """One page of a chain's live instances by client, and where the next one starts."""

    instances: list[InstanceStatus]
    after: str | None  # the next page's ``after``; None on the last page


def instances_page(chain: Chain, *, now: datetime | None = None, after: str = "", size: int) -> InstancesPage:
    """The live instances whose client sorts after ``after`` (keyset: one index range read at
    any depth, no OFFSET), ``size`` of them."""
    rows = list(
        live_instances(chain, now)
        .filter(client__gt=after)
        .order_by("client")
        .values_list("client", "applied_version", "version_seen_at", "last_seen_at")[: size + 1]
    )
    return InstancesPage(
        instances=[
            {
                "client": client,
                "applied_version": version,
                "version_seen_at": format_time(version_seen_at),
                "last_seen_at": format_time(last_seen_at),
            }
            for client, version, version_seen_at, last_seen_at in rows[:size]
        ],
        after=rows[size - 1][0] if len(rows) > size else None,
    )


def fleet_summary(fleet: FleetStatus) -> str:
    """One line for people: '38 of 40 instances on v18; p50 applied 0.3 s after the change'."""
    if not fleet["instances"]:
        return f"no service instance has read this chain in the last {settings.FLEET_INSTANCE_TTL_MINUTES} min"
    line = f"{fleet['on_version']} of {fleet['instances']} instances on v{fleet['version']}"
    if fleet["applied_p50_s"] is not None:
        p50 = fleet["applied_p50_s"]
        took = f"{p50 * 1000:.0f} ms" if p50 < 1 else f"{p50:.1f} s"
        line += f"; p50 applied {took} after the change"
    if fleet["rejected_count"]:
        line += f"; {fleet['rejected_count']} refused it"
    if fleet["ahead"]:
        line += (
            f"; {fleet['ahead']} instance{'s' if fleet['ahead'] != 1 else ''} ahead of the "
            "server: restored database? run manage.py raise_epoch"
        )
    if fleet["capped_tokens"]:
        capped = fleet["capped_tokens"]
        line += (
            f"; token{'s' if len(capped) != 1 else ''} {', '.join(capped)} reached the cap of "
            f"{settings.FLEET_MAX_INSTANCES_PER_TOKEN} instances (FLEET_MAX_INSTANCES_PER_TOKEN): the oldest are "
            "pruned, so these counts are partial"
        )
    return line
