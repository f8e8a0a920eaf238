"""The poller: follow one chain's live document and keep serving the last good one.

``ChainClient`` layers three values, lowest first: the compiled-in default (version 0),
the last-known-good file in ``state_dir`` (read at construction, before any network) and
the live document fetched from the control plane. ``current()`` only reads one immutable
reference; a daemon thread does all the I/O and swaps that reference when a newer, valid
document arrives.

With ``report_usage=True`` a second small daemon thread sends the control plane a usage
report every ``usage_interval`` seconds: requests served per provider (``record_served``,
which the Router calls on every success) and the documents this client refused, and why.
A report that fails is merged into the next one; nothing is lost and no caller waits.

Documents are ordered by (epoch, version): the epoch is raised after the control plane's
database was restored, which took its versions back. A pin carries its expiry and the
chain's default, so ``current()`` switches to the default at the expiry by itself, even
when the control plane is out of reach then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import logging
import math
import os
import platform
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

from chainclient.types import ChainDocument, DefaultChain, DocumentInvalid, Registry, Step

try:
    import fcntl
except ImportError:  # Windows: the state file is written without a lock there
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

STATE_FORMAT = "chainclient-state/1"
MAX_WAIT_S = 60.0
MAX_DOCUMENT_BYTES = 1 << 20
# Below this a 304 to a long poll was not held: the server ignores ``wait``.
_HELD_AT_LEAST_S = 1.0
# After a change every instance of a fleet would re-ask at the same moment, while the
# server is still answering the rest of the fleet; a random pause up to this long spreads
# those requests out (bench/propagation.py: it halves the tail at 1,000 instances).
REPOLL_SPREAD_S = 0.25
# A usage report carries at most this many refused documents (the newest ones).
MAX_REPORTED_REJECTIONS = 20
# The control plane accepts at most 50 providers per report and 500 characters of reason;
# a report it refuses would be retried forever, so never build one.
_MAX_REPORTED_PROVIDERS = 50
_MAX_REASON_CHARS = 500
# stop() keeps this much of its budget for joining the usage thread after its last report.
_FLUSH_MARGIN_S = 0.05

OnChange = Callable[[ChainDocument], object]


@dataclasses.dataclass(frozen=True, slots=True)
class _Snapshot:
    """What ``current()`` reads, swapped as one reference: the held document and what
    replaces it from ``expires_at`` on (the document itself when it has no expiry)."""

    document: ChainDocument
    expires_at: float  # epoch seconds; math.inf without an expiry, so one comparison does
    expired: ChainDocument


@dataclasses.dataclass(frozen=True)
class _OlderAnswer:
    """The control plane answered with a document older than the one held, since ``since``."""

    epoch: int
    version: int
    since: float


class ChainClient:
    """Poll ``{base_url}/api/v1/chains/{chain}`` and keep the newest valid document.

    ``current()`` never blocks, raises or does I/O; failures are counted in ``health()``
    and logged once per outage, never surfaced to callers.
    """

    def __init__(
        self,
        base_url: str,
        *,
        chain: str,
        token: str,
        registry: Registry,
        default: Sequence[Step],
        state_dir: str | os.PathLike[str] | None = None,
        poll_interval: float = 10.0,
        long_poll: bool = True,
        service: str = "unknown",
        on_change: OnChange | None = None,
        instance: str | None = None,
        wait_s: float = 30.0,
        timeout: float = 10.0,
        max_backoff: float = 60.0,
        report_usage: bool = True,
        usage_interval: float = 60.0,
        ahead_after_s: float = 30.0,
    ) -> None:
        if not isinstance(chain, str) or not chain.strip():
            raise ValueError("chain must be a non-empty string")
        for label, seconds in (
            ("poll_interval", poll_interval),
            ("timeout", timeout),
            ("max_backoff", max_backoff),
            ("usage_interval", usage_interval),
            ("ahead_after_s", ahead_after_s),
        ):
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"{label} must be a positive number of seconds")
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ValueError(f"wait_s must be within 0..{MAX_WAIT_S:g}")
        instance = instance if instance is not None else f"{socket.gethostname()}-{os.getpid()}"
        for label, value in (("token", token), ("service", service), ("instance", instance)):
            if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
                raise ValueError(f"{label} must be a string usable in an HTTP header")
        steps = tuple(default)
        if not all(isinstance(step, Step) for step in steps):
            raise TypeError("default must be a sequence of Step")
        # A compiled-in default the service cannot route is a build bug: fail at start-up.
        registry.validate_steps(steps)

        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._path = f"{parts.path.rstrip('/')}/api/v1/chains/{quote(chain, safe='')}"

        self._chain = chain
        self._token = token
        self._registry = registry
        self._poll_interval = float(poll_interval)
        self._wait_s = float(wait_s)
        self._timeout = float(timeout)
        self._max_backoff = float(max_backoff)
        self._ahead_after_s = float(ahead_after_s)
        self._default_steps = steps
        # Wall-clock time, because a pin's expiry is a wall-clock instant; tests replace it.
        self._clock: Callable[[], float] = time.time
        self._client_id = f"{service}/{instance}"
        self._user_agent = _user_agent()
        self._on_change = on_change
        self._random = random.Random()
        self._state_path = (
            Path(state_dir) / f"{quote(chain, safe='')}.json" if state_dir is not None else None
        )

        self._long_poll = bool(long_poll) and self._wait_s > 0
        self._noted_unheld_long_poll = False
        self._etag: str | None = None
        self._last_rejection: tuple[object, str] | None = None

        self._stats_lock = threading.Lock()
        self._last_success_at: float | None = None
        self._last_failure_at: float | None = None
        self._last_error: str | None = None
        self._consecutive_failures = 0
        self._outage_started: float | None = None
        self._rejected = 0
        self._changes = 0
        self._polls = 0
        self._last_save_error: str | None = None
        self._last_save_error_at: float | None = None
        self._older_answer: _OlderAnswer | None = None
        self._ahead_noted = False
        self._expiry_noted: _Snapshot | None = None

        self._apply_lock = threading.Lock()
        self._lifecycle_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._transport: _Transport | None = None

        # Usage since the last accepted report; record_served is on the request hot path,
        # so it is one dict lookup and an increment under a lock that nothing holds long.
        self._report_usage = bool(report_usage)
        self._usage_interval = float(usage_interval)
        self._usage_path = f"{self._path}/usage"
        self._usage_lock = threading.Lock()
        self._served: dict[str, list[float]] = {}  # provider -> [requests, last served at]
        self._refusals: list[_Refusal] = []
        self._usage_thread: threading.Thread | None = None
        self._usage_transport: _Transport | None = None
        self._flush_by = 0.0  # monotonic deadline of the last report, set by stop()
        self._last_report_at: float | None = None
        self._report_failures = 0

        # The only shared mutable state the read path sees: one reference to a frozen value.
        self._snapshot: _Snapshot = self._snapshot_of(
            self._load_state() or ChainDocument.compiled_default(chain, steps)
        )

    # -- the read path ------------------------------------------------------------------

    def current(self) -> ChainDocument:
        """The chain to use now: live, else last-known-good from disk, else the default.

        A pin is never served past its expiry: from that instant this is the chain's
        default (derived when the pin arrived), until the control plane's revert replaces
        both. One reference read; for a pin, one clock read and one comparison.
        """
        snapshot = self._snapshot
        document = snapshot.document
        if document is snapshot.expired or self._clock() < snapshot.expires_at:
            return document  # no expiry (no clock read needed), or not yet
        return snapshot.expired

    @property
    def _current(self) -> ChainDocument:
        """The document held (a pin past its expiry included): what newer is measured against."""
        return self._snapshot.document

    def health(self) -> dict[str, Any]:
        """A snapshot for health endpoints and logs; never does I/O."""
        now = self._clock()
        snapshot = self._snapshot
        expired = now >= snapshot.expires_at
        if expired:
            self._note_expired(snapshot)
        document = snapshot.expired if expired else snapshot.document
        held = snapshot.document
        ahead = self._ahead_of_server(now)
        thread = self._thread
        with self._usage_lock:
            unreported = sum(int(count) for count, _ in self._served.values())
        with self._stats_lock:
            return {
                "chain": self._chain,
                "source": document.source,
                "epoch": document.epoch,
                "version": document.version,
                "preset": document.preset,
                "expired_pin": {
                    "preset": held.preset,
                    "version": held.version,
                    "expires_at": held.expires_at_s,
                } if expired else None,
                "ahead_of_server": {
                    "server_epoch": ahead.epoch,
                    "server_version": ahead.version,
                    "since": ahead.since,
                } if ahead is not None else None,
                "last_success_at": self._last_success_at,
                "last_failure_at": self._last_failure_at,
                "last_error": self._last_error,
                "consecutive_failures": self._consecutive_failures,
                "rejected": self._rejected,
                "changes": self._changes,
                "polls": self._polls,
                "long_poll": self._long_poll,
                "running": thread is not None and thread.is_alive(),
                "state_file": str(self._state_path) if self._state_path else None,
                "unreported_requests": unreported,
                "last_usage_report_at": self._last_report_at,
                "usage_report_failures": self._report_failures,
                "last_save_error": self._last_save_error,
                "last_save_error_at": self._last_save_error_at,
            }

    # -- expiry and ordering --------------------------------------------------------------

    def _snapshot_of(self, document: ChainDocument) -> _Snapshot:
        """Precompute, off the read path, what ``current()`` serves before and after expiry."""
        if document.expires_at_s is None:
            return _Snapshot(document, math.inf, document)
        return _Snapshot(document, document.expires_at_s, self._expired_pin(document))

    def _expired_pin(self, pin: ChainDocument) -> ChainDocument:
        """The pin's chain default, as served from its expiry until the revert arrives."""
        # Older servers send no default: the compiled-in steps are the fallback then.
        default = pin.default or DefaultChain("compiled-default", self._default_steps)
        return dataclasses.replace(
            pin,
            preset=default.preset,
            is_default=True,
            chain=default.chain,
            marking=dict(default.marking),
            updated_by="chainclient",
            reason=(
                f"pin {pin.preset} (v{pin.version}) expired at {pin.expires_at}; serving the "
                f"default {default.preset} until the control plane's revert arrives"
            ),
            expires_at=None,
        )

    def _note_expired(self, snapshot: _Snapshot) -> None:
        """Log once per pin that its expiry passed; never called from ``current()``."""
        with self._stats_lock:
            if self._expiry_noted is snapshot:
                return
            self._expiry_noted = snapshot
        logger.warning("chain %s: %s", self._chain, snapshot.expired.reason)

    def _server_behind(self, answer: ChainDocument) -> None:
        """A valid answer older than the held document: start (or keep) the timer."""
        now = self._clock()
        with self._stats_lock:
            seen = self._older_answer
            self._older_answer = _OlderAnswer(
                answer.epoch, answer.version, seen.since if seen is not None else now
            )
        self._ahead_of_server(now)

    def _server_caught_up(self) -> None:
        """The control plane serves the held document or a newer one: not ahead any more."""
        with self._stats_lock:
            was_ahead, seen = self._ahead_noted, self._older_answer
            self._older_answer, self._ahead_noted = None, False
        if was_ahead and seen is not None:
            current = self._current
            logger.info(
                "chain %s: the control plane serves %s again; no longer ahead of it",
                self._chain,
                _label(current),
            )

    def _ahead_of_server(self, now: float) -> _OlderAnswer | None:
        """The older answer once it has lasted ``ahead_after_s`` (logged once), else None.

        After a database restore the control plane serves lower versions than this
        instance saved, and every change made there is ignored here until an operator
        raises the epoch; this is how that becomes visible instead of silent.
        """
        with self._stats_lock:
            seen = self._older_answer
            if seen is None or now - seen.since < self._ahead_after_s:
                return None
            first = not self._ahead_noted
            self._ahead_noted = True
        if first:
            held = self._current
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

    # -- usage ----------------------------------------------------------------------------

    def record_served(self, provider: str) -> None:
        """Count one request served by ``provider`` for the next usage report.

        The Router calls this on every successful result. Cheap and thread-safe; a no-op
        with ``report_usage=False``.
        """
        if not self._report_usage:
            return
        now = time.time()
        with self._usage_lock:
            entry = self._served.get(provider)
            if entry is not None:
                entry[0] += 1
                entry[1] = now
            elif len(self._served) < _MAX_REPORTED_PROVIDERS:
                self._served[provider] = [1, now]

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ChainClient:
        """Start the poller thread (idempotent); the first poll happens in that thread."""
        with self._lifecycle_lock:
            running = self._thread is not None and self._thread.is_alive()
            if running and not self._stop_event.is_set():
                return self
            stop_event = threading.Event()
            transport = _Transport(self._scheme, self._host, self._port, self._timeout)
            thread = threading.Thread(
                target=self._run,
                args=(stop_event, transport),
                name=f"chainclient-{self._chain}",
                daemon=True,
            )
            self._stop_event, self._transport, self._thread = stop_event, transport, thread
            thread.start()
            if self._report_usage:
                # Its own thread and connection: the poller's is held by long polls.
                usage_transport = _Transport(self._scheme, self._host, self._port, self._timeout)
                usage_thread = threading.Thread(
                    target=self._run_usage,
                    args=(stop_event, usage_transport),
                    name=f"chainclient-{self._chain}-usage",
                    daemon=True,
                )
                self._usage_transport, self._usage_thread = usage_transport, usage_thread
                usage_thread.start()
        return self

    def stop(self, timeout: float = 0.5) -> None:
        """Stop polling; returns within ``timeout`` even if a request is in flight.

        The in-flight poll's socket is shut down, which wakes a blocked read at once. Only
        a connect or DNS lookup still in progress can outlive ``stop()``; the thread is a
        daemon and applies nothing after it is told to stop. Meanwhile the usage thread
        sends a last report of what is pending, within the same ``timeout``; if it cannot,
        the counts stay for the next ``start()``.
        """
        deadline = time.monotonic() + timeout
        with self._lifecycle_lock:
            thread, transport = self._thread, self._transport
            usage_thread, usage_transport = self._usage_thread, self._usage_transport
            self._flush_by = deadline
            self._stop_event.set()
            if transport is not None:
                transport.interrupt()
        me = threading.current_thread()
        if thread is not None and thread is not me:
            thread.join(max(0.0, deadline - time.monotonic()))
        if usage_thread is not None and usage_thread is not me:
            usage_thread.join(max(0.0, deadline - time.monotonic()))
            if usage_thread.is_alive() and usage_transport is not None:
                # A report still in flight at the deadline: give up on it; its counts are
                # put back for the next report.
                usage_transport.interrupt()

    def __enter__(self) -> ChainClient:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        document = self._current
        return (
            f"<ChainClient chain={self._chain!r} v{document.version} {document.preset} "
            f"source={document.source}>"
        )

    # -- the poller thread --------------------------------------------------------------

    def _run(self, stop_event: threading.Event, transport: _Transport) -> None:
        delay = 0.0
        try:
            while not stop_event.wait(delay):
                try:
                    delay = self._poll_once(stop_event, transport)
                except Exception as exc:  # a bug here must not end polling for good
                    if stop_event.is_set():
                        break
                    logger.exception("chain %s: unexpected error while polling", self._chain)
                    delay = self._failed(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            transport.close()

    def _poll_once(self, stop_event: threading.Event, transport: _Transport) -> float:
        """Fetch once, apply what came back, and return how long to wait before the next poll."""
        now = self._clock()
        snapshot = self._snapshot
        if now >= snapshot.expires_at:
            self._note_expired(snapshot)
        self._ahead_of_server(now)
        current = snapshot.document
        long_poll = self._long_poll
        path = self._path
        read_timeout = self._timeout
        if long_poll:
            path += f"?wait={self._wait_s:g}"
            read_timeout += self._wait_s
        if_none_match = self._etag or _entity_tag(current)
        headers = {
            "Authorization": f"Bearer {self._token}",
            "If-None-Match": if_none_match,
            "X-Chain-Client": self._client_id,
            "X-Chain-Applied-Version": str(current.version),
            "User-Agent": self._user_agent,
            "Accept": "application/json",
        }
        started = time.monotonic()
        try:
            status, response_headers, body = transport.get(path, headers, read_timeout)
        except (OSError, http.client.HTTPException, _StoppedError) as exc:
            if stop_event.is_set():
                return 0.0
            return self._failed(_describe(exc))
        if stop_event.is_set():
            return 0.0
        elapsed = time.monotonic() - started

        if status == 304:
            self._succeeded()
            self._etag = response_headers.get("ETag") or self._etag
            if if_none_match == _entity_tag(current):
                self._server_caught_up()  # it serves what this instance holds
            if long_poll and elapsed < min(_HELD_AT_LEAST_S, self._wait_s / 2):
                # The server ignores ``wait``: re-asking at once would spin, so poll instead.
                if not self._noted_unheld_long_poll:
                    self._noted_unheld_long_poll = True
                    logger.info(
                        "chain %s: the control plane answered a long poll at once; "
                        "polling every %gs",
                        self._chain,
                        self._poll_interval,
                    )
                return self._interval()
            return 0.0 if long_poll else self._interval()

        if status == 200:
            self._succeeded()
            applied = self._apply_body(body, response_headers.get("ETag"))
            # After a change, the next long poll holds until the one after it (after a short
            # random pause); anything else (stale or refused) waits an interval so a server
            # ignoring If-None-Match is not hammered.
            return self._repoll_pause() if applied and long_poll else self._interval()

        if status == 400 and long_poll:
            self._long_poll = False
            logger.warning(
                "chain %s: the control plane refused ?wait= (HTTP 400: %s); "
                "long polling off, polling every %gs",
                self._chain,
                _error_message(body),
                self._poll_interval,
            )
            return 0.0

        delay = self._failed(f"HTTP {status}: {_error_message(body)}")
        retry_after = _retry_after(response_headers)
        if retry_after is not None and status in (429, 503):
            delay = max(delay, min(retry_after, max(self._max_backoff, self._poll_interval)))
        return delay

    # -- the usage thread ---------------------------------------------------------------

    def _run_usage(self, stop_event: threading.Event, transport: _Transport) -> None:
        try:
            while not stop_event.wait(self._usage_interval * self._random.uniform(0.9, 1.1)):
                self._report(transport, self._timeout, stop_event)
            # Stopping: one last best-effort report within what is left of stop()'s budget.
            left = self._flush_by - time.monotonic() - _FLUSH_MARGIN_S
            if left > 0:
                self._report(transport, left, stop_event)
        finally:
            transport.close()

    def _report(self, transport: _Transport, timeout: float, stop_event: threading.Event) -> None:
        """Send what was served and refused since the last accepted report, if anything."""
        ahead = self._ahead_of_server(self._clock())
        with self._usage_lock:
            served, self._served = self._served, {}
            refusals, self._refusals = self._refusals, []
        # No empty reports, except while ahead: the fleet page must keep showing that.
        if not served and not refusals and ahead is None:
            return
        try:
            report: dict[str, Any] = {
                "client": self._client_id,
                "applied_version": self._current.version,
                "providers": {
                    provider: {"requests": int(count), "last_served_at": _utc(last)}
                    for provider, (count, last) in served.items()
                },
                # Version 0 (never a live document's) stands for "no usable version": a
                # body that was not JSON, or whose version was missing or not a number.
                "rejected": [
                    {"version": version or 0, "reason": reason, "at": _utc(at)}
                    for version, reason, at in refusals
                ],
            }
            if ahead is not None:
                report["ahead_of_server"] = {
                    "server_epoch": ahead.epoch,
                    "server_version": ahead.version,
                    "since": _utc(ahead.since),
                }
            body = json.dumps(report).encode("utf-8")
            headers = {
                "Authorization": f"Bearer {self._token}",
                "X-Chain-Client": self._client_id,
                "X-Chain-Applied-Version": str(self._current.version),
                "User-Agent": self._user_agent,
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Connection": "close",
            }
            status, _, response = transport.request(
                "POST", self._usage_path, headers, timeout, body=body, connect_timeout=timeout
            )
            error = None if 200 <= status < 300 else f"HTTP {status}: {_error_message(response)}"
        except (OSError, http.client.HTTPException, _StoppedError) as exc:
            error = _describe(exc)
        except Exception as exc:  # a bug here must not lose the counts or end reporting
            logger.exception("chain %s: unexpected error while reporting usage", self._chain)
            error = f"unexpected {type(exc).__name__}: {exc}"
        finally:
            # Reports are a minute apart: never send one on a connection the server may
            # have closed meanwhile (a report is not resent, so that would fail it).
            transport.close()
        if error is None:
            self._report_accepted()
        else:
            self._put_back(served, refusals)
            if not stop_event.is_set() or self._flush_by > time.monotonic():
                self._report_failed(error, served, refusals)

    def _put_back(self, served: dict[str, list[float]], refusals: list[_Refusal]) -> None:
        """Merge an unsent report into what has been recorded since it was taken."""
        with self._usage_lock:
            for provider, (count, last) in served.items():
                entry = self._served.get(provider)
                if entry is None:
                    self._served[provider] = [count, last]
                else:
                    entry[0] += count
                    entry[1] = max(entry[1], last)
            merged = refusals
            for refusal in self._refusals:
                _add_refusal(merged, refusal)
            self._refusals = merged

    def _report_accepted(self) -> None:
        with self._stats_lock:
            failures = self._report_failures
            self._report_failures = 0
            self._last_report_at = time.time()
        if failures:
            logger.info(
                "chain %s: usage report accepted after %d failed attempt%s",
                self._chain,
                failures,
                "" if failures == 1 else "s",
            )

    def _report_failed(
        self, why: str, served: dict[str, list[float]], refusals: list[_Refusal]
    ) -> None:
        with self._stats_lock:
            self._report_failures += 1
            failures = self._report_failures
        if failures == 1:
            # One line per outage, like polls; the "accepted after" line closes it.
            logger.warning(
                "chain %s: usage report failed (%s); keeping its %d request(s) and %d refused "
                "document(s) for the next one",
                self._chain,
                why,
                sum(int(count) for count, _ in served.values()),
                len(refusals),
            )
        else:
            logger.debug("chain %s: usage report failed again (%d): %s", self._chain, failures, why)

    # -- applying documents -------------------------------------------------------------

    def _apply_body(self, body: bytes, etag: str | None) -> bool:
        """Apply a 200 body if it is valid and newer; return whether it was applied."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            self._reject(None, etag, f"not JSON ({exc})")
            return False
        version = data.get("version") if isinstance(data, dict) else None
        try:
            document = ChainDocument.from_json(data, registry=self._registry, source="live")
            if document.name != self._chain:
                raise DocumentInvalid(f"document is for chain {document.name!r}")
        except DocumentInvalid as exc:
            self._reject(version, etag, str(exc))
            return False

        # Compare-and-swap under a lock: after stop() then start(), a lingering old poller
        # thread could otherwise race the new one and move the version backwards.
        with self._apply_lock:
            previous = self._current
            if document.order <= previous.order:
                # Replicas can answer out of order; (epoch, version) never goes down, so an
                # older answer is stale, unless it lasts: then the server is behind us.
                if document.order < previous.order:
                    self._server_behind(document)
                else:
                    self._server_caught_up()
                logger.debug(
                    "chain %s: ignoring %s, already at %s",
                    self._chain,
                    _label(document),
                    _label(previous),
                )
                return False
            self._swap(previous, document, etag)
        self._server_caught_up()
        if self._on_change is not None:
            try:
                self._on_change(document)
            except Exception:
                logger.exception(
                    "chain %s: on_change raised for v%d; polling continues",
                    self._chain,
                    document.version,
                )
        return True

    def _swap(self, previous: ChainDocument, document: ChainDocument, etag: str | None) -> None:
        """Make ``document`` current: one log line, one reference swap, then the file."""
        logger.info(
            "chain %s: %s %s -> %s %s by %s: %s",
            self._chain,
            _label(previous),
            previous.preset,
            _label(document),
            document.preset,
            document.updated_by,
            document.reason,
        )
        self._snapshot = self._snapshot_of(document)
        self._etag = etag or _entity_tag(document)
        with self._stats_lock:
            self._changes += 1
        # Saved after the swap: a slow disk must not delay the change reaching requests.
        self._persist(document)

    def _reject(self, version: object, etag: str | None, why: str) -> None:
        with self._stats_lock:
            self._rejected += 1
        if self._report_usage:
            number = (
                version
                if isinstance(version, int) and not isinstance(version, bool) and version > 0
                else None
            )
            with self._usage_lock:
                _add_refusal(self._refusals, (number, why[:_MAX_REASON_CHARS], time.time()))
        # Remember the refused document's ETag so the server does not resend it every poll.
        if etag:
            self._etag = etag
        key = (etag or version, why)
        if key == self._last_rejection:
            logger.debug("chain %s: refused the same document again: %s", self._chain, why)
            return
        self._last_rejection = key
        current = self.current()
        logger.warning(
            "chain %s: refused document%s from the control plane: %s; keeping v%d %s",
            self._chain,
            f" v{version}" if isinstance(version, int) else "",
            why,
            current.version,
            current.preset,
        )

    # -- outcome bookkeeping ------------------------------------------------------------

    def _succeeded(self) -> None:
        now = time.time()
        with self._stats_lock:
            failures = self._consecutive_failures
            outage_started = self._outage_started
            self._polls += 1
            self._last_success_at = now
            self._consecutive_failures = 0
            self._outage_started = None
        if failures:
            logger.info(
                "chain %s: the control plane answers again after %d failed poll%s over %.1fs",
                self._chain,
                failures,
                "" if failures == 1 else "s",
                time.monotonic() - outage_started if outage_started is not None else 0.0,
            )

    def _failed(self, why: str) -> float:
        with self._stats_lock:
            self._polls += 1
            self._consecutive_failures += 1
            failures = self._consecutive_failures
            self._last_failure_at = time.time()
            self._last_error = why
            if failures == 1:
                self._outage_started = time.monotonic()
        current = self.current()
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
            logger.debug(
                "chain %s: poll failed again (%d in a row): %s", self._chain, failures, why
            )
        return self._backoff(failures)

    def _interval(self) -> float:
        return self._poll_interval * self._random.uniform(0.9, 1.1)

    def _repoll_pause(self) -> float:
        """Before the long poll that follows a change; a change made meanwhile is fetched
        as soon as it ends (If-None-Match no longer matches), so nothing is missed."""
        return self._random.uniform(0.0, min(REPOLL_SPREAD_S, self._wait_s))

    def _backoff(self, failures: int) -> float:
        """Exponential backoff with full jitter, never shorter than a fraction of a poll."""
        ceiling = max(self._max_backoff, self._poll_interval)
        cap = min(ceiling, self._poll_interval * 2 ** min(failures, 30))
        return max(min(self._poll_interval, 0.5), self._random.uniform(0, cap))

    # -- the last-known-good file -------------------------------------------------------

    def _load_state(self) -> ChainDocument | None:
        path = self._state_path
        if path is None:
            return None
        try:
            document = self._read_state(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:  # DocumentInvalid is a ValueError
            logger.warning("chain %s: ignoring state file %s: %s", self._chain, path, exc)
            return None
        logger.info(
            "chain %s: starting from %s %s saved in %s",
            self._chain,
            _label(document),
            document.preset,
            path,
        )
        return document

    def _read_state(self, path: Path) -> ChainDocument:
        """The document saved in ``path``; raises OSError or ValueError saying why not."""
        payload = json.loads(path.read_bytes())
        if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
            raise DocumentInvalid(f"not a {STATE_FORMAT} file")
        if payload.get("chain") != self._chain:
            raise DocumentInvalid(f"it belongs to chain {payload.get('chain')!r}")
        document = ChainDocument.from_json(
            payload.get("document"), registry=self._registry, source="disk"
        )
        if document.name != self._chain:
            raise DocumentInvalid(f"its document is for chain {document.name!r}")
        return document

    def _persist(self, document: ChainDocument) -> None:
        path = self._state_path
        if path is None:
            return
        payload = {
            "format": STATE_FORMAT,
            "chain": self._chain,
            "saved_at": time.time(),
            "document": document.to_json(),
        }
        try:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            on_disk = self._save_if_newer(path, document, data)
        except (OSError, TypeError, ValueError) as exc:
            why = _describe(exc)
            with self._stats_lock:
                self._last_save_error, self._last_save_error_at = why, time.time()
            logger.warning(
                "chain %s: could not save v%d to %s: %s", self._chain, document.version, path, why
            )
            return
        if on_disk is not None:
            logger.debug(
                "chain %s: %s already holds %s; not saving %s",
                self._chain,
                path,
                _label(on_disk),
                _label(document),
            )
            return
        with self._stats_lock:
            self._last_save_error, self._last_save_error_at = None, None

    def _save_if_newer(
        self, path: Path, document: ChainDocument, data: bytes
    ) -> ChainDocument | None:
        """Write ``data`` unless the file already holds ``document`` or a newer one; return
        that one when it does.

        Processes sharing a ``state_dir`` can each get answers from a lagging replica, so
        the compare and the write happen under one lock: the file never goes back.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(path.with_suffix(".lock")):
            try:
                on_disk = self._read_state(path)
            except (OSError, ValueError, RecursionError):
                on_disk = None  # missing or unusable: _load_state would ignore it too
            if on_disk is not None and on_disk.order >= document.order:
                return on_disk
            _write_atomically(path, data)
        return None


class _StoppedError(Exception):
    """The transport was interrupted by ``stop()``."""


_Refusal = tuple[int | None, str, float]
"""A refused document for the usage report: (version or None, reason, epoch seconds)."""


def _add_refusal(refusals: list[_Refusal], refusal: _Refusal) -> None:
    """Append ``refusal`` unless the same document is already listed; keep the newest few.

    The same version refused again (each poll can bring it back) is one entry; a document
    without a usable version is told apart by its reason.
    """
    version, reason, _ = refusal
    for listed_version, listed_reason, _ in refusals:
        if listed_version == version and (version is not None or listed_reason == reason):
            return
    refusals.append(refusal)
    del refusals[:-MAX_REPORTED_REJECTIONS]


def _entity_tag(document: ChainDocument) -> str:
    """The ETag the control plane sends for ``document``: the version, prefixed by the
    epoch once one was raised (so the same version from before a restore differs)."""
    if document.epoch == 0:
        return f'"{document.version}"'
    return f'"{document.epoch}.{document.version}"'


def _label(document: ChainDocument) -> str:
    """``v7``, or ``v7 (epoch 2)`` once an epoch was raised, for log lines."""
    if document.epoch == 0:
        return f"v{document.version}"
    return f"v{document.version} (epoch {document.epoch})"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class _Transport:
    """One keep-alive HTTP(S) connection whose blocked read another thread can cut short."""

    def __init__(self, scheme: str, host: str, port: int | None, connect_timeout: float) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._socket: socket.socket | None = None
        self._interrupted = False

    def get(
        self, path: str, headers: dict[str, str], read_timeout: float
    ) -> tuple[int, Message, bytes]:
        return self.request("GET", path, headers, read_timeout)

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        read_timeout: float,
        *,
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> tuple[int, Message, bytes]:
        for attempt in (1, 2):
            connection, fresh = self._connect(connect_timeout)
            try:
                assert connection.sock is not None
                connection.sock.settimeout(read_timeout)
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read(MAX_DOCUMENT_BYTES + 1)
            except (ConnectionError, http.client.BadStatusLine):
                self._drop()
                # Servers and load balancers close idle keep-alive connections; that is
                # not an outage, so a reused connection gets one fresh retry. A request
                # with a body is never resent: the server may have acted on it.
                if fresh or attempt == 2 or body is not None:
                    raise
                continue
            except BaseException:
                self._drop()
                raise
            if len(answer) > MAX_DOCUMENT_BYTES:
                self._drop()
                raise http.client.HTTPException(f"response larger than {MAX_DOCUMENT_BYTES} bytes")
            if response.will_close or not response.isclosed():
                self._drop()
            return response.status, response.headers, answer
        raise AssertionError("unreachable")

    def interrupt(self) -> None:
        """Wake a blocked request and refuse new ones; callable from any thread."""
        with self._lock:
            self._interrupted = True
            sock = self._socket
            if sock is not None:
                # shutdown() (not close()) wakes a recv blocked in another thread; the raw
                # socket method skips the TLS close_notify an SSLSocket would attempt.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def close(self) -> None:
        self._drop()

    def _connect(self, timeout: float | None = None) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._interrupted:
                raise _StoppedError()
            if self._connection is not None:
                return self._connection, False
        timeout = self._connect_timeout if timeout is None else timeout
        connection: http.client.HTTPConnection
        if self._scheme == "https":
            connection = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        connection.connect()
        with self._lock:
            if self._interrupted:
                connection.close()
                raise _StoppedError()
            self._connection, self._socket = connection, connection.sock
        return connection, True

    def _drop(self) -> None:
        with self._lock:
            connection, self._connection, self._socket = self._connection, None, None
        if connection is not None:
            connection.close()


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    # Make the rename itself durable; not every platform can open a directory.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _user_agent() -> str:
    from chainclient import __version__  # the package imports this module first

    return f"chainclient/{__version__} python/{platform.python_version()}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error_message(body: bytes) -> str:
    """The API's ``{"error": {"message": ...}}`` if present, else a short excerpt."""
    try:
        data = json.loads(body)
        message = data["error"]["message"]
        if isinstance(message, str):
            return message[:200]
    except (ValueError, TypeError, KeyError, RecursionError):
        pass
    text = body[:200].decode("utf-8", errors="replace").strip()
    return text or "no body"


def _retry_after(headers: Message) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
