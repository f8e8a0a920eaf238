"""The request being answered: its id, its route for /metrics and its access line.

Every request gets an id: the client's (or a proxy's) ``X-Request-ID`` when it is short and
made of safe characters, else a new one. It is answered in the ``X-Request-ID`` header and
held in ``current`` while the request is served, so that every log record written meanwhile
names it (``controlplane.log_filters.RequestFields`` adds ``request_id``). The read front
applies this to the reads it answers; ``controlplane.request_context`` to everything Django
answers.

Routes are URL patterns, never raw paths, so a label or a log field has as many values as the
URLconf has patterns: ``/api/v1/chains/<slug:name>``, not one value per chain or per typo.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from django.http import HttpRequest

HEADER = "X-Request-ID"

# What a request that matched no URL pattern counts as (404s of made-up paths, redirects
# answered before the URLconf is read): one value, however many paths clients invent.
UNMATCHED = "unmatched"
# The read front's routes, spelled as Django's URLconf spells them (tests/test_observability.py
# checks they match), so /metrics has one series per route whichever process part answered.
CHAINS_ROUTE = "/api/v1/chains"
CHAIN_ROUTE = "/api/v1/chains/<slug:name>"

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# One line per request (method, route, path, status_code, duration_ms and request_id);
# settings.ACCESS_LOG turns it on or off. The read front's 200s and 304s (every SDK
# instance's polls: a line would cost as much as the read itself) have a logger of their own,
# off unless ACCESS_LOG_READS.
access_log = logging.getLogger("controlplane.access")
reads_log = logging.getLogger("controlplane.access.reads")


class RequestContext:
    """The request being answered: its id, and ``time.perf_counter()`` when it arrived."""

    __slots__ = ("request_id", "started")

    def __init__(self, request_id: str, started: float) -> None:
        self.request_id = request_id
        self.started = started


current: ContextVar[RequestContext | None] = ContextVar("controlplane_request", default=None)


def route_of(request: HttpRequest) -> str:
    """The URL pattern a request Django answered matched (``/chains/<slug:name>/``), or
    ``unmatched``."""
    match = getattr(request, "resolver_match", None)
    if match is None or match.route is None:
        return UNMATCHED
    return "/" + str(match.route)


def method_label(method: str | None) -> str:
    """The method as a metric label: the usual ones, ``other`` for any a client invents."""
    return method if method in _METHODS else "other"


def log_access(
    *,
    method: str,
    route: str,
    path: str,
    status: int,
    seconds: float,
    held_seconds: float | None = None,
    logger: logging.Logger = access_log,
) -> None:
    """The access line of one answered request (``request_id`` comes from ``current``).
    ``held_seconds``: how long a long poll was held waiting for a change (included in
    ``seconds``)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    fields: dict[str, object] = {
        "method": method,
        "route": route,
        "path": path,
        "status_code": status,
        "duration_ms": round(seconds * 1000, 1),
    }
    if held_seconds is not None:
        fields["held_ms"] = round(held_seconds * 1000, 1)
    logger.info("%s %s %s %.1fms", method, path, status, seconds * 1000, extra=fields)
