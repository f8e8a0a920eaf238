"""The poller's public face: follow one chain's live document and keep serving the last good one.

``ChainClient`` layers three values, lowest first: the compiled-in default (version 0),
the last-known-good file in ``state_dir`` (read at construction, before any network) and
the live document fetched from the control plane. ``current()`` only reads one immutable
reference; a daemon thread does all the I/O and swaps that reference when a newer, valid
document arrives.

This module owns the read path (``current()``, ``health()``), the options and the
lifecycle (``start()``, ``stop()``, and ``after_fork()``: threads do not survive ``fork()``,
so a forked child gets fresh locks, connections and threads of its own). The work is done
by the parts it composes:

- ``transport``: the HTTP connection and the headers every request carries;
- ``poller``: the polling thread (when to ask, what an answer means);
- ``applier``: whether a fetched document replaces the held one;
- ``signatures``: the trusted keys, and whether a document's signature verifies;
- ``snapshot``: what ``current()`` reads, and a pin's expiry, precomputed;
- ``state_file``: the last-known-good file, which never goes back;
- ``usage``: ``record_served`` and the usage reports, from a thread of their own;
- ``health``: the attempts and breaker openings those reports carry (``record_attempt``);
- ``drills``: whether this service takes part in a failover drill (``takes_part``), and what
  its routers recorded of one (``record_drill``) for those reports;
- ``stats``: the counters ``health()`` reports, and the episodes logged once each;
- ``client_options``: the options checked at construction; ``forks``: the fork hook;
- ``client_health``: what ``health()`` reports.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from chainclient.applier import Applier
from chainclient.applier import OnChange as OnChange
from chainclient.client_health import health_of
from chainclient.client_options import (
    check_header_values,
    check_options,
    check_source,
    default_instance,
    routable_steps,
)
from chainclient.drills import DrillRequest, TakingPart
from chainclient.forks import restart_after_fork
from chainclient.poller import REPOLL_SPREAD_S as REPOLL_SPREAD_S
from chainclient.poller import Poller, PollSettings
from chainclient.receipts import Attempt
from chainclient.signatures import TrustedKeys
from chainclient.snapshot import Snapshot, snapshot_of
from chainclient.state_file import STATE_FORMAT as STATE_FORMAT
from chainclient.state_file import StateFile
from chainclient.stats import ClientStats, OlderAnswer
from chainclient.transport import MAX_DOCUMENT_BYTES as MAX_DOCUMENT_BYTES
from chainclient.transport import ControlPlaneConnection, Endpoint
from chainclient.types import ChainDocument, Drill, Registry, Step
from chainclient.usage import MAX_REPORTED_REJECTIONS as MAX_REPORTED_REJECTIONS
from chainclient.usage import UsageReporter

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")


class ChainClient:
    """Poll ``{base_url}/api/v1/chains/{chain}`` and keep the newest valid document.

    ``current()`` never blocks, raises or does I/O; failures are counted in ``health()``
    and logged once per outage, never surfaced to callers.

    ``trusted_keys`` (key id -> the control plane's Ed25519 public key, base64url, as
    ``manage.py signing_keys public`` prints them) makes a verified signature required of
    every document, fetched or read from the state file; it needs the ``verify`` extra
    (``pip install 'chainclient[verify]'``), and the client refuses to be built without it.

    ``published=True``: ``base_url`` is where the control plane publishes its documents (a
    static web server, a bucket, a CDN), not the control plane. The client then asks with a
    plain ``GET`` and ``If-None-Match`` every ``poll_interval`` (a static host holds no long
    poll), sends no usage reports (nothing there takes them), needs no ``token`` (sent if
    given) and requires ``trusted_keys``: what it applies comes from a host that is not the
    control plane, so only documents whose signature verifies are applied.

    ``environment`` (e.g. ``"production"``): apply only that environment's documents (each
    says which, signed). The control plane needs it not (the token says which environment),
    but a published copy is read without one: with it, a host or a path serving another
    environment's documents is refused, as a bad signature is, and so is a state file saved
    from another environment's document.

    For tests, and for a service that drives polling itself (``poll_once()``): ``clock`` is
    the wall clock in epoch seconds (``time.time`` by default; a pin's expiry is a wall-clock
    instant), and ``connect`` opens each connection to the control plane (a
    ``ControlPlaneConnection``; by default keep-alive HTTP(S) to ``base_url``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        chain: str,
        token: str | None = None,
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
        trusted_keys: Mapping[str, str] | None = None,
        published: bool = False,
        environment: str | None = None,
        clock: Callable[[], float] | None = None,
        connect: Callable[[], ControlPlaneConnection] | None = None,
    ) -> None:
        durations = {
            "poll_interval": poll_interval,
            "timeout": timeout,
            "max_backoff": max_backoff,
            "usage_interval": usage_interval,
            "ahead_after_s": ahead_after_s,
        }
        check_options(chain, durations=durations, wait_s=wait_s, environment=environment)
        check_source(published=published, token=token, trusted_keys=trusted_keys)
        # A defaulted instance names this process, so a forked child renames itself.
        self._instance_is_pid = instance is None
        instance = instance if instance is not None else default_instance()
        check_header_values({"token": token or "", "service": service, "instance": instance})
        steps = routable_steps(default, registry)
        # Loaded before anything reads a document: the state file is verified too.
        keys = TrustedKeys.load(trusted_keys) if trusted_keys is not None else None
        client_id = f"{service}/{instance}"
        endpoint = Endpoint.of(base_url, chain=chain, token=token, client_id=client_id, timeout=timeout, opener=connect)

        self._chain = chain
        self._environment = environment
        self._published = bool(published)
        self._registry = registry
        self._default_steps = steps
        self._trusted_keys = keys
        self._on_change = on_change
        self._service = service
        self._endpoint = endpoint
        self._takes_part = TakingPart(token)
        self._pid = os.getpid()
        # Wall-clock time, because a pin's expiry is a wall-clock instant.
        self._clock: Callable[[], float] = clock if clock is not None else time.time
        self._lifecycle_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._stats = ClientStats(chain=chain, ahead_after_s=float(ahead_after_s))
        self._state_file = StateFile(
            state_dir, chain=chain, registry=registry, trusted_keys=keys, environment=environment
        )
        if state_dir is None:
            logger.info(
                "chain %s: state_dir=None, so no last-known-good file is kept; a restart serves "
                "the compiled-in default until the first successful poll",
                chain,
            )
        if published:
            logger.info(
                "chain %s: polling published documents every %gs (no long polls, no usage reports); only "
                "documents signed by a trusted key are applied",
                chain,
                poll_interval,
            )
        self._usage = UsageReporter(
            enabled=bool(report_usage) and not published,
            interval=float(usage_interval),
            endpoint=endpoint,
            chain=chain,
            stats=self._stats,
            ahead=self._ahead_of_server,
            applied_version=self._applied_version,
            drill=self._drill_taken_part_in,
            now=self._now,
        )
        applier = self._new_applier()
        settings = PollSettings(
            poll_interval=float(poll_interval),
            wait_s=float(wait_s),
            max_backoff=float(max_backoff),
            long_poll=bool(long_poll) and not published,
        )
        self._poller = Poller(
            chain=chain,
            endpoint=endpoint,
            settings=settings,
            stats=self._stats,
            applier=applier,
            held=self._held,
            now=self._now,
        )
        loaded = self._state_file.load()
        if loaded.refused is not None:
            self._stats.state_file_refused(loaded.refused)
        held = loaded.document
        if held is not None:
            for part, why in held.ignored:
                logger.warning(
                    "chain %s: ignoring the %s in v%d from %s: %s; the document itself is applied",
                    chain,
                    part,
                    held.version,
                    self._state_file.path,
                    why,
                )
        # The only shared mutable state the read path sees: one reference to a frozen value.
        self._snapshot: Snapshot = snapshot_of(loaded.document or ChainDocument.compiled_default(chain, steps), steps)
        restart_after_fork(self, chain=chain)

    @property
    def registry(self) -> Registry:
        """The registry this client was built with: what every document is checked against."""
        return self._registry

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
        worker = self._poller.worker
        return health_of(
            chain=self._chain,
            now=self._clock(),
            snapshot=self._snapshot,
            stats=self._stats,
            long_poll=self._poller.long_poll,
            published=self._published,
            running=worker is not None and worker.alive,
            state_file=self._state_file.path,
            unreported=self._usage.unreported(),
            signatures_required=self._trusted_keys is not None,
        )

    def record_served(self, provider: str) -> None:
        """Count one request served by ``provider`` for the next usage report.

        The Router calls this on every successful result. Cheap and thread-safe; a no-op
        with ``report_usage=False``.
        """
        self._usage.record_served(provider)

    def record_attempt(self, attempt: Attempt) -> None:
        """Count one attempt for the provider health in the next usage report: its outcome
        class under its (provider, model) and, if it served, its latency bucket.

        The Router calls this on every attempt it makes (``Attempt`` is the receipt's line);
        call it yourself if you route without a Router. No request content is kept. A lock
        and a few dict operations, never I/O; a no-op with ``report_usage=False``.
        """
        self._usage.record_attempt(attempt)

    def record_breaker_opened(self, provider: str) -> None:
        """Count one opening of ``provider``'s circuit breaker for the next usage report.

        The Router calls this whenever a breaker opens (after the threshold of failures, or
        a failed half-open probe). A no-op with ``report_usage=False``.
        """
        self._usage.record_breaker_opened(provider)

    def takes_part(self, drill: Drill) -> bool:
        """Whether this service takes part in failover ``drill``: when it names no service,
        or names this one by the digest of its token (``wire.drill_service_digest``). A
        client without a token (published documents) takes part only in a drill of every
        service. A Router asks it once per document carrying a drill; the answer is computed
        once per drill id (the digest included), then read."""
        return self._takes_part(drill)

    def record_drill(self, drill: Drill, request: DrillRequest) -> None:
        """Count one request a Router routed while ``drill`` was active (how it ended: a
        ``chainclient.drills.DrillRequest``) for the usage report's ``drill`` section. The
        Router calls it; a lock and a few additions, never I/O; a no-op with
        ``report_usage=False``."""
        self._usage.drills.record(drill.id, request)

    # -- driving it by hand ---------------------------------------------------------------

    def poll_once(self) -> float:
        """Poll once, apply what came back, and return the seconds to wait before the next
        poll: what the poller thread does in a loop, for a test or a service driving its own
        loop instead of ``start()`` (not both at once). A failed poll is counted and logged as
        in the thread, not raised. On a connection of its own (``connect``), closed after:
        ``stop()`` does not cut it short; it ends within ``timeout`` (plus ``wait_s`` for a
        long poll)."""
        connection = self._endpoint.connect()
        try:
            return self._poller.poll_once(threading.Event(), connection)
        finally:
            connection.close()

    def flush_usage(self, timeout: float | None = None) -> None:
        """Send the pending usage report now (what was served and refused, and the provider
        health seen, since the last accepted one) within ``timeout`` seconds (the client's
        ``timeout`` by default); nothing is sent when there is nothing to say, or with
        ``report_usage=False``. A failed report keeps its counts for the next."""
        self._usage.flush(self._endpoint.timeout if timeout is None else float(timeout))

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ChainClient:
        """Start the poller thread (idempotent); the first poll happens in that thread."""
        with self._lifecycle_lock:
            worker = self._poller.worker
            if worker is not None and worker.alive and not self._stop_event.is_set():
                return self
            stop_event = threading.Event()
            self._stop_event = stop_event
            self._poller.start(stop_event)
            self._usage.start(stop_event)
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
            polling, reporting = self._poller.worker, self._usage.worker
            self._usage.flush_by(deadline)
            self._stop_event.set()
            self._usage.wake()
            if polling is not None:
                polling.connection.interrupt()
        if polling is not None:
            polling.join(deadline)
        if reporting is not None and reporting.join(deadline):
            # A report still in flight at the deadline: give up on it; its counts are
            # put back for the next report.
            reporting.connection.interrupt()

    def after_fork(self) -> None:
        """Make this client work in a process forked from the one that built it.

        Threads do not survive ``fork()`` (gunicorn ``--preload``, Celery prefork), and
        locks held by the parent's threads at that instant stay held in the child. In the
        child this replaces the locks, connections and usage counts (the parent reports its
        own), renames a defaulted ``instance`` to ``{hostname}-{child pid}``, and, if the
        client was started, starts polling and usage reporting again. Every ``os.fork()``
        calls it in the child already (``os.register_at_fork``); calling it again, or in
        the process that built the client, does nothing.
        """
        pid = os.getpid()
        if pid == self._pid:
            return
        self._pid = pid
        started = self._poller.worker is not None and not self._stop_event.is_set()
        self._lifecycle_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._stats.after_fork()
        if self._instance_is_pid:
            self._endpoint = dataclasses.replace(self._endpoint, client_id=f"{self._service}/{default_instance()}")
        self._usage.after_fork(self._endpoint)
        # A new applier: the parent's poller may have held the old one's lock (a save to
        # the state file happens under it) at the instant of the fork.
        self._poller.after_fork(endpoint=self._endpoint, applier=self._new_applier())
        if started:
            self.start()

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
        return f"<ChainClient chain={self._chain!r} v{document.version} {document.preset} source={document.source}>"

    # -- what the parts read and write (at call time) ------------------------------------

    def _new_applier(self) -> Applier:
        return Applier(
            chain=self._chain,
            registry=self._registry,
            default_steps=self._default_steps,
            stats=self._stats,
            usage=self._usage,
            state_file=self._state_file,
            trusted_keys=self._trusted_keys,
            environment=self._environment,
            on_change=self._on_change,
            held=self._held,
            publish=self._publish,
            now=self._now,
        )

    def _held(self) -> Snapshot:
        return self._snapshot

    def _publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def _now(self) -> float:
        return self._clock()

    def _applied_version(self) -> int:
        return self._snapshot.document.version

    def _ahead_of_server(self) -> OlderAnswer | None:
        return self._stats.ahead_of_server(self._clock(), held=self._snapshot.document)

    def _drill_taken_part_in(self) -> Drill | None:
        """The drill of the document served, if this service takes part in it (active or not
        yet): what the usage thread reports on."""
        drill = self.current().drill
        return drill if drill is not None and self.takes_part(drill) else None
