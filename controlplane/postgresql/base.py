"""Django's PostgreSQL backend with its connection pool, answering at once when the server
is down.

psycopg_pool makes a request wait up to the pool's timeout for a connection, which is right
while the pool is merely busy and wrong while PostgreSQL is stopped: every request would
hang for the whole timeout before its 503. So a request that gets no connection within a
moment checks whether the server accepts TCP connections at all (no PostgreSQL connection is
opened, so the bound on connections holds) and fails at once if it does not; otherwise it
goes on waiting for the pool.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool, PoolTimeout

# A busy pool hands a connection over within milliseconds; waiting this long first keeps
# the reachability check off the path of ordinary requests.
FIRST_WAIT_S = 0.2
# A pool gives up reconnecting after this long and lets the next request start afresh, so
# it recovers as soon as PostgreSQL is back (psycopg_pool's backoff otherwise grows to
# minutes over a long outage).
RECONNECT_TIMEOUT_S = 2.0


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool: ConnectionPool | None = super().pool  # type: ignore[misc]  # not in django-stubs
        if pool is not None and "getconn" not in vars(pool):
            pool.reconnect_timeout = RECONNECT_TIMEOUT_S
            pool.getconn = _failing_fast(pool, self.settings_dict)  # type: ignore[method-assign]
        return pool


def _failing_fast(pool: ConnectionPool, settings: dict[str, Any]) -> Callable[..., Any]:
    getconn = pool.getconn

    def getconn_failing_fast(timeout: float | None = None) -> Any:
        total = pool.timeout if timeout is None else timeout
        try:
            return getconn(timeout=min(FIRST_WAIT_S, total))
        except PoolTimeout:
            if total <= FIRST_WAIT_S:
                raise
        _raise_if_unreachable(settings)
        return getconn(timeout=total - FIRST_WAIT_S)

    return getconn_failing_fast


def _raise_if_unreachable(settings: dict[str, Any]) -> None:
    host = settings.get("HOST") or ""
    if not host or host.startswith("/"):
        return  # a Unix socket: nothing cheap to check
    port = int(settings.get("PORT") or 5432)
    timeout = float(settings.get("OPTIONS", {}).get("connect_timeout") or 2)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise PoolTimeout(f"the database server {host}:{port} is unreachable: {exc}") from None


def pool_stats(alias: str = "default") -> dict[str, int] | None:
    """psycopg_pool's figures for this process's pool of ``alias`` (``pool_size``,
    ``pool_available``, ``requests_waiting``, ``pool_max``, ...), or None while the process has
    no pool: reading them never opens one (the ``pool`` property would)."""
    pool: ConnectionPool | None = getattr(base.DatabaseWrapper, "_connection_pools", {}).get(alias)
    return pool.get_stats() if pool is not None else None
