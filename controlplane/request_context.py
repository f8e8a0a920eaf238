"""What every request Django answers gets: an id, its time in /metrics, its access line.

``RequestContextMiddleware`` is the outermost middleware, so it sees every answer, redirects
and refusals by other middleware and error pages included. The read front does the same for
the reads it answers (``read_path.request_context`` holds the shared rules).

- The id: the request's ``X-Request-ID`` when well formed, else a new one; answered in the
  ``X-Request-ID`` header and held in ``request_context.current`` until the response is
  closed, so Django's own log line about a refused request (written after the middleware)
  names it too.
- The time: ``controlplane_http_request_duration_seconds`` by route (the URL pattern that
  matched, ``unmatched`` for none), method and status; from the middleware's start to the
  view's response (a streamed body's sending is not in it).
- The access line (``controlplane.access``) for answers below 400. Django already writes one
  line for each 4xx and 5xx (``django.request``, ``django.security.*``; see
  ``log_filters.RefusalsOnOneLine``); that line gets the access fields instead
  (``log_filters.RequestFields``), so no request is logged twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.core.signals import request_finished
from django.http import HttpRequest, HttpResponseBase

from read_path import counters, request_context
from read_path.request_context import RequestContext, log_access, method_label, route_of
from read_path.request_ids import request_id_from


def _forget(**kwargs: Any) -> None:
    # A thread serving requests one after another (WSGI, the test client) keeps its context:
    # a log line between two requests must not name the last one.
    request_context.current.set(None)


class RequestContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        request_finished.connect(_forget, dispatch_uid="controlplane.request_context")

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        request_id = request_id_from(request.headers.get(request_context.HEADER))
        # Not reset on the way out: Django logs a refused request after the middleware
        # returns; request_finished (the response closed) forgets it.
        request_context.current.set(RequestContext(request_id, started))
        response = self.get_response(request)
        response[request_context.HEADER] = request_id
        seconds = time.perf_counter() - started
        route = route_of(request)
        method = method_label(request.method)
        counters.time_request(route, method, response.status_code, seconds)
        if response.status_code < 400:
            log_access(method=method, route=route, path=request.path, status=response.status_code, seconds=seconds)
        return response
