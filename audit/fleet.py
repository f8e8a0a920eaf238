"""Fleet status, read: which service instances follow each chain, at which version, since
when; which providers served its requests lately; which versions were refused and why.
(``audit.fleet_recorder`` writes instances as they read; ``audit.usage`` takes the SDK's
usage reports.)"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict

from django.conf import settings
from django.db import models
from django.db.models import QuerySet
from django.utils import timezone

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
    rejected: list[Refusal]
    detail: list[InstanceStatus]


class FleetSummary(FleetStatus):
    """A chain's fleet status with its one line for people."""

    summary: str


def chain_fleet(selection: Selection, now: datetime | None = None) -> FleetStatus:
    """How far the live version has reached: counts, apply delays, refusals."""
    instances = list(live_instances(selection.chain, now))
    on_version = [i for i in instances if i.applied_version == selection.version]
    # Only a restored database (its versions went back) leaves instances on a later version.
    ahead = [i for i in instances if i.applied_version > selection.version]
    delays = sorted(
        (i.version_seen_at - selection.updated_at).total_seconds()
        for i in on_version
        if i.first_seen_at < selection.updated_at <= i.version_seen_at
    )
    rejections = RejectedVersion.objects.filter(chain=selection.chain, version=selection.version)
    return {
        "name": selection.chain.name,
        "version": selection.version,
        "instances": len(instances),
        "on_version": len(on_version),
        "ahead": len(ahead),
        "applied_p50_s": round(statistics.median(delays), 3) if delays else None,
        "applied_max_s": round(delays[-1], 3) if delays else None,
        "rejected": [{"client": r.client, "reason": r.reason, "at": format_time(r.at)} for r in rejections],
        "detail": [
            {
                "client": i.client,
                "applied_version": i.applied_version,
                "version_seen_at": format_time(i.version_seen_at),
                "last_seen_at": format_time(i.last_seen_at),
            }
            for i in instances
        ],
    }


def fleet_summary(fleet: FleetStatus) -> str:
    """One line for people: '38 of 40 instances on v18; p50 applied 0.3 s after the change'."""
    if not fleet["instances"]:
        return f"no service instance has read this chain in the last {settings.FLEET_INSTANCE_TTL_MINUTES} min"
    line = f"{fleet['on_version']} of {fleet['instances']} instances on v{fleet['version']}"
    if fleet["applied_p50_s"] is not None:
        p50 = fleet["applied_p50_s"]
        took = f"{p50 * 1000:.0f} ms" if p50 < 1 else f"{p50:.1f} s"
        line += f"; p50 applied {took} after the change"
    if fleet["rejected"]:
        line += f"; {len(fleet['rejected'])} refused it"
    if fleet["ahead"]:
        line += (
            f"; {fleet['ahead']} instance{'s' if fleet['ahead'] != 1 else ''} ahead of the "
            "server: restored database? run manage.py raise_epoch"
        )
    return line
