"""Recording which service instance read which chain version, off the hot path.

Reads carry ``X-Chain-Client: {service}/{instance}`` and ``X-Chain-Applied-Version: {n}``.
Recording them must cost the hot path nothing, so a read only notes them in memory
(``FleetRecorder.seen``); a flush writes an instance at most once a minute unless its version
changed, in which case it is written at the next flush with the time the new version was
first seen (that time is how the dashboard knows how fast a change reached the fleet).

Any service may make up instance names, so each row names the token whose read (or relay's
fleet report) first recorded it, and a token's rows are capped at FLEET_MAX_INSTANCES_PER_TOKEN:
after a flush that wrote instances this process had not written before, each of their tokens'
rows past the cap are pruned, the oldest (by last seen) first, and counted per chain
(``evidence.count_refused``), which fleet status shows as the token having reached its cap.
A row keeps the token that first recorded it: a made-up name that is another service's
instance refreshes that row but never moves it under the flooding token's cap, to be pruned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from audit import evidence
from audit.models import MAX_CLIENT_LENGTH, FleetInstance, RefusedReason
from presets import selectors
from presets.models import Chain, ServiceToken

log = logging.getLogger(__name__)

WRITE_EVERY = timedelta(minutes=1)
_WRITE_EVERY_S = WRITE_EVERY.total_seconds()
# What a process remembers writing, at most: past it, it forgets (the next read of each
# instance is written again). Bounds its memory against floods of made-up names.
WRITTEN_MAX = 200_000
# Rows deleted per statement when a token's rows are pruned to its cap.
PRUNE_BATCH = 1_000
# Instances a process notes between two flushes, at most (``FleetRecorder.note``).
NOTED_MAX = 200_000
# The most digits of an applied version: PostgreSQL's integer (2**31 - 1) has ten.
MAX_VERSION_LENGTH = 10


@dataclass(slots=True)
class _Seen:
    """An instance's reads noted since the last flush; times are ``time.time()`` floats
    (cheaper on every read than a datetime; made datetimes when written)."""

    version: int
    version_seen_at: float
    last_seen_at: float
    token: int | None = None


def parse_identity(client: str | None, version: str | None) -> tuple[str, int] | None:
    """The (client, applied version) a read identifies itself with, if it does.

    Whatever the database cannot store is no identity: a client with a control character (a
    NUL, a newline) or not valid UTF-8, a version outside PostgreSQL's integer (0..2**31-1)."""
    if not client or not version or len(client) > MAX_CLIENT_LENGTH or "/" not in client:
        return None
    if not client.isprintable() or len(version) > MAX_VERSION_LENGTH or not (version.isascii() and version.isdigit()):
        return None
    applied = int(version)
    return (client, applied) if applied <= 2**31 - 1 else None


