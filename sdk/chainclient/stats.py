"""What ``health()`` reports about the client's past: counts, times, errors, episodes.

Everything here is written by the poller and usage threads and read by ``health()``, all
under one lock, so ``health()`` reads one consistent view. Two episodes are also detected
here, because they are decided by this state, and each is logged once: a pin served past
its expiry, and an instance *ahead of the server* (after the control plane's database was
restored, it serves versions older than the one held; an operator must raise the epoch).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from chainclient.snapshot import Snapshot, label
from chainclient.types import ChainDocument

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")


@dataclasses.dataclass(frozen=True)
class OlderAnswer:
    """The control plane answered with a document older than the one held, since ``since``."""

    epoch: int
    version: int
    since: float


@dataclasses.dataclass(frozen=True)
class StatsView:
    """The counters at one instant, for ``health()``."""

    last_success_at: float | None
    last_failure_at: float | None
    last_error: str | None
    consecutive_failures: int
    rejected: int
    changes: int
    polls: int
    last_report_at: float | None
    report_failures: int
    last_save_error: str | None
    last_save_error_at: float | None
    state_file_refused: str | None
    signature_refusals: int
    last_signature_refusal: str | None


class ClientStats:
    """The client's counters and episodes, behind one lock (never held during I/O)."""

    def __init__(self, *, chain: str, ahead_after_s: float) -> None:
        self._chain = chain
        self._ahead_after_s = ahead_after_s
        self._lock = threading.Lock()
        # Polls.
        self._polls = 0
        self._last_success_at: float | None = None
        self._last_failure_at: float | None = None
        self._last_error: str | None = None
        self._consecutive_failures = 0
        self._outage_started: float | None = None  # monotonic
        # Documents.
        self._rejected = 0
        self._changes = 0
        self._last_save_error: str | None = None
        self._last_save_error_at: float | None = None
        self._state_file_refused: str | None = None
        self._signature_refusals = 0
        self._last_signature_refusal: str | None = None
        # Usage reports.
        self._last_report_at: float | None = None
        self._report_failures = 0
        # Episodes.
        self._older_answer: OlderAnswer | None = None
        self._ahead_noted = False
        self._expiry_noted: Snapshot | None = None

    def after_fork(self) -> None:
        """In a forked child: a new lock, since the parent's may have been held at the fork
        (by a thread the child does not have). The counters are kept: they are the history
        of the document the child inherited."""
        self._lock = threading.Lock()

    def view(self) -> StatsView:
        with self._lock:
            return StatsView(
                last_success_at=self._last_success_at,
                last_failure_at=self._last_failure_at,
                last_error=self._last_error,
                consecutive_failures=self._consecutive_failures,
                rejected=self._rejected,
                changes=self._changes,
                polls=self._polls,
                last_report_at=self._last_report_at,
                report_failures=self._report_failures,
                last_save_error=self._last_save_error,
                last_save_error_at=self._last_save_error_at,
                state_file_refused=self._state_file_refused,
                signature_refusals=self._signature_refusals,
                last_signature_refusal=self._last_signature_refusal,
            )

    # -- polls, documents, saves, reports ---------------------------------------------------

    def poll_succeeded(self) -> tuple[int, float | None]:
        """Count a poll the control plane answered; return the failures in a row before it
        and when (monotonic) that outage started."""
        now = time.time()
        with self._lock:
            failures, outage_started = self._consecutive_failures, self._outage_started
            self._polls += 1
            self._last_success_at = now
            self._consecutive_failures = 0
            self._outage_started = None
        return failures, outage_started

    def poll_failed(self, why: str) -> int:
        """Count a failed poll; return the failures in a row, this one included."""
        with self._lock:
            self._polls += 1
            self._consecutive_failures += 1
            failures = self._consecutive_failures
            self._last_failure_at = time.time()
            self._last_error = why
            if failures == 1:
                self._outage_started = time.monotonic()
        return failures

    def document_refused(self, *, signature: str | None = None) -> None:
        """Count a refused document; ``signature`` is why, when its signature was the reason."""
        with self._lock:
            self._rejected += 1
            if signature is not None:
                self._signature_refusals += 1
                self._last_signature_refusal = signature

    def document_changed(self) -> None:
        with self._lock:
            self._changes += 1

    def save_failed(self, why: str) -> None:
        with self._lock:
            self._last_save_error, self._last_save_error_at = why, time.time()

    def save_succeeded(self) -> None:
        """A save wrote the file: it is a good one now, whatever was refused at start-up."""
        with self._lock:
            self._last_save_error, self._last_save_error_at = None, None
            self._state_file_refused = None

    def state_file_refused(self, why: str) -> None:
        """The state file found at start-up was not used (its digest did not match, ...)."""
        with self._lock:
            self._state_file_refused = why

    def report_accepted(self) -> int:
        """Count an accepted usage report; return the failed ones in a row before it."""
        with self._lock:
            failures = self._report_failures
            self._report_failures = 0
            self._last_report_at = time.time()
        return failures

    def report_failed(self) -> int:
        """Count a failed usage report; return the failures in a row, this one included."""
        with self._lock:
            self._report_failures += 1
            return self._report_failures

    # -- episodes -----------------------------------------------------------------------

    def note_expired(self, snapshot: Snapshot) -> None:
        """Log once per pin that its expiry passed; never called from ``current()``."""
        with self._lock:
            if self._expiry_noted is snapshot:
                return
            self._expiry_noted = snapshot
        logger.warning("chain %s: %s", self._chain, snapshot.expired.reason)

    def server_behind(self, answer: ChainDocument, *, now: float, held: ChainDocument) -> None:
        """A valid answer older than the held document: start (or keep) the timer."""
        with self._lock:
            seen = self._older_answer
            self._older_answer = OlderAnswer(answer.epoch, answer.version, seen.since if seen is not None else now)
        self.ahead_of_server(now, held=held)

    def server_caught_up(self, *, held: ChainDocument) -> None:
        """The control plane serves the held document or a newer one: not ahead any more."""
        with self._lock:
            was_ahead, seen = self._ahead_noted, self._older_answer
            self._older_answer, self._ahead_noted = None, False
        if was_ahead and seen is not None:
            logger.info(
                "chain %s: the control plane serves %s again; no longer ahead of it",
                self._chain,
                label(held),
            )

    def ahead_of_server(self, now: float, *, held: ChainDocument) -> OlderAnswer | None:
        """The older answer once it has lasted ``ahead_after_s`` (logged once), else None.

        After a database restore the control plane serves lower versions than this
        instance saved, and every change made there is ignored here until an operator
        raises the epoch; this is how that becomes visible instead of silent.
        """
        with self._lock:
            seen = self._older_answer
            if seen is None or now - seen.since < self._ahead_after_s:
                return None
            first = not self._ahead_noted
            self._ahead_noted = True
        if first:
            logger.warning(
                "chain %s: the control plane serves v%d but this instance holds v%d (epoch %d); "
                "restored database? keeping v%d until an operator raises the epoch "
                "(manage.py raise_epoch)",
                self._chain,
                seen.version,
                held.version,
                held.epoch,
                held.version,
            )
        return seen


__all__ = ["ClientStats", "OlderAnswer", "StatsView"]
