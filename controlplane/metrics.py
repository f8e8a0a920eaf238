"""Prometheus metrics at ``GET /metrics`` (DESIGN §7), correct with many web processes.

Two kinds of figures, kept apart on purpose:

- Facts about chains (active version, pinned or not, pin age, changes by action, expiries,
  alerts by kind) are read from the database at scrape time by ``ChainCollector``. The
  database is shared, so any web process answers the scrape exactly; nothing is counted in
  memory that a restart or a second process could lose or double.
- What one process saw (chain reads by status, long polls waiting) only that process knows.
  They go through prometheus_client's multiprocess mode: each process writes its values to
  files in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums them across the host's processes.
  The read front counts in a plain dict on the hot path and hands the counts over once a
  second (``flush_front``), so a read costs a dict update, not a locked file write.
"""

from __future__ import annotations

import fcntl
import hmac
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

# Metric files are created as metrics are; the directory must exist first.
Path(settings.PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
READ_REQUESTS = Counter(
    "controlplane_chain_read_requests", "Chain reads (GET /api/v1/chains[/{name}]) by status",
    ["status"], registry=None,
)
LONG_POLL_WAITERS = Gauge(
    "controlplane_long_poll_waiters", "Long polls waiting for a change now",
    registry=None, multiprocess_mode="livesum",
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


# --- facts from the database ----------------------------------------------------------------


class ChainCollector(Collector):
    """Chain state, changes, expiries and alerts, computed from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        from audit.alerts import pin_start
        from audit.models import Alert
        from presets.models import Action, Selection

        now = timezone.now()
        version = GaugeMetricFamily("controlplane_chain_version", "Active version of each chain",
                                    labels=["chain"])
        pinned = GaugeMetricFamily("controlplane_chain_pinned",
                                   "1 when a pin (a non-default preset) is live, else 0",
                                   labels=["chain"])
        pin_age = GaugeMetricFamily("controlplane_chain_pin_age_seconds",
                                    "Seconds since the live pin started (0 when not pinned)",
                                    labels=["chain"])
        for selection in Selection.objects.select_related("chain"):
            name = selection.chain.name
            version.add_metric([name], selection.version)
            pinned.add_metric([name], 1 if selection.is_pinned else 0)
            age = 0.0
            if selection.is_pinned:
                start = pin_start(chain=selection.chain, version=selection.version)
                began = start.at if start is not None else selection.updated_at
                age = max(0.0, (now - began).total_seconds())
            pin_age.add_metric([name], age)
        yield from (version, pinned, pin_age)

        changes = CounterMetricFamily("controlplane_selection_changes",
                                      "Selection changes (versions) by chain and action",
                                      labels=["chain", "action"])
        expiries = CounterMetricFamily("controlplane_pin_expiries",
                                       "Pins reverted because they expired, by chain",
                                       labels=["chain"])
        counted = (Selection.history.values("chain__name", "action").annotate(n=Count("history_id"))
                   .order_by("chain__name", "action"))
        for row in counted:
            changes.add_metric([row["chain__name"], row["action"]], row["n"])
            if row["action"] == Action.EXPIRE:
                expiries.add_metric([row["chain__name"]], row["n"])
        yield from (changes, expiries)

        alerts = CounterMetricFamily("controlplane_alerts", "Alerts raised, by kind",
                                     labels=["kind"])
        open_alerts = GaugeMetricFamily("controlplane_alerts_open", "Alerts not yet resolved",
                                        labels=["kind"])
        for row in Alert.objects.values("kind").annotate(n=Count("id")).order_by("kind"):
            alerts.add_metric([row["kind"]], row["n"])
        for row in (Alert.objects.filter(resolved_at__isnull=True).values("kind")
                    .annotate(n=Count("id")).order_by("kind")):
            open_alerts.add_metric([row["kind"]], row["n"])
        yield from (alerts, open_alerts)


def registry() -> CollectorRegistry:
    """A fresh registry per scrape: the host's per-process files plus the database's facts."""
    scrape = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(scrape, path=settings.PROMETHEUS_MULTIPROC_DIR)
    scrape.register(ChainCollector())
    return scrape


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition; with METRICS_TOKEN set, only for that bearer token."""
    if settings.METRICS_TOKEN:
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            raw.strip().encode(), settings.METRICS_TOKEN.encode()
        ):
            response = HttpResponse("metrics need 'Authorization: Bearer <METRICS_TOKEN>'\n",
                                    status=401, content_type="text/plain")
            response["WWW-Authenticate"] = "Bearer"
            return response
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET"})
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE)


def value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value in an exposition (for tests and scripts); None when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted((labels or {}).items()))  # as exposed
    key = f"{name}{{{wanted}}}" if wanted else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, number = line.rpartition(" ")
        if sample == key:
            return float(number)
    return None