class FleetRecorder:
    """Per-process buffer of who read what; ``flush`` writes what is worth writing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], _Seen] = {}
        # Instance -> the version and the last-seen time (time.time()) last written.
        self._written: dict[tuple[str, str], tuple[int, float]] = {}
        # The read front's notes, as read (``note``): (chain, X-Chain-Client) -> the
        # X-Chain-Applied-Version, the token and when that version was first read.
        self._noted: dict[tuple[str, bytes], tuple[bytes, int | None, float]] = {}

    def note(self, chain: str, client: bytes, applied_version: bytes, token: int | None) -> None:
        """Note a read of ``chain`` by the instance its headers name, as they came: the read
        front's, on every read (plain and long polls), from its event loop's thread only. Its
        parsing and the rule of what to write wait for the flush (``take_noted``, then
        ``flush(noted)``): here one lookup, and nothing new while the instance reads the same
        version again. At most NOTED_MAX instances between two flushes."""
        if not applied_version or len(client) > MAX_CLIENT_LENGTH or len(applied_version) > MAX_VERSION_LENGTH:
            # Never an identity (``parse_identity``): nothing to write, nor to hold until the
            # flush (a made-up name of a header's length would be kept NOTED_MAX times).
            return
        key = (chain, client)
        held = self._noted.get(key)
        if held is None:
            if len(self._noted) >= NOTED_MAX:
                return
        elif held[0] == applied_version:
            return
        self._noted[key] = (applied_version, token, time.time())

    def adopt_noted(self, chain: str, client: str) -> bool:
        """Whether the read front noted ``client`` reading ``chain`` since its last flush; if
        so, it is taken as ``seen`` now, for the next ``flush`` (any thread: it only looks up
        the notes, which stay for the front's own flush)."""
        held = self._noted.get((chain, client.encode("latin-1", "replace")))
        if held is None:
            return False
        identity = parse_identity(client, held[0].decode("latin-1"))
        if identity is None:
            return False
        self._seen_at(chain, *identity, held[2], held[1])
        return True

    def take_noted(self) -> dict[tuple[str, bytes], tuple[bytes, int | None, float]]:
        """What ``note`` noted since the last take, for ``flush`` (from the same thread)."""
        noted, self._noted = self._noted, {}
        return noted

    def seen(
        self, chain: str, client: str, version: int, at: datetime | None = None, *, token: int | None = None
    ) -> None:
        """Note a read made with ``token`` (its id; None: a session's) (no I/O). Cheap enough
        for every request on the hot path."""
        self._seen_at(chain, client, version, time.time() if at is None else at.timestamp(), token)

    def _seen_at(self, chain: str, client: str, version: int, at_s: float, token: int | None) -> None:
        key = (chain, client)
        with self._lock:
            written = self._written.get(key)
            if written is not None and written[0] == version and at_s - written[1] < _WRITE_EVERY_S:
                return
            pending = self._pending.get(key)
            if pending is not None and pending.version == version:
                pending.last_seen_at = at_s
            else:
                self._pending[key] = _Seen(version, at_s, at_s, token)

    def forget(self) -> None:
        """Drop what this process noted and remembers writing, so the next read of every
        instance is written (the database was emptied: tests, a restore)."""
        with self._lock:
            self._pending.clear()
            self._written.clear()
            self._noted = {}

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def flush(self, noted: dict[tuple[str, bytes], tuple[bytes, int | None, float]] | None = None) -> int:
        """Take ``noted`` (``take_noted``'s: each instance whose headers are a valid identity,
        as ``seen``), write the noted reads, then prune the rows of the tokens that recorded
        instances new to this process past their cap; returns how many instances were written."""
        for (chain, client), (applied, token, at) in (noted or {}).items():
            identity = parse_identity(client.decode("latin-1"), applied.decode("latin-1"))
            if identity is not None:
                self._seen_at(chain, *identity, at, token)
        with self._lock:
            pending, self._pending = self._pending, {}
            # Instances this process has not written lately may be new rows: their tokens'
            # caps are checked after the write (those it rewrites add no row).
            growing = {
                seen.token for key, seen in pending.items() if seen.token is not None and key not in self._written
            }
        if not pending:
            return 0
        chains = chain_ids({c for c, _ in pending})
        pending = {key: seen for key, seen in pending.items() if key[0] in chains}
        rows = [(chains[chain], client, seen) for (chain, client), seen in pending.items()]
        written = len(rows)
        try:
            _upsert(rows)
        except DatabaseError:
            # One row the database refuses must not drop every honest instance's: write them
            # one by one and leave out only the rows that fail.
            written = 0
            for row in rows:
                try:
                    _upsert([row])
                    written += 1
                except DatabaseError as exc:
                    log.warning("fleet status: dropped instance %r: %s", row[1], exc)
        with self._lock:
            if len(self._written) + len(pending) > WRITTEN_MAX:
                self._written.clear()
            for key, seen in pending.items():
                self._written[key] = (seen.version, seen.last_seen_at)
        if growing:
            prune_to_cap(growing)
        return written


def chain_ids(keys: Iterable[str]) -> dict[str, int]:
    """The ids of the chains these keys name (``environments.label``), one query per
    environment; unknown keys left out."""
    return {key: chain.pk for key, chain in selectors.chains_by_label(keys).items()}


def prune_to_cap(tokens: set[int], *, now: datetime | None = None) -> int:
    """Delete each token's instance rows past FLEET_MAX_INSTANCES_PER_TOKEN, the least recently
    seen first, and count them per chain under the token's name; returns how many."""
    cap = settings.FLEET_MAX_INSTANCES_PER_TOKEN
    pruned = 0
    for token in sorted(tokens):
        rows = FleetInstance.objects.filter(token_id=token).order_by("-last_seen_at", "-id")
        doomed = list(rows.values_list("pk", "chain_id")[cap:])
        if not doomed:
            continue
        by_chain: dict[int, int] = {}
        for start in range(0, len(doomed), PRUNE_BATCH):
            batch = doomed[start : start + PRUNE_BATCH]
            # The instance's provider evidence and reporter rows go with it (a cascade).
            FleetInstance.objects.filter(pk__in=[pk for pk, _ in batch]).delete()
            for _, chain in batch:
                by_chain[chain] = by_chain.get(chain, 0) + 1
        name = ServiceToken.objects.filter(pk=token).values_list("name", flat=True).first() or f"#{token}"
        chains = dict(Chain.objects.filter(pk__in=by_chain).values_list("pk", "name"))
        for chain, count in by_chain.items():
            evidence.count_refused(
                token=name, reason=RefusedReason.INSTANCES_PRUNED, chain=chains.get(chain, ""), count=count, now=now
            )
        log.warning(
            "fleet status: token %s has more than %d instance rows (FLEET_MAX_INSTANCES_PER_TOKEN): pruned the "
            "%d least recently seen",
            name,
            cap,
            len(doomed),
        )
        pruned += len(doomed)
    return pruned


def _upsert(rows: list[tuple[int, str, _Seen]]) -> None:
    """Insert or update each instance: a new one starts at its first read; a known one keeps
    ``version_seen_at`` unless its version changed, and its ``last_seen_at`` never goes back
    (two web processes may write the same instance). PostgreSQL and SQLite both read
    ``excluded`` and the old row this way.

    On PostgreSQL the rows go as one statement over arrays (``unnest``): after a change every
    instance of the fleet has a new version, and a flush writes thousands of rows while the
    process is answering polls; one statement with seven arrays, adapted in C, costs that
    process a fraction of the CPU that a statement per row did (bench/README.md, "Long
    polls"). SQLite has no arrays: a statement per row, sent together."""
    table = connection.ops.quote_name(FleetInstance._meta.db_table)
    update = (
        "ON CONFLICT (chain_id, client) DO UPDATE SET "
        f"version_seen_at = CASE WHEN {table}.applied_version = excluded.applied_version "
        f"THEN {table}.version_seen_at ELSE excluded.version_seen_at END, "
        "applied_version = excluded.applied_version, "
        f"last_seen_at = CASE WHEN excluded.last_seen_at > {table}.last_seen_at "
        f"THEN excluded.last_seen_at ELSE {table}.last_seen_at END, "
        f"token_id = COALESCE({table}.token_id, excluded.token_id)"
    )
    columns = "(chain_id, client, applied_version, version_seen_at, first_seen_at, last_seen_at, token_id)"
    instants = [(_instant(seen.version_seen_at), _instant(seen.last_seen_at)) for _, _, seen in rows]
    if connection.vendor == "postgresql":
        with transaction.atomic():
            # psycopg's own cursor, binding on the server: the arrays go in binary, dumped in C.
            # Django's cursor binds on the client and quotes each element in Python (~60 ms
            # for 5,000 rows). Not prepared: PgBouncer in transaction mode keeps no statement.
            connection.ensure_connection()
            with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
                cursor.execute(
                    f"INSERT INTO {table} {columns} SELECT * FROM unnest(%b::bigint[], %b::text[], %b::integer[], "
                    f"%b::timestamptz[], %b::timestamptz[], %b::timestamptz[], %b::bigint[]) {update}",
                    [
                        [chain_id for chain_id, _, _ in rows],
                        [client for _, client, _ in rows],
                        [seen.version for _, _, seen in rows],
                        [first for first, _ in instants],
                        [first for first, _ in instants],
                        [last for _, last in instants],
                        [seen.token for _, _, seen in rows],
                    ],
                    prepare=False,
                )
        return
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} {columns} VALUES (%s, %s, %s, %s, %s, %s, %s) {update}",
            [
                (chain_id, client, seen.version, adapt(first), adapt(first), adapt(last), seen.token)
                for (chain_id, client, seen), (first, last) in zip(rows, instants, strict=True)
            ],
        )


def _instant(at: float) -> datetime:
    """A ``time.time()`` as the aware datetime the columns hold (to the microsecond)."""
    return datetime.fromtimestamp(at, tz=UTC)


recorder = FleetRecorder()
