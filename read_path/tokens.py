"""The read front's token check: every live token held in the process, like the chain documents.

A read checks its bearer token against this set in memory: no query, no thread, no stampede
when many reads arrive at once. The set is loaded with the snapshot and reloaded whenever a
token is created, revoked, changed or deleted (the ``tokens_changed`` notification, sent in
the change's own transaction: ``notifications.announce_tokens_changed``), so a revoked token
stops working within the notification's delivery, milliseconds; the snapshot's periodic check
reloads it too, for when notifications cannot arrive. An expiring token stops at its
``expires_at`` exactly (the set keeps the expiry and each read checks the clock).

A token not in the set may have been created a moment ago, before its notification arrived:
it is looked up once (concurrent reads of the same token share the lookup); the answer "no such
token" is remembered until the next reload, so a flood of bad tokens costs one query each, not
one per read. While the database is down the set keeps serving (no token can be revoked
meanwhile: revoking needs the database); a token the process has never seen raises, and the
front answers 503.

Use is recorded (``last_used_at``, at most once a minute per token) in batches: each read
notes its token, and ``record_use`` (run once a second by the front, in a worker thread)
writes what is due.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from presets.environments import token_refusal
from presets.expiry import has_passed
from presets.models import LAST_USED_PRECISION, hash_token, live_token_hashes, record_token_use
from read_path.worker_threads import in_worker_thread

# Bounds against floods of random tokens: remembered digests of raw tokens, and bad ones.
DIGESTS_MAX = 10_000
UNKNOWN_MAX = 10_000


@dataclass(frozen=True, slots=True)
class LiveToken:
    pk: int
    expires_at: float | None  # Unix seconds; None: until revoked
    environment: str = ""  # the environment it reads
    chains: frozenset[str] | None = None  # the only chains it reads; None: all

    def refusal(self, environment: str, chain: str | None) -> str | None:
        """Why this token may not read ``chain`` of ``environment`` (None: the list), or None."""
        return token_refusal(self.environment, self.chains, environment, chain)


def _live(pk: int, expires: datetime | None, environment: str, chains: list[str]) -> LiveToken:
    return LiveToken(pk, _ts(expires), environment, frozenset(chains) if chains else None)


def _ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _load() -> tuple[dict[str, LiveToken], dict[int, float | None]]:
    """Every active token by hash, and when each was last recorded used."""
    rows = live_token_hashes()
    return (
        {digest: _live(pk, expires, environment, chains) for pk, digest, expires, _, environment, chains in rows},
        {pk: _ts(used) for pk, _, _, used, _, _ in rows},
    )


def _lookup(digest: str) -> tuple[LiveToken, float | None] | None:
    for pk, _, expires, used, environment, chains in live_token_hashes(token_hash=digest):
        return _live(pk, expires, environment, chains), _ts(used)
    return None


class TokenSet:
    """Every live token's hash and expiry in this process, and which were used lately."""

    def __init__(self) -> None:
        self._live: dict[str, LiveToken] = {}
        self._digests: dict[str, str] = {}  # raw -> hash: a read hashes its token once
        self._unknown: set[str] = set()  # hashes looked up and not found since the last reload
        self._lookups: dict[str, asyncio.Future[tuple[LiveToken, float | None] | None]] = {}
        self._recorded: dict[int, float | None] = {}  # pk -> last_used_at known to be stored
        self.used: set[int] = set()  # tokens read since the last ``due_for_recording``
        # Authorization header value -> its live token, for the read front's plain reads: one
        # lookup per read. Filled by ``remember`` once a header's token proved live; emptied by
        # every reload, so a revoked token is never found here after it.
        self.by_header: dict[bytes, LiveToken] = {}
        self._reloads_wanted = 0
        self._reloading: asyncio.Task[None] | None = None

    # --- the hot path ---------------------------------------------------------------

    def known(self, raw: str) -> bool | None:
        """Whether ``raw`` is a live token now, from memory; None when it must be looked up
        (``is_valid``)."""
        digest = self._digests.get(raw)
        if digest is None:
            if not raw.isascii():  # a lone surrogate cannot even be hashed
                return False
            if len(self._digests) >= DIGESTS_MAX:
                self._digests.clear()
            digest = self._digests[raw] = hash_token(raw)
        token = self._live.get(digest)
        if token is None:
            return False if digest in self._unknown else None
        return self.use(token)

    async def is_valid(self, raw: str) -> bool:
        """Whether ``raw`` is a live token now, looking it up when the process does not hold
        it (raises when the database cannot answer)."""
        valid = self.known(raw)
        if valid is not None:
            return valid
        token = await self._look_up(self._digests.get(raw) or hash_token(raw))
        return token is not None and self.use(token)

    def use(self, token: LiveToken) -> bool:
        """Whether ``token`` is live now (not past its expiry); notes its use if so."""
        if has_passed(token.expires_at, time.time()):
            return False
        self.used.add(token.pk)
        return True

    def live(self, raw: str) -> LiveToken | None:
        """``raw``'s live token if this process holds it (no lookup, no clock)."""
        return self._live.get(self._digests.get(raw) or hash_token(raw))

    def remember(self, header: bytes, raw: str) -> None:
        """Let ``by_header`` find ``raw``'s token by its Authorization header, once it is
        known live (``known`` or ``is_valid``)."""
        token = self._live.get(self._digests.get(raw) or hash_token(raw))
        if token is not None:
            if len(self.by_header) >= DIGESTS_MAX:
                self.by_header.clear()
            self.by_header[header] = token

    async def _look_up(self, digest: str) -> LiveToken | None:
        """A token missing from the set: one lookup, shared by every read waiting for it."""
        pending = self._lookups.get(digest)
        if pending is None:
            pending = self._lookups[digest] = asyncio.ensure_future(in_worker_thread(_lookup)(digest))
            pending.add_done_callback(lambda _: self._lookups.pop(digest, None))
        found = await asyncio.shield(pending)
        if found is None:
            if len(self._unknown) >= UNKNOWN_MAX:
                self._unknown.clear()
            self._unknown.add(digest)
            return None
        token, used = found
        self._live[digest] = token
        self._recorded.setdefault(token.pk, used)
        return token

    # --- keeping it current ---------------------------------------------------------

    def replace(self, live: dict[str, LiveToken], recorded: dict[int, float | None]) -> None:
        """Hold exactly these tokens (as just read), forgetting the bad ones remembered."""
        self._live = live
        self.by_header = {}
        self._unknown = set()
        self._recorded = recorded

    async def load(self) -> None:
        """Load the set now (raises when the database cannot answer)."""
        self.replace(*await in_worker_thread(_load)())

    async def reload(self) -> None:
        """Reload the set, after every change announced so far: a reload asked for while one
        runs runs again after it (that one may have read before the change committed)."""
        self._reloads_wanted += 1
        if self._reloading is None:
            self._reloading = asyncio.ensure_future(self._reload_until_current())
        await asyncio.shield(self._reloading)

    async def _reload_until_current(self) -> None:
        try:
            while True:
                wanted = self._reloads_wanted
                await self.load()
                if wanted == self._reloads_wanted:
                    return
        finally:
            self._reloading = None

    # --- recording use --------------------------------------------------------------

    def due_for_recording(self) -> list[int]:
        """Tokens read since the last call whose recorded use is older than
        ``LAST_USED_PRECISION``."""
        if not self.used:
            return []
        stale_before = time.time() - LAST_USED_PRECISION.total_seconds()
        due = []
        for pk in self.used:
            recorded = self._recorded.get(pk)
            if recorded is None or recorded < stale_before:
                due.append(pk)
        self.used.clear()
        return due

    async def record_use(self) -> None:
        """Write ``last_used_at`` for the tokens due (off the event loop)."""
        due = self.due_for_recording()
        if due:
            now = timezone.now()
            await in_worker_thread(record_token_use)(due, now)
            for pk in due:
                self._recorded[pk] = now.timestamp()
