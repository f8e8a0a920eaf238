"""The poller thread: when to ask the control plane for the chain, and what its answer means.

Each poll is ``GET {chain}`` with ``If-None-Match`` (the last ETag, or one built from the
held document), so an unchanged chain costs a ``304``. With long polling the request
carries ``?wait=`` and the server holds it until the chain changes. A ``200`` is handed to
the ``Applier``; anything else is a failed poll, retried with exponential backoff and full
jitter and logged once per outage. The poller never raises: a bug is logged and polling
goes on.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message

from chainclient.applier import Applier
from chainclient.snapshot import Snapshot, entity_tag
from chainclient.stats import ClientStats
from chainclient.transport import (
    REQUEST_ERRORS,
    ControlPlaneConnection,
    Endpoint,
    Worker,
    describe,
    error_message,
    retry_after,
)
from chainclient.types import ChainDocument

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

# Below this a 304 to a long poll was not held: the server ignores ``wait``.
_HELD_AT_LEAST_S = 1.0
# After a change every instance of a fleet would re-ask at the same moment, while the
# server is still answering the rest of the fleet; a random pause up to this long spreads
# those requests out (bench/propagation.py: it halves the tail at 1,000 instances).
REPOLL_SPREAD_S = 0.25


@dataclass(frozen=True)
class PollSettings:
    """How often to poll, and how long a long poll may be held (validated by the client)."""

    poll_interval: float
    wait_s: float
    max_backoff: float
    long_poll: bool


class Poller:
    """Polls one chain from its own thread and hands what changed to the ``Applier``.

    ``held`` returns the client's snapshot and ``now`` reads the client's wall clock, both
    at call time (tests give a client a clock that moves only when told to).
    """

    def __init__(
        self,
        *,
        chain: str,
        endpoint: Endpoint,
        settings: PollSettings,
        stats: ClientStats,
        applier: Applier,
        held: Callable[[], Snapshot],
        now: Callable[[], float],
    ) -> None:
        self._chain = chain
        self._endpoint = endpoint
        self._settings = settings
        self._stats = stats
        self._applier = applier
        self._held = held
        self._now = now
        self._random = random.Random()
        self.long_poll = settings.long_poll and settings.wait_s > 0
        self.worker: Worker | None = None
        self._noted_unheld_long_poll = False
        self._etag: str | None = None
        # Copies refused for their signature in a row, and when to ask for a genuine one.
        self._forged_copies = 0
        self._reask_at: float | None = None

    def start(self, stop_event: threading.Event) -> None:
        """Start polling in a new thread, until ``stop_event`` is set."""
        self.worker = Worker(self._run, name=f"chainclient-{self._chain}", endpoint=self._endpoint)
        self.worker.start(stop_event)

    def after_fork(self, *, endpoint: Endpoint, applier: Applier) -> None:
        """In a forked child: forget the parent's thread and its connection (the parent
        still reads from that socket), and poll as ``endpoint`` through ``applier``, new
        ones the client made for the child. Called by the client before it starts again."""
        self.worker = None
        self._endpoint = endpoint
        self._applier = applier
        # Forked children share the parent's generator state: reseed, or every worker of a
        # fleet would jitter and back off in step.
        self._random.seed()

    # -- the thread -------------------------------------------------------------------------

    def _run(self, stop_event: threading.Event, connection: ControlPlaneConnection) -> None:
        delay = 0.0
        try:
            while not stop_event.wait(delay):
                try:
                    delay = self.poll_once(stop_event, connection)
                except Exception as exc:  # a bug here must not end polling for good
                    if stop_event.is_set():
                        break
                    logger.exception("chain %s: unexpected error while polling", self._chain)
                    delay = self._failed(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            connection.close()

    def poll_once(self, stop_event: threading.Event, connection: ControlPlaneConnection) -> float:
        """Fetch once, apply what came back, and return how long to wait before the next poll
        (the thread, and ``ChainClient.poll_once()``)."""
        snapshot = self._before_poll()
        current = snapshot.document
        if self._reask_at is not None and self._now() >= self._reask_at:
            # The refused copy's ETag is kept meanwhile; now ask for anything but the held
            # document, so a genuine copy comes if there is one.
            self._reask_at = None
            self._etag = None
        # While a refused copy's ETag is sent, polls are not held: a long poll on it would
        # wait for the next change, past the time to ask for a genuine copy again.
        long_poll = self.long_poll and self._reask_at is None
        path, read_timeout = self._endpoint.path, self._endpoint.timeout
        if long_poll:
            path += f"?wait={self._settings.wait_s:g}"
            read_timeout += self._settings.wait_s
        if_none_match = self._etag or entity_tag(current)
        headers = self._endpoint.poll_headers(if_none_match=if_none_match, applied_version=current.version)
        started = time.monotonic()
        try:
            status, response_headers, body = connection.request("GET", path, headers, read_timeout)
        except REQUEST_ERRORS as exc:
            return 0.0 if stop_event.is_set() else self._failed(describe(exc))
        if stop_event.is_set():
            return 0.0
        if status == 304:
            held_for = time.monotonic() - started
            return self._not_modified(response_headers, if_none_match, current, long_poll=long_poll, held_for=held_for)
        if status == 200:
            return self._fetched(body, response_headers, long_poll=long_poll)
        if status == 400 and long_poll:
            return self._wait_refused(body)
        return self._failed_status(status, response_headers, body)

    def _before_poll(self) -> Snapshot:
        """Notice what time alone changes (a pin's expiry, being ahead of the server), so it
        is logged even while nothing else happens; return the snapshot to poll for."""
        now = self._now()
        snapshot = self._held()
        if now >= snapshot.expires_at:
            self._stats.note_expired(snapshot)
        self._stats.ahead_of_server(now, held=snapshot.document)
        return snapshot

    # -- what an answer means -----------------------------------------------------------------

    def _not_modified(
        self, headers: Message, if_none_match: str, current: ChainDocument, *, long_poll: bool, held_for: float
    ) -> float:
        """A 304: a successful poll with nothing new."""
        self._succeeded()
        self._etag = headers.get("ETag") or self._etag
        if if_none_match == entity_tag(current):
            self._stats.server_caught_up(held=self._held().document)  # it serves what this instance holds
        if long_poll and held_for < min(_HELD_AT_LEAST_S, self._settings.wait_s / 2):
            # The server ignores ``wait``: re-asking at once would spin, so poll instead.
            if not self._noted_unheld_long_poll:
                self._noted_unheld_long_poll = True
                logger.info(
                    "chain %s: the control plane answered a long poll at once; polling every %gs",
                    self._chain,
                    self._settings.poll_interval,
                )
            return self._interval()
        return 0.0 if long_poll else self._interval()

    def _fetched(self, body: bytes, headers: Message, *, long_poll: bool) -> float:
        """A 200: apply the document if it is valid and newer."""
        self._succeeded()
        applied = self._applier.apply(body, headers.get("ETag"))
        if applied.etag is not None:
            self._etag = applied.etag
        self._after_copy(forged=applied.forged)
        # After a change, the next long poll holds until the one after it (after a short
        # random pause); anything else (stale or refused) waits an interval so a server
        # ignoring If-None-Match is not hammered.
        return self._repoll_pause() if applied.changed and long_poll else self._interval()

    def _wait_refused(self, body: bytes) -> float:
        """A 400 to a long poll: this server does not take ``?wait=``; poll instead."""
        self.long_poll = False
        logger.warning(
            "chain %s: the control plane refused ?wait= (HTTP 400: %s); long polling off, polling every %gs",
            self._chain,
            error_message(body),
            self._settings.poll_interval,
        )
        return 0.0

    def _failed_status(self, status: int, headers: Message, body: bytes) -> float:
        delay = self._failed(f"HTTP {status}: {error_message(body)}")
        wait = retry_after(headers)
        if wait is not None and status in (429, 503):
            delay = max(delay, min(wait, max(self._settings.max_backoff, self._settings.poll_interval)))
        return delay

    # -- outcomes -----------------------------------------------------------------------------

    def _succeeded(self) -> None:
        failures, outage_started = self._stats.poll_succeeded()
        if failures:
            logger.info(
                "chain %s: the control plane answers again after %d failed poll%s over %.1fs",
                self._chain,
                failures,
                "" if failures == 1 else "s",
                time.monotonic() - outage_started if outage_started is not None else 0.0,
            )

    def _failed(self, why: str) -> float:
        failures = self._stats.poll_failed(why)
        current = self._held().serving(self._now())
        if failures == 1:
            # One line per outage, not per poll; the recovery line closes it.
            logger.warning(
                "chain %s: poll failed (%s); keeping v%d %s (%s) and retrying with backoff",
                self._chain,
                why,
                current.version,
                current.preset,
                current.source,
            )
        else:
            logger.debug("chain %s: poll failed again (%d in a row): %s", self._chain, failures, why)
        return self._backoff(failures)

    def _after_copy(self, *, forged: bool) -> None:
        """After a copy refused for its signature, its ETag is sent, in polls that are not
        held (a server or a proxy still holding that copy answers 304 rather than sending it
        again); a genuine copy is asked for again two intervals later (the next poll still
        sends the ETag), then twice as long after each copy refused in a row, up to
        ``max_backoff``: a forger always on the way costs the control plane one full answer
        per ``max_backoff``, damage done once on the way heals at the next ask, and a forger
        gone is behind the client within ``max_backoff``."""
        if not forged:
            self._forged_copies = 0
            self._reask_at = None
            return
        self._forged_copies += 1
        interval = self._settings.poll_interval
        ceiling = max(self._settings.max_backoff, interval)
        self._reask_at = self._now() + min(ceiling, interval * 2 ** min(self._forged_copies, 30))

    # -- timing ---------------------------------------------------------------------------------

    def _interval(self) -> float:
        return self._settings.poll_interval * self._random.uniform(0.9, 1.1)

    def _repoll_pause(self) -> float:
        """Before the long poll that follows a change; a change made meanwhile is fetched
        as soon as it ends (If-None-Match no longer matches), so nothing is missed."""
        return self._random.uniform(0.0, min(REPOLL_SPREAD_S, self._settings.wait_s))

    def _backoff(self, failures: int) -> float:
        """Exponential backoff with full jitter, never shorter than a fraction of a poll."""
        interval = self._settings.poll_interval
        ceiling = max(self._settings.max_backoff, interval)
        cap = min(ceiling, interval * 2 ** min(failures, 30))
        return max(min(interval, 0.5), self._random.uniform(0, cap))


__all__ = ["REPOLL_SPREAD_S", "PollSettings", "Poller"]
