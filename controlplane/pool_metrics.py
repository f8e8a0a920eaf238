"""Each web process's database pool in /metrics: connections in use and idle, requests waiting.

Only the process that owns a pool can read it (psycopg_pool's ``get_stats``), so each web
process writes its figures to the multiprocess files once a second (the read front's flush
calls ``record``) and the scraping process records its own again at the scrape. The gauges
are ``livesum``: the sum over the host's live web processes.
"""

from __future__ import annotations

from prometheus_client import Gauge

from controlplane.postgresql.base import pool_stats
from read_path import counters  # noqa: F401 - creates the metrics directory first

POOL_CONNECTIONS = Gauge(
    "controlplane_db_pool_connections",
    "Pooled PostgreSQL connections of the web processes, by state (in_use, idle)",
    ["state"],
    registry=None,
    multiprocess_mode="livesum",
)
POOL_WAITING = Gauge(
    "controlplane_db_pool_waiting_requests",
    "Requests of the web processes waiting for a pooled connection now",
    registry=None,
    multiprocess_mode="livesum",
)
POOL_MAX = Gauge(
    "controlplane_db_pool_max_connections",
    "The web processes' pools' bound on connections (DATABASE_POOL_MAX_SIZE each)",
    registry=None,
    multiprocess_mode="livesum",
)


def record() -> None:
    """Write this process's pool figures (nothing while it has no pool: none is opened for
    this, and a process without one counts 0)."""
    stats = pool_stats() or {}
    size = stats.get("pool_size", 0)
    idle = stats.get("pool_available", 0)
    POOL_CONNECTIONS.labels("in_use").set(max(0, size - idle))
    POOL_CONNECTIONS.labels("idle").set(idle)
    POOL_WAITING.set(stats.get("requests_waiting", 0))
    POOL_MAX.set(stats.get("pool_max", 0))
