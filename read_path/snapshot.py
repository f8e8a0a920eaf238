"""A per-process copy of every chain's live document, kept fresh by change notifications.

The read front answers 200 and 304 from here without touching the database, and long polls
wait here on a future each (no thread, no connection held). Freshness:

- PostgreSQL: one LISTEN connection per process; each change NOTIFYs in its own transaction
  (``notifications``), so every web process applies that chain's document as it commits.
  A cheap version check every few seconds backs the listener up across reconnects, and
  serves alone when LISTEN cannot work (``/readyz`` then says ``polling`` and why).
- other databases (SQLite for local runs): the version check runs every quarter second.

An expired pin is never served: the front asks ``services.revert_expired_and_read``.
"""

from __future__ import annotations

import asyncio
import logging

from django.db import connections

from presets import environments, services
from presets.documents import ChainDocument, encode_document, etag
from presets.exceptions import NotFound
from presets.models import Selection, current_epoch
from presets.signing import current_signer, sign, signed_by
from read_path.held import Entry, HeldDocuments, make_entry
from read_path.notifications import State, decode_payload, listen, set_state, state
from read_path.tokens import TokenSet
from read_path.worker_threads import in_worker_thread

log = logging.getLogger(__name__)

PG_SAFETY_POLL_S = 5.0
FALLBACK_POLL_S = 0.25
# Without working notifications on PostgreSQL, tokens are reloaded this often: a revoked one
# stops within a second either way.
TOKENS_POLL_S = 1.0


def entry_for(selection: Selection, *, epoch: int) -> Entry:
    return entry_from_document(sign(selection.to_document(epoch=epoch)), expires_at=selection.expires_at_ts)


def entry_from_document(document: ChainDocument, *, expires_at: float | None) -> Entry:
    """An entry from a chain document and its pin's expiry in Unix seconds (the instant the
    document states, to the millisecond)."""
    return make_entry(
        name=document["name"],
        environment=document["environment"],
        key=environments.label(document["environment"], document["name"]),
        epoch=document["epoch"],
        version=document["version"],
        etag=etag(document["epoch"], document["version"]),
        body=encode_document(document),
        expires_at=expires_at,
        key_id=signed_by(document),
    )


def _load_all() -> dict[str, Entry]:
    selections = services.revert_expired_and_read_all()
    epoch = current_epoch()
    entries = (entry_for(s, epoch=epoch) for s in selections)
    return {entry.key: entry for entry in entries}


def _load_one(key: str) -> Entry | None:
    environment, name = environments.from_label(key)
    try:
        selection = services.revert_expired_and_read(chain=name, environment=environment)
    except NotFound:
        return None
    return entry_for(selection, epoch=current_epoch())


def _versions() -> dict[str, tuple[int, int]]:
    """Every chain's (epoch, version) by its key, cheaply."""
    epoch = current_epoch()
    rows = Selection.objects.values_list("chain__environment", "chain__name", "version")
    return {environments.label(environment, name): (epoch, version) for environment, name, version in rows}


class Snapshot(HeldDocuments):
    """Every chain's live document and every live token in this process, and the long polls
    waiting on them."""

    def __init__(self) -> None:
        super().__init__(plain_environment=environments.default())
        self.tokens = TokenSet()
        # The key that signs now, as the last version check read it.
        self.key_id: str | None = None
        self._expiring: dict[str, asyncio.Future[Entry | None]] = {}
        self._started: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Load everything and start following changes (idempotent; the first caller waits)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        set_state(State("starting", "the snapshot is loading; LISTEN is not yet checked"))
        while True:
            try:
                self._replace_all(await in_worker_thread(_load_all)())
                await self.tokens.load()
                break
            except Exception as exc:  # the database may be down at start; keep trying
                log.warning("chain snapshot: initial load failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
        database = connections["default"]
        interval = PG_SAFETY_POLL_S if database.vendor == "postgresql" else FALLBACK_POLL_S
        if database.vendor == "postgresql":
            self._tasks.append(asyncio.ensure_future(listen(self, polling_every=interval)))
            self._tasks.append(asyncio.ensure_future(self._poll_tokens_unless_listening()))
        else:
            detail = f"{database.display_name} has no LISTEN/NOTIFY: chain versions are checked every {interval:g} s"
            set_state(State("polling", detail), warn=False)
        self._tasks.append(asyncio.ensure_future(self._poll_versions(interval)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled or already failed: both fine
                pass
        self._tasks.clear()
        set_state(None)

    # --- reads ----------------------------------------------------------------------

    async def expire(self, key: str) -> Entry | None:
        """The entry after reverting its expired pin (through the service function).

        Every long poll held on a pin wakes at its expiry at once: they share one revert
        instead of each taking a thread and a database connection."""
        pending = self._expiring.get(key)
        if pending is None:
            pending = self._expiring[key] = asyncio.ensure_future(self.reload(key))
            pending.add_done_callback(lambda _: self._expiring.pop(key, None))
        return await asyncio.shield(pending)

    # --- updates --------------------------------------------------------------------

    def put(self, entry: Entry) -> None:
        current = self.entries.get(entry.key)
        if current is not None and current.order >= entry.order:
            # Notifications and polls can race; documents never go back. The same version
            # signed again by the key that signs now replaces the held one quietly (its ETag
            # is the same, so no long poll is answered for it).
            if not (current.order == entry.order and current.key_id != entry.key_id == self.key_id):
                return
        self.hold(entry)

    def _replace_all(self, entries: dict[str, Entry]) -> None:
        for entry in entries.values():
            self.put(entry)

    async def reload(self, key: str) -> Entry | None:
        """Read the live document of the chain held at ``key`` from the database (reverting
        an expired pin)."""
        entry = await in_worker_thread(_load_one)(key)
        if entry is not None:
            self.put(entry)
        return self.entries.get(key) if entry is not None else None

    async def notified(self, payload: str) -> None:
        """Apply the document a change announced; read it back only if the payload is odd."""
        try:
            document, expires_at = decode_payload(payload)
            entry = entry_from_document(document, expires_at=expires_at)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("chain snapshot: unreadable change notification (%s); reloading", exc)
            name = payload.partition('"chain":"')[2].partition('"')[0]
            environment = payload.partition('"environment":"')[2].partition('"')[0]
            if name and environment:
                await self.reload(environments.label(environment, name))
            return
        self.put(entry)

    async def tokens_changed(self) -> None:
        """A token was created, revoked, changed or deleted: reload the set."""
        try:
            await self.tokens.reload()
        except Exception as exc:  # noqa: BLE001 - the periodic check retries
            log.warning("token set: reload failed (%s); retrying at the next check", exc)

    async def catch_up(self) -> None:
        """Reload every chain whose (epoch, version) in the database is ahead of ours, or whose
        document another key signed than the one that signs now, and the tokens."""
        await self.tokens.reload()
        signer = await in_worker_thread(current_signer)()
        self.key_id = signer.key_id if signer is not None else None
        for key, order in (await in_worker_thread(_versions)()).items():
            current = self.entries.get(key)
            if current is None or current.order < order or current.key_id != self.key_id:
                await self.reload(key)

    async def _poll_tokens_unless_listening(self) -> None:
        """While notifications do not arrive, reload the tokens every ``TOKENS_POLL_S``."""
        while True:
            await asyncio.sleep(TOKENS_POLL_S)
            current = state()
            if current is not None and current.mode != "listen":
                await self.tokens_changed()

    async def _poll_versions(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.catch_up()
            except Exception as exc:  # noqa: BLE001 - keep serving the snapshot
                log.warning("chain snapshot: version check failed: %s", exc)
