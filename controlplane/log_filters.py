"""Log filters on the console handler: refusals on one line, and the request in every record.

Refusals: a viewer posting a change (``PermissionDenied``), a form that outlived its CSRF
token or a request for a host not allowed is an expected refusal, not a bug in this code;
Django logs the first with the exception's traceback, some 35 lines for one refusal. Those
records are rewritten to one line that says what was refused (method, path, status, who);
answers of 500 and above keep their traceback.

The request: every record written while a request is answered gets its ``request_id``, and
Django's line about a refused or failed request the access line's fields (``RequestFields``).
"""

from __future__ import annotations

import logging
import time

from django.http import HttpRequest
from django.utils.functional import LazyObject, empty

from read_path import request_context
from read_path.request_context import method_label, route_of

# The loggers Django reports refused requests to (``django.utils.log.log_response``):
# ``django.request`` and ``django.security.*`` (``csrf``, ``DisallowedHost``, ...).
REQUEST_LOGGERS = ("django.request", "django.security")


class RefusalsOnOneLine(logging.Filter):
    """On a handler: turns each 4xx record of ``REQUEST_LOGGERS`` into one line, keeping its
    level, and leaves every other record as it is. It never drops a record.

    The record is rewritten in place (the handlers after this one see it so too): its
    message gains ``(POST 403, user bob)`` and the exception's own words, and loses the
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500 or not _is_request_logger(record.name):
            return True
        try:
            self._one_line(record, status)
        except Exception:  # a record this cannot read is written as Django made it
            pass
        return True

    def _one_line(self, record: logging.LogRecord, status: int) -> None:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None and str(record.exc_info[1]):
            message = f"{message}: {record.exc_info[1]}"
        request = getattr(record, "request", None)
        method = getattr(request, "method", None) or "?"
        record.msg = f"{message} ({method} {status}, {_who(request)})"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None


class RequestFields(logging.Filter):
    """On a handler: gives each record written during a request its ``request_id``.

    Django's own line about a 4xx or 5xx answer (``REQUEST_LOGGERS``, with ``status_code``
    and ``request``) is that request's only line, the access log leaving those to it; it gets
    the access line's fields too: ``method``, ``route``, ``path`` and ``duration_ms``. Never
    drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = request_context.current.get()
        if context is None:
            return True
        if not hasattr(record, "request_id"):
            record.request_id = context.request_id
        request = getattr(record, "request", None)
        if (
            isinstance(request, HttpRequest)
            and isinstance(getattr(record, "status_code", None), int)
            and _is_request_logger(record.name)
        ):
            record.method = method_label(request.method)
            record.route = route_of(request)
            record.path = request.path
            record.duration_ms = round((time.perf_counter() - context.started) * 1000, 1)
        return True


def _is_request_logger(name: str) -> bool:
    return any(name == logger or name.startswith(f"{logger}.") for logger in REQUEST_LOGGERS)


def _who(request: object) -> str:
    """Who made the request, if the request already knows: a log line must not query the
    database (it may be the very thing that failed) to find out."""
    user = getattr(request, "user", None)
    if user is None or (isinstance(user, LazyObject) and getattr(user, "_wrapped", empty) is empty):
        return "user unknown"
    if not user.is_authenticated:
        return "not signed in"
    # A person (User) or a service token (the API's TokenPrincipal: its actor, never the token).
    return f"user {getattr(user, 'username', None) or user}"
