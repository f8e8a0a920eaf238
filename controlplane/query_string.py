"""A query string PostgreSQL cannot hold is the client's mistake: a 400, not a 503.

``?chain=%00`` reaches a query as a NUL, PostgreSQL refuses it, and the database error would
be answered as an outage. Every page and endpoint takes its parameters from the query string,
so one check before any view keeps the rule in one place: the JSON error on /api, a plain
page elsewhere (rendered without the request, so nothing touches the database).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from http_api.parsers import unstorable_character
from read_path.http import error_body


def refused_parameter(request: HttpRequest) -> tuple[str, str] | None:
    """(name, problem) of the first query parameter, name or value, that cannot be stored."""
    for name, values in request.GET.lists():
        for text in (name, *values):
            problem = unstorable_character(text)
            if problem is not None:
                # ASCII only: the name itself may hold what cannot be rendered.
                return json.dumps(name[:60])[1:-1], problem
    return None


class RefuseUnstorableQueryMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            refused = refused_parameter(request)
        except TooManyFieldsSent:
            return bad_request(
                request,
                f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query parameters: send fewer",
                field="query",
            )
        if refused is None:
            return self.get_response(request)
        name, problem = refused
        return bad_request(request, f"query parameter {name}: contains {problem}; remove it", field=name)


def bad_request(request: HttpRequest, message: str, *, field: str) -> HttpResponse:
    """The 400 answer: the JSON error on /api, the plain page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body(400, message, {"field": field}), status=400)
    return HttpResponse(render_to_string("400.html", {"message": message}), status=400)
