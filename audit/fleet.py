"""Fleet status: which service instances follow each chain, at which version, since when;
which providers they served requests from; which versions they refused and why.

Reads carry ``X-Chain-Client: {service}/{instance}`` and ``X-Chain-Applied-Version: {n}``.
Recording them must cost the hot path nothing, so a read only notes them in memory
(``FleetRecorder.seen``); a flush writes an instance at most once a minute unless its version
changed, in which case it is written at the next flush with the time the new version was
first seen (that time is how the dashboard knows how fast a change reached the fleet).
"""

from __future__ import annotations

import logging
import statistics
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, models, transaction
from django.utils import timezone

from presets.models import Chain, Selection, format_time

log = logging.getLogger(__name__)

WRITE_EVERY = timedelta(minutes=1)
MAX_CLIENT_LENGTH = 200


class FleetInstance(models.Model):
    """One service instance following one chain."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="instances")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    applied_version = models.PositiveIntegerField()
    version_seen_at = models.DateTimeField(help_text="when this instance was first seen on it")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        app_label = "audit"
        ordering = ["chain", "client"]
        constraints = [
            models.UniqueConstraint(fields=["chain", "client"], name="fleet_instance_unique")
        ]

    def __str__(self) -> str:
        return f"{self.client} on {self.chain.name} v{self.applied_version}"


class ProviderUsage(models.Model):
    """Requests an instance reports a provider served for a chain."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="usage")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    provider = models.CharField(max_length=100)
    requests = models.PositiveBigIntegerField(default=0)
    last_served_at = models.DateTimeField()

    class Meta:
        app_label = "audit"
        constraints = [
            models.UniqueConstraint(fields=["chain", "client", "provider"], name="usage_unique")
        ]


class RejectedVersion(models.Model):
    """A chain version an instance refused to apply, and why."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="rejections")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    version = models.PositiveIntegerField()
    reason = models.CharField(max_length=500)
    at = models.DateTimeField()

    class Meta:
        app_label = "audit"
        ordering = ["-at"]
        constraints = [
            models.UniqueConstraint(fields=["chain", "client", "version"], name="rejection_unique")
        ]


# --- recording reads ------------------------------------------------------------------


@dataclass
class _Seen:
    version: int
    version_seen_at: datetime
    last_seen_at: datetime


def parse_identity(client: str | None, version: str | None) -> tuple[str, int] | None:
    """The (client, applied version) a read identifies itself with, if it does.

    Whatever the database cannot store is no identity: a client with a control character (a
    NUL, a newline) or not valid UTF-8, a version outside PostgreSQL's integer (0..2**31-1)."""
    if not client or not version or len(client) > MAX_CLIENT_LENGTH or "/" not in client:
        return None
    if not client.isprintable() or len(version) > 10 or not (version.isascii() and version.isdigit()):
        return None
    applied = int(version)
    return (client, applied) if applied <= 2**31 - 1 else None


class FleetRecorder:
    """Per-process buffer of who read what; ``flush`` writes what is worth writing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], _Seen] = {}
        self._written: dict[tuple[str, str], tuple[int, datetime]] = {}

    def seen(self, chain: str, client: str, version: int, at: datetime | None = None) -> None:
        """Note a read (no I/O). Cheap enough for every request on the hot path."""
        at = at or timezone.now()
        key = (chain, client)
        with self._lock:
            written = self._written.get(key)
            if written is not None and written[0] == version and at - written[1] < WRITE_EVERY:
                return
            pending = self._pending.get(key)
            if pending is not None and pending.version == version:
                pending.last_seen_at = at
            else:
                self._pending[key] = _Seen(version, at, at)

    def forget(self) -> None:
        """Drop what this process noted and remembers writing, so the next read of every
        instance is written (the database was emptied: tests, a restore)."""
        with self._lock:
            self._pending.clear()
            self._written.clear()

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def flush(self) -> int:
        """Write the noted reads; returns how many instances were written."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        chains = dict(Chain.objects.filter(name__in={c for c, _ in pending}).values_list("name", "id"))
        pending = {key: seen for key, seen in pending.items() if key[0] in chains}
        existing = {
            (i.chain_id, i.client): i
            for i in FleetInstance.objects.filter(
                chain_id__in=set(chains.values()), client__in={c for _, c in pending})
        }
        created, updated = [], []
        for (chain, client), seen in pending.items():
            instance = existing.get((chains[chain], client))
            if instance is None:
                created.append(FleetInstance(
                    chain_id=chains[chain], client=client, applied_version=seen.version,
                    version_seen_at=seen.version_seen_at, first_seen_at=seen.version_seen_at,
                    last_seen_at=seen.last_seen_at))
                continue
            if instance.applied_version != seen.version:
                instance.applied_version = seen.version
                instance.version_seen_at = seen.version_seen_at
            instance.last_seen_at = max(instance.last_seen_at, seen.last_seen_at)
            updated.append(instance)
        written = len(created) + len(updated)
        try:
            _write(created, updated)
        except DatabaseError:
            # One row the database refuses must not drop every honest instance's: write them
            # one by one and leave out only the rows that fail.
            written = 0
            for instance in created + updated:
                try:
                    if instance.pk is None:
                        _write([instance], [])
                    else:
                        _write([], [instance])
                    written += 1
                except DatabaseError as exc:
                    log.warning("fleet status: dropped instance %r: %s", instance.client, exc)
        with self._lock:
            for key, seen in pending.items():
                self._written[key] = (seen.version, seen.last_seen_at)
        return written


