"""Django's PostgreSQL backend with its connection pool, answering within a bound whatever
the database does.

Two ways a database fails a request:

- **It refuses or is gone** (stopped, port closed): psycopg_pool makes a request wait up to
  the pool's timeout for a connection, which is right while the pool is merely busy and wrong
  while PostgreSQL is stopped: every request would hang for the whole timeout before its 503.
  So a request that gets no connection within a moment checks whether the server accepts TCP
  connections at all (no PostgreSQL connection is opened, so the bound on connections holds)
  and fails at once if it does not; otherwise it goes on waiting for the pool, for what is
  left of its timeout.
- **It stops answering** (the server's processes stopped, a network path that stops
  forwarding): the kernel on the other side (or a proxy's) still accepts the bytes, so
  neither TCP keepalives nor ``tcp_user_timeout`` notice, and libpq waits for ever for an
  answer. So every wait for the server on one of these connections (a statement, the pool's
  check, a commit) has a deadline, ``DATABASE_STATEMENT_TIMEOUT``; past it the connection is
  closed (PostgreSQL rolls back whatever it had begun when it notices) and the request fails
  with an ``OperationalError``, which every interface answers with a 503. A statement that
  is merely slow is cut the same way: nothing the web and worker processes run takes
  seconds. Migrations may (an index on a big table): a schema editor lifts the deadline
  while it works; so does creating or dropping a database.

A request therefore answers within ``DATABASE_POOL_TIMEOUT`` (waiting for a connection) plus
``DATABASE_STATEMENT_TIMEOUT`` (its last wait), whatever the fault.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool, PoolTimeout

# A busy pool hands a connection over within milliseconds; waiting this long first keeps
# the reachability check off the path of ordinary requests.
FIRST_WAIT_S = 0.2
# A pool gives up reconnecting after this long and lets the next request start afresh, so
# it recovers as soon as PostgreSQL is back (psycopg_pool's backoff otherwise grows to
# minutes over a long outage).
RECONNECT_TIMEOUT_S = 2.0
# psycopg's own signal that a wait ran past its timeout (an OperationalError).
_WaitTimeout: type[Exception] = psycopg.errors._WaitTimeout


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool: ConnectionPool | None = super().pool  # type: ignore[misc]  # not in django-stubs
        if pool is not None and "getconn" not in vars(pool):
            pool.reconnect_timeout = RECONNECT_TIMEOUT_S
            pool.getconn = _failing_fast(pool, self.settings_dict)  # type: ignore[method-assign]
        return pool

    def _configure_connection(self, connection: psycopg.Connection[Any]) -> bool:
        # Called for every new connection, pooled (by the pool, before its first use) or
        # not, before any statement of Django's own. The connection Django opens to the
        # server itself rather than the database (creating or dropping a database, which
        # waits for other sessions) is an operator's, like a migration's.
        if self.alias != NO_DB_ALIAS:
            answer_within(connection, statement_timeout())
        return bool(super()._configure_connection(connection))  # type: ignore[misc]  # not in django-stubs

    def schema_editor(self, *args: Any, **kwargs: Any) -> Any:
        editor = super().schema_editor(*args, **kwargs)
        return _Unbounded(self, editor)


def statement_timeout() -> float | None:
    """``DATABASE_STATEMENT_TIMEOUT`` in seconds, None when it is 0 (no deadline)."""
    seconds = float(getattr(settings, "DATABASE_STATEMENT_TIMEOUT", 0) or 0)
    return seconds or None


def answer_within(connection: psycopg.Connection[Any], seconds: float | None) -> None:
    """Give every wait for the server on ``connection`` a deadline of ``seconds`` (None: no
    deadline). Past it the connection is closed and the wait raises ``OperationalError``."""
    wait = type(connection).wait

    if seconds is None:
        vars(connection).pop("wait", None)
        return

    def bounded_wait(gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        try:
            return wait(connection, gen, interval, seconds if timeout is None else timeout)
        except _WaitTimeout:
            if timeout is not None:
                raise  # psycopg's own bounded wait (a cancel, notifies): it handles it
            # The connection is mid-protocol: nothing else can be sent on it. PostgreSQL rolls
            # back what it had begun once it notices the connection gone.
            connection.pgconn.finish()
            raise psycopg.OperationalError(
                f"the database did not answer within {seconds:g} s (DATABASE_STATEMENT_TIMEOUT); "
                "the connection was closed"
            ) from None

    connection.wait = bounded_wait  # type: ignore[method-assign]


class _Unbounded:
    """A schema editor during which the wrapper's connection waits as long as it takes."""

    def __init__(self, wrapper: DatabaseWrapper, editor: Any) -> None:
        self._wrapper = wrapper
        self._editor = editor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._editor, name)

    def __enter__(self) -> Any:
        self._wrapper.ensure_connection()
        answer_within(self._wrapper.connection, None)
        return self._editor.__enter__()

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self._editor.__exit__(*exc_info)
        finally:
            if self._wrapper.connection is not None:
                answer_within(self._wrapper.connection, statement_timeout())


def _failing_fast(pool: ConnectionPool, settings: dict[str, Any]) -> Callable[..., Any]:
    getconn = pool.getconn

    def getconn_failing_fast(timeout: float | None = None) -> Any:
        total = pool.timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            return getconn(timeout=min(FIRST_WAIT_S, total))
        except PoolTimeout:
            if total <= FIRST_WAIT_S:
                raise
        _raise_if_unreachable(settings)
        # The first try may have run past its moment (a check of a connection to a server
        # that stopped answering takes up to DATABASE_STATEMENT_TIMEOUT): what is left.
        left = total - (time.monotonic() - started)
        if left <= 0:
            raise PoolTimeout(f"couldn't get a connection after {total:.2f} sec")
        return getconn(timeout=left)

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
