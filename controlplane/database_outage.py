"""Turn a database outage, or a process that cannot open its signing key, into a clear 503
instead of a 500 and a stack trace.

DRF views already answer 503 for any DatabaseError (presets/api_errors.py); this covers the
rest: the on-call pages, the admin, the login page, and any /api path Django itself serves.
The page is rendered without the request, so no context processor (the lazy ``user``) and
no template tag touches the database. Nothing is cached: the next request after the database
comes back is served normally (CONN_HEALTH_CHECKS replaces a dead persistent connection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from presets.key_sealing import SealedKeyError
from read_path.http import error_body

log = logging.getLogger(__name__)

UNAVAILABLE = "the control plane's database is unavailable; retry shortly"


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """The 503 answer for ``request``: the JSON error on /api, the outage page elsewhere."""
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(error_body(503, UNAVAILABLE), status=503)
    else:
        response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = "5"
    response["Cache-Control"] = "no-store"
    return response


def cannot_sign(request: HttpRequest, exception: SealedKeyError) -> HttpResponse:
    """The 503 answer of a process that cannot open its signing key: it changes nothing rather
    than let a document go out unsigned (presets/signing.py); /readyz says the same."""
    log.error("cannot sign chain documents on %s %s: %s", request.method, request.path, exception)
    if request.path.startswith("/api/"):
        message = "this control plane process cannot open its signing key; /readyz says why"
        response: HttpResponse = JsonResponse(error_body(503, message), status=503)
    else:
        response = HttpResponse(render_to_string("503_signing.html"), status=503)
    response["Retry-After"] = "5"
    response["Cache-Control"] = "no-store"
    return response


class DatabaseOutageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, SealedKeyError):
            return cannot_sign(request, exception)
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.error(
            "database unavailable on %s %s: %s: %s",
            request.method,
            request.path,
            exception.__class__.__name__,
            exception,
        )
        return database_unavailable(request)
