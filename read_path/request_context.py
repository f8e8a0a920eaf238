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

import itertools
import logging
import os
import re
import secrets
from contextvars import ContextVar

from django.http import HttpRequest

HEADER = "X-Request-ID"
# Letters, digits and ``._:+/=-``, at most 64: UUIDs, hex or base64 ids and the like. Anything
# else (spaces, quotes, control characters, a 4 kB value) is replaced, never logged.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:+/=-]{1,64}")
ACCEPTED_ID_BYTES = re.compile(_ACCEPTED.pattern.encode())  # the same rule, for headers as bytes

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


def _new_id_source() -> None:
    global _id_numbers
    # 64 random bits, the first set (so every id has 32 hex digits), then a 64-bit counter.
    _id_numbers = itertools.count((secrets.randbits(64) | 1 << 63) << 64)


_id_numbers = itertools.count()
_new_id_source()
os.register_at_fork(after_in_child=_new_id_source)


def request_id_from(header: str | bytes | None) -> str:
    """The request's id: ``header`` (an incoming ``X-Request-ID``) when it is well formed,
    else a new random one (32 hex digits). Bytes are read as latin-1, as ASGI servers pass
    headers."""
    if header:
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        if _ACCEPTED.fullmatch(header):
            return header
    # An id, not a secret: unique per process (a random prefix, drawn again in a forked child)
    # and a counter, cheaper than any random draw per read on the front.
    return f"{next(_id_numbers):x}"


def new_request_id_bytes() -> bytes:
    """A new id, as ``request_id_from`` makes them, as the bytes of a header (the read
    front's plain reads)."""
    return b"%x" % next(_id_numbers)


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
