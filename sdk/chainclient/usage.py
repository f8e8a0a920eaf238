"""Usage reports: which providers served how many requests, and which documents were refused;
with the provider health the router saw (``health``: attempts by outcome class, served
latencies, breaker openings).

``record_served`` is on every request's path (the Router calls it on each success), so it
is one dict lookup and an increment under a lock nothing holds for long, and never I/O.
A small daemon thread of its own (with its own connection: the poller's is held by long
polls) sends ``POST {chain}/usage`` about every ``usage_interval`` seconds, only when
there is something to say. A report that fails is merged back into what was recorded
since, so nothing is lost and no caller waits; ``stop()`` gets one last best-effort report
within its own budget. When the control plane answers with ``Retry-After`` (429: too many
reports; 503), the next report waits that long (at most ``MAX_RETRY_AFTER_S``), the counts
kept meanwhile within the same bounds.

While the client takes part in an active failover drill, every report carries the drill's
section (``drills.DrillCounts``: what the routers recorded of it since the last accepted
report) and one goes at least every ``DRILL_REPORT_INTERVAL_S``, even with nothing counted:
that is how the control plane knows the instance takes part. A drill that ended (or left
the document) gets one last report within ``DRILL_REPORT_INTERVAL_S`` of its end, with or
without a control plane to tell it so. ``DrillSchedule`` (``drill_schedule``) decides
when; the thread sleeps until then (a document bringing or ending a drill wakes it), never
polling.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from chainclient.drill_schedule import DRILL_LAST_REPORT_WITHIN_S as DRILL_LAST_REPORT_WITHIN_S
from chainclient.drill_schedule import DrillSchedule
from chainclient.drills import NO_DRILL_TALLY, DrillCounts, DrillTally
from chainclient.health import HealthCounts, HealthTally
from chainclient.receipts import Attempt
from chainclient.stats import ClientStats, OlderAnswer
from chainclient.transport import (
    REQUEST_ERRORS,
    ControlPlaneConnection,
    Endpoint,
    Worker,
    describe,
    error_message,
    retry_after,
)
from chainclient.types import Drill
from chainclient.wire import REPORT_MAX_PROVIDERS

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

# A usage report carries at most this many refused documents (the newest ones).
MAX_REPORTED_REJECTIONS = 20
# The control plane accepts at most REPORT_MAX_PROVIDERS providers per report and 500
# characters of reason; a report it refuses would be retried forever, so never build one.
_MAX_REASON_CHARS = 500
# stop() keeps this much of its budget for joining the usage thread after its last report.
_FLUSH_MARGIN_S = 0.05
# The longest Retry-After a report waits for: a proxy's mistake must not silence it for a day.
MAX_RETRY_AFTER_S = 600.0

Served = dict[str, list[float]]
"""Requests per provider since the last accepted report: provider -> [requests, last at]."""

Refusal = tuple[int | None, str, float]
"""A refused document for the usage report: (version or None, reason, epoch seconds)."""


class UsageReporter:
    """Counts what this client served and refused, and reports it from its own thread.

    ``ahead`` says whether the instance is ahead of the server now (reported each interval
    while it is); ``applied_version`` is the version of the document held. ``drill`` is the
    drill of the document served, if the client takes part in it (``DrillSchedule``), and
    ``now`` the client's wall clock.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        interval: float,
        endpoint: Endpoint,
        chain: str,
        stats: ClientStats,
        ahead: Callable[[], OlderAnswer | None],
        applied_version: Callable[[], int],
        drill: Callable[[], Drill | None] = lambda: None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.enabled = enabled
        self._interval = interval
        self._endpoint = endpoint
        self._chain = chain
        self._stats = stats
        self._ahead = ahead
        self._applied_version = applied_version
        self._random = random.Random()
        self._lock = threading.Lock()
        self._served: Served = {}
        self._refusals: list[Refusal] = []
        self._health = HealthTally()
        self._drill = drill
        self._now = now
        self.drills = DrillTally() if enabled else NO_DRILL_TALLY
        """What the routers recorded of drills (``ChainClient.record_drill`` adds to it)."""
        self._schedule = DrillSchedule(drill, self._random)
        # Wakes the thread before its time: stop(), or a document that brings or ends a drill.
        self._wake = threading.Event()
        self.worker: Worker | None = None
        self._flush_by = 0.0  # monotonic deadline of the last report, set by stop()
        self._not_before = 0.0  # monotonic: no report before this (the server's Retry-After)

    # -- recording (any thread) -----------------------------------------------------------

    def record_served(self, provider: str) -> None:
        """Count one request served by ``provider``; a no-op when reporting is off."""
        if not self.enabled:
            return
        now = time.time()
        with self._lock:
            entry = self._served.get(provider)
            if entry is not None:
                entry[0] += 1
                entry[1] = now
            elif len(self._served) < REPORT_MAX_PROVIDERS:
                self._served[provider] = [1, now]

    def record_attempt(self, attempt: Attempt) -> None:
        """Count one settled attempt for the report's health; a no-op when reporting is off."""
        if self.enabled:
            self._health.record(attempt)

    def record_breaker_opened(self, provider: str) -> None:
        """Count one opening of ``provider``'s breaker; a no-op when reporting is off."""
        if self.enabled:
            self._health.record_opening(provider)

    def drill_changed(self) -> None:
        """The document served brings a drill or ends one: reconsider when to report."""
        self._wake.set()

    def record_refused(self, version: object, why: str) -> None:
        """List a refused document (once per version) for the next report."""
        if not self.enabled:
            return
        number = version if isinstance(version, int) and not isinstance(version, bool) and version > 0 else None
        with self._lock:
            _add_refusal(self._refusals, (number, why[:_MAX_REASON_CHARS], time.time()))

    def unreported(self) -> int:
        """Requests served and not yet in an accepted report."""
        with self._lock:
            return sum(int(count) for count, _ in self._served.values())

    # -- the reporting thread (started and stopped by the client, under its lifecycle lock)

    def start(self, stop_event: threading.Event) -> None:
        """Start the reporting thread, until ``stop_event`` is set; nothing when off."""
        if not self.enabled:
            return
        self.worker = Worker(self._run, name=f"chainclient-{self._chain}-usage", endpoint=self._endpoint)
        self._wake.clear()
        self.worker.start(stop_event)

    def wake(self) -> None:
        """Wake the thread now (``stop()``: it sends its last report and ends)."""
        self._wake.set()

    def after_fork(self, endpoint: Endpoint) -> None:
        """In a forked child: count from zero (the parent reports what it counted), with a
        new lock, no thread and no connection of the parent's, as ``endpoint`` (the child's
        identity). Called by the client before it starts again."""
        self._endpoint = endpoint
        self._lock = threading.Lock()  # the parent's may have been held at the fork
        self._served, self._refusals = {}, []
        self._health = HealthTally()  # a new lock too
        self.drills = DrillTally() if self.enabled else NO_DRILL_TALLY
        self._schedule = DrillSchedule(self._drill, self._random)
        self._wake = threading.Event()
        self.worker = None
        self._flush_by = 0.0
        self._not_before = 0.0
        # Forked children share the parent's generator state: reseed, or their report
        # times would stay in step across the whole fleet of workers.
        self._random.seed()

    def flush(self, timeout: float) -> None:
        """Send the pending report now, within ``timeout`` seconds, on a connection of its own
        (``ChainClient.flush_usage()``); nothing when reporting is off."""
        if self.enabled:
            self._report(self._endpoint.connect(), timeout, threading.Event())  # it closes the connection

    def flush_by(self, deadline: float) -> None:
        """Give the last report, sent once stopped, until ``deadline`` (monotonic)."""
        self._flush_by = deadline

    def _run(self, stop_event: threading.Event, connection: ControlPlaneConnection) -> None:
        try:
            next_at = time.monotonic() + self._next_wait()
            while True:
                # Cleared before deciding how long to sleep: a wake from then on is seen.
                self._wake.clear()
                if stop_event.is_set():
                    break
                now = time.monotonic()
                wait = min(next_at - now, self._schedule.due_in(self._now()))
                wait = max(wait, self._not_before - now)
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                self._report(connection, self._endpoint.timeout, stop_event)
                next_at = time.monotonic() + self._next_wait()
            # Stopping: one last best-effort report within what is left of stop()'s budget,
            # unless the control plane asked to wait (it would refuse it again).
            left = self._flush_by - time.monotonic() - _FLUSH_MARGIN_S
            if left > 0 and time.monotonic() >= self._not_before:
                self._report(connection, left, stop_event)
        finally:
            connection.close()

    def _next_wait(self) -> float:
        """Seconds until the next report: the interval, with jitter so that a fleet does not
        report in step, or longer while the control plane's Retry-After lasts."""
        interval = self._interval * self._random.uniform(0.9, 1.1)
        return max(interval, self._not_before - time.monotonic())

    def _report(self, connection: ControlPlaneConnection, timeout: float, stop_event: threading.Event) -> None:
        """Send what was served and refused, the provider health and the drill's counts, since
        the last accepted report, if anything."""
        ahead = self._ahead()
        now = self._now()
        drill_id = self._schedule.to_report(now, self.drills.pending())
        with self._lock:
            served, self._served = self._served, {}
            refusals, self._refusals = self._refusals, []
        health = self._health.take()
        drill = (drill_id, self.drills.take(drill_id)) if drill_id is not None else None
        # No empty reports, except while ahead (the fleet page must keep showing that) or in
        # a drill (the control plane must know the instance takes part).
        if not served and not refusals and health.empty and ahead is None and drill is None:
            return
        try:
            error, wait = self._send(connection, timeout, served, refusals, health, ahead, drill)
        except Exception as exc:  # a bug here must not lose the counts or end reporting
            logger.exception("chain %s: unexpected error while reporting usage", self._chain)
            error, wait = f"unexpected {type(exc).__name__}: {exc}", None
        finally:
            # Reports are a minute apart: never send one on a connection the server may
            # have closed meanwhile (a report is not resent, so that would fail it).
            connection.close()
        if wait is not None:
            wait = min(wait, MAX_RETRY_AFTER_S)
            # A little more than asked, at random: the instances refused in one minute must
            # not all come back in the same second.
            self._not_before = time.monotonic() + wait * self._random.uniform(1.0, 1.1)
            error = f"{error}; the next report in {wait:g}s, as the control plane asked"
        if drill is not None:
            self._schedule.reported(drill[0], now, accepted=error is None)
        if error is None:
            self._accepted()
        else:
            self._put_back(served, refusals)
            self._health.put_back(health)
            if drill is not None:
                self.drills.put_back(*drill)
            if not stop_event.is_set() or self._flush_by > time.monotonic():
                self._failed(error, served, refusals)

    def _send(
        self,
        connection: ControlPlaneConnection,
        timeout: float,
        served: Served,
        refusals: list[Refusal],
        health: HealthCounts,
        ahead: OlderAnswer | None,
        drill: tuple[int, DrillCounts] | None = None,
    ) -> tuple[str | None, float | None]:
        """POST one report: (None when the control plane accepted it, else why not; the
        seconds it asked to wait before the next one, if it did)."""
        version = self._applied_version()
        report = _report_body(self._endpoint.client_id, version, served, refusals, ahead)
        health_body = health.body()
        if health_body is not None:  # the key is left out when there is nothing in it
            report["health"] = health_body
        if drill is not None:  # only while taking part in a drill, and once after it
            report["drill"] = drill[1].section(drill[0])
        body = json.dumps(report).encode("utf-8")
        headers = self._endpoint.report_headers(applied_version=version)
        try:
            status, response_headers, response = connection.request(
                "POST", self._endpoint.usage_path, headers, timeout, body=body, connect_timeout=timeout
            )
        except REQUEST_ERRORS as exc:
            return describe(exc), None
        if 200 <= status < 300:
            return None, None
        wait = retry_after(response_headers) if status in (429, 503) else None
        return f"HTTP {status}: {error_message(response)}", wait

    def _put_back(self, served: Served, refusals: list[Refusal]) -> None:
        """Merge an unsent report into what has been recorded since it was taken."""
        with self._lock:
            # The older batch first, and never more providers than a report may carry (the
            # control plane would refuse it, and it would be retried forever).
            providers: Served = {}
            for batch in (served, self._served):
                for provider, (count, last) in batch.items():
                    entry = providers.get(provider)
                    if entry is not None:
                        entry[0] += count
                        entry[1] = max(entry[1], last)
                    elif len(providers) < REPORT_MAX_PROVIDERS:
                        providers[provider] = [count, last]
            self._served = providers
            merged = refusals
            for refusal in self._refusals:
                _add_refusal(merged, refusal)
            self._refusals = merged

    def _accepted(self) -> None:
        failures = self._stats.report_accepted()
        if failures:
            logger.info(
                "chain %s: usage report accepted after %d failed attempt%s",
                self._chain,
                failures,
                "" if failures == 1 else "s",
            )

    def _failed(self, why: str, served: Served, refusals: list[Refusal]) -> None:
        failures = self._stats.report_failed()
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


def _report_body(
    client_id: str, applied_version: int, served: Served, refusals: list[Refusal], ahead: OlderAnswer | None
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "client": client_id,
        "applied_version": applied_version,
        "providers": {
            provider: {"requests": int(count), "last_served_at": _utc(last)}
            for provider, (count, last) in served.items()
        },
        # Version 0 (never a live document's) stands for "no usable version": a body that
        # was not JSON, or whose version was missing or not a number.
        "rejected": [{"version": version or 0, "reason": reason, "at": _utc(at)} for version, reason, at in refusals],
    }
    if ahead is not None:
        report["ahead_of_server"] = {
            "server_epoch": ahead.epoch,
            "server_version": ahead.version,
            "since": _utc(ahead.since),
        }
    return report


def _add_refusal(refusals: list[Refusal], refusal: Refusal) -> None:
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


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


__all__ = ["MAX_REPORTED_REJECTIONS", "MAX_RETRY_AFTER_S", "DrillSchedule", "Refusal", "Served", "UsageReporter"]