def _write(created: list[FleetInstance], updated: list[FleetInstance]) -> None:
    with transaction.atomic():
        # Two web processes may both create the same new instance: the loser's row is skipped.
        FleetInstance.objects.bulk_create(created, ignore_conflicts=True)
        FleetInstance.objects.bulk_update(
            updated, ["applied_version", "version_seen_at", "last_seen_at"])


recorder = FleetRecorder()


# --- usage reports ----------------------------------------------------------------------


def record_usage(*, chain: Chain, client: str, providers: dict[str, dict[str, Any]],
                 rejected: list[dict[str, Any]]) -> None:
    """Add an instance's batched usage report (counts since its last accepted report)."""
    with transaction.atomic():
        _record_usage(chain=chain, client=client, providers=providers, rejected=rejected)


def _record_usage(*, chain: Chain, client: str, providers: dict[str, dict[str, Any]],
                  rejected: list[dict[str, Any]]) -> None:
    for provider, usage in providers.items():
        row, created = ProviderUsage.objects.get_or_create(
            chain=chain, client=client, provider=provider,
            defaults={"requests": usage["requests"], "last_served_at": usage["last_served_at"]})
        if not created:
            row.requests += usage["requests"]
            row.last_served_at = max(row.last_served_at, usage["last_served_at"])
            row.save()
    for item in rejected:
        RejectedVersion.objects.update_or_create(
            chain=chain, client=client, version=item["version"],
            defaults={"reason": item["reason"][:500], "at": item["at"]})


def note_ahead(*, chain: Chain, client: str, server_epoch: int, server_version: int,
               since: datetime) -> None:
    """An instance reports holding a later document than this server serves: the database
    was restored and the epoch not raised yet (the fleet page counts such instances)."""
    log.warning("chain %s: instance %r holds a later document than this server's "
                "v%d (epoch %d) since %s: restored database? run manage.py raise_epoch",
                chain.name, client, server_version, server_epoch, format_time(since))


def last_served(chain: Chain) -> dict[str, datetime]:
    """When each provider last served a request of this chain, across the fleet."""
    rows = ProviderUsage.objects.filter(chain=chain).values("provider").annotate(
        last=models.Max("last_served_at"))
    return {row["provider"]: row["last"] for row in rows}


def idle_head_warning(chain: Chain, steps: list[dict[str, Any]], now: datetime | None = None) -> str | None:
    """A warning when a preset's head has not served a request of this chain in 24 h."""
    now = now or timezone.now()
    head = steps[0]["provider"]
    served = last_served(chain).get(head)
    if served is not None and now - served <= timedelta(hours=24):
        return None
    when = f"since {format_time(served)}" if served else "in the usage reports"
    return (f"{head} has not served a {chain.name} request in the last 24 h ({when} none "
            f"reported): check it is reachable before pinning it first")


# --- the fleet view ---------------------------------------------------------------------


def live_instances(chain: Chain, now: datetime | None = None):  # type: ignore[no-untyped-def]
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    return FleetInstance.objects.filter(chain=chain, last_seen_at__gte=cutoff)


def chain_fleet(selection: Selection, now: datetime | None = None) -> dict[str, Any]:
    """How far the live version has reached: counts, apply delays, refusals."""
    instances = list(live_instances(selection.chain, now))
    on_version = [i for i in instances if i.applied_version == selection.version]
    # Only a restored database (its versions went back) leaves instances on a later version.
    ahead = [i for i in instances if i.applied_version > selection.version]
    delays = sorted(
        (i.version_seen_at - selection.updated_at).total_seconds()
        for i in on_version if i.first_seen_at < selection.updated_at <= i.version_seen_at
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
        "rejected": [{"client": r.client, "reason": r.reason, "at": format_time(r.at)}
                     for r in rejections],
        "detail": [{"client": i.client, "applied_version": i.applied_version,
                    "version_seen_at": format_time(i.version_seen_at),
                    "last_seen_at": format_time(i.last_seen_at)} for i in instances],
    }


def fleet_summary(fleet: dict[str, Any]) -> str:
    """One line for people: '38 of 40 instances on v18; p50 applied 0.3 s after the change'."""
    if not fleet["instances"]:
        return (f"no service instance has read this chain in the last "
                f"{settings.FLEET_INSTANCE_TTL_MINUTES} min")
    line = f"{fleet['on_version']} of {fleet['instances']} instances on v{fleet['version']}"
    if fleet["applied_p50_s"] is not None:
        p50 = fleet["applied_p50_s"]
        took = f"{p50 * 1000:.0f} ms" if p50 < 1 else f"{p50:.1f} s"
        line += f"; p50 applied {took} after the change"
    if fleet["rejected"]:
        line += f"; {len(fleet['rejected'])} refused it"
    if fleet["ahead"]:
        line += (f"; {fleet['ahead']} instance{'s' if fleet['ahead'] != 1 else ''} ahead of the "
                 "server: restored database? run manage.py raise_epoch")
    return line
