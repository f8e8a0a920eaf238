"""Database work for the read path, off its event loop: in a worker thread with a connection of
its own, closed after, so no idle connection is left per thread (the snapshot's loads, the
token checks, the LISTEN self-check's NOTIFY)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

P = ParamSpec("P")
R = TypeVar("R")


def _with_fresh_connection(func: Callable[P, R]) -> Callable[P, R]:
    """Database work done for the front runs in a worker thread outside any request: open a
    connection for it and close it after, so no idle connection is left per thread."""

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()

    return wrapper


def in_worker_thread(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``func`` as an awaitable run in a worker thread with its own short-lived connection."""
    return sync_to_async(_with_fresh_connection(func), thread_sensitive=False)
