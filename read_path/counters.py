"""What this process answered (chain reads by status, long polls waiting, how long each
request took), for /metrics.

Only this process knows these figures. They go through prometheus_client's multiprocess mode:
each process writes its values to files in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums
them across the host's processes. The read front counts in plain dicts on the hot path
(``front_durations``, ``front_holds``: its reads by status are the first's counts) and hands them over once a second
(``flush_front``), so a read costs a few dict updates, not locked file writes. The scrape
itself is ``controlplane.metrics``.
"""

from __future__ import annotations

import fcntl
import os
from bisect import bisect_left
from math import inf
from pathlib import Path

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.multiprocess import mark_process_dead

# Metric files are created as metrics are; the directory must exist first.
Path(settings.PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
READ_REQUESTS = Counter(
    "controlplane_chain_read_requests",
    "Chain reads (GET /api/v1/chains[/{name}]) by status",
    ["status"],
    registry=None,
)
LONG_POLL_WAITERS = Gauge(
    "controlplane_long_poll_waiters",
    "Long polls waiting for a change now",
    registry=None,
    multiprocess_mode="livesum",
)
LONG_POLLS_NOT_HELD = Counter(
    "controlplane_long_polls_not_held",
    "Long polls answered at once because the process held LONG_POLL_MAX_HELD already",
    registry=None,
)
# Reads answered from the snapshot take well under a millisecond; pages and writes tens.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_DURATION = Histogram(
    "controlplane_http_request_duration_seconds",
    "Time to answer a request, by route (URL pattern), method and status; a held long poll's "
    "wait is not in it (controlplane_long_poll_hold_seconds)",
    ["route", "method", "status"],
    buckets=REQUEST_BUCKETS,
    registry=None,
)
# A long poll is held up to its ``wait`` (at most 60 s) until its chain changes.
HOLD_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0)
LONG_POLL_HOLD = Histogram(
    "controlplane_long_poll_hold_seconds",
    "How long long polls were held waiting for a change, by status (200 changed, 304 the wait ran out)",
    ["status"],
    buckets=HOLD_BUCKETS,
    registry=None,
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# --- per-process figures ------------------------------------------------------------------


def count_read(status: int) -> None:
    """One chain read answered by Django (the read front batches its own: ``flush_front``)."""
    READ_REQUESTS.labels(str(status)).inc()


def time_request(route: str, method: str, status: int, seconds: float) -> None:
    """One request answered by Django (the read front batches its own: ``Durations``)."""
    REQUEST_DURATION.labels(route, method, str(status)).observe(seconds)


class Durations:
    """Observations of one histogram kept in memory until ``flush``: on the hot path, a
    bucket's count and the sum go up in a dict, as ``Histogram.observe`` would in its file."""

    def __init__(self, histogram: Histogram, buckets: tuple[float, ...]) -> None:
        self.histogram = histogram
        self.bounds = (*buckets, inf)  # the histogram's buckets, +Inf included
        # label values -> [sum of seconds, count in bucket 0, ..., count in +Inf] since the
        # last flush. Rows are kept (zeroed by ``flush``): the read front holds its own.
        self.pending: dict[tuple[str | int, ...], list[float]] = {}

    def row(self, labels: tuple[str | int, ...]) -> list[float]:
        """The row ``observe`` adds to for these label values (the same list until the process ends)."""
        row = self.pending.get(labels)
        if row is None:
            row = self.pending[labels] = [0.0] * (len(self.bounds) + 1)
        return row

    def observe(self, labels: tuple[str | int, ...], seconds: float) -> None:
        row = self.row(labels)
        row[0] += seconds
        row[1 + bisect_left(self.bounds, seconds)] += 1  # the first bucket with seconds <= bound

    def flush(self) -> None:
        """Add what was observed since the last flush to the shared files."""
        for labels, row in self.pending.items():  # the event loop is single-threaded
            if not any(row[1:]):
                continue
            child = self.histogram.labels(*map(str, labels))
            # The histogram's own sum and per-bucket values (what observe() increments); the
            # public API has no "add n observations" (tests/test_observability.py checks the result
            # equals observe()'s).
            child._sum.inc(row[0])
            for bucket, n in zip(child._buckets, row[1:], strict=True):
                if n:
                    bucket.inc(n)
            row[:] = [0.0] * len(row)


def flush_front(*, waiters: int, not_held: int = 0) -> None:
    """Hand the read front's counts and durations since the last flush to the shared files,
    and reset them (the caller resets ``not_held``). Every read the front answers is timed,
    so its reads by status are its durations' counts by status."""
    if not_held:
        LONG_POLLS_NOT_HELD.inc(not_held)
    counts: dict[str | int, float] = {}
    for (_, _, status), row in front_durations.pending.items():
        counts[status] = counts.get(status, 0) + sum(row[1:])
    for status, n in counts.items():
        if n:
            READ_REQUESTS.labels(str(status)).inc(n)
    LONG_POLL_WAITERS.set(waiters)
    front_durations.flush()
    front_holds.flush()


def prepare_multiprocess_dir(path: str | None = None) -> Path:
    """Create the directory and clean what earlier servers left, as prometheus_client asks.

    Called by every web worker at start. Workers of one server share a parent process, so the
    first worker of a new server (a different parent than the one recorded) removes the files
    of processes that are gone; its siblings and respawned workers keep their counts. Live
    gauges of workers that died are removed either way, or a crashed worker's waiters would
    be counted for ever.
    """
    directory = Path(path or settings.PROMETHEUS_MULTIPROC_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = directory / ".server"
        server = str(os.getppid())
        if not marker.exists() or marker.read_text() != server:
            # Only dead processes' files: a process still running (another server sharing
            # the directory, e.g. under `make run` and a test run) keeps writing to its own.
            for file in directory.glob("*.db"):
                if not _alive(int(file.stem.rpartition("_")[2])):
                    file.unlink()
            marker.write_text(server)
        for file in directory.glob("gauge_live*_*.db"):
            pid = int(file.stem.rpartition("_")[2])
            if not _alive(pid):
                mark_process_dead(pid, str(directory))
    return directory


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# The front's reads by (route, method, status), and its held long polls by (status,).
front_durations = Durations(REQUEST_DURATION, REQUEST_BUCKETS)
front_holds = Durations(LONG_POLL_HOLD, HOLD_BUCKETS)
