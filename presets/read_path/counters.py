"""What this process answered (chain reads by status, long polls waiting), for /metrics.

Only this process knows these figures. They go through prometheus_client's multiprocess mode:
each process writes its values to files in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums
them across the host's processes. The read front counts in a plain dict on the hot path
(``read_counts``) and hands the counts over once a second (``flush_front``), so a read costs a
dict update, not a locked file write. The scrape itself is ``controlplane.metrics``.
"""

from __future__ import annotations

import fcntl
import os
from collections import defaultdict
from pathlib import Path

from django.conf import settings
from prometheus_client import Counter, Gauge
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
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# --- per-process figures ------------------------------------------------------------------


def count_read(status: int) -> None:
    """One chain read answered by Django (the read front batches its own: ``flush_front``)."""
    READ_REQUESTS.labels(str(status)).inc()


def flush_front(counts: dict[int, int], *, waiters: int) -> None:
    """Hand the read front's counts since the last flush to the shared files, and reset them."""
    for status, n in list(counts.items()):
        if not n:
            continue
        counts[status] -= n  # the event loop is single-threaded: nothing lands in between
        READ_REQUESTS.labels(str(status)).inc(n)
    LONG_POLL_WAITERS.set(waiters)


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


# Answers by status since the last flush: a dict update per read on the front.
read_counts: defaultdict[int, int] = defaultdict(int)
