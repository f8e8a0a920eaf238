"""Every ``ChainClient`` of this process, restarted in a child of ``os.fork()``.

Threads do not survive ``fork()`` (gunicorn ``--preload``, Celery prefork), and locks held
by the parent's threads at that instant stay held in the child: each client is told
``after_fork()`` in the child, from the hook ``os.register_at_fork`` runs (POSIX; there is
no ``fork()`` without it). The clients are held weakly, so they are still collected.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")


class ForkAware(Protocol):
    def after_fork(self) -> None: ...


# Each client with its chain's name, for the log line should its restart fail.
_CLIENTS: weakref.WeakKeyDictionary[ForkAware, str] = weakref.WeakKeyDictionary()


def restart_after_fork(client: ForkAware, *, chain: str) -> None:
    """Call ``client.after_fork()`` in every child this process forks from now on."""
    _CLIENTS[client] = chain


def _after_fork_in_child() -> None:
    """Restart every client in a child of ``os.fork()``; a failure must not fail the fork."""
    for client, chain in list(_CLIENTS.items()):
        try:
            client.after_fork()
        except Exception:
            logger.exception("chain %s: could not restart the client after fork()", chain)


if hasattr(os, "register_at_fork"):  # POSIX; there is no fork() without it
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["ForkAware", "restart_after_fork"]
