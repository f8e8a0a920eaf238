"""DRF's exception handler: every API failure in the one error shape (``read_path.http.error_body``)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from http_api.parsers import BodyRejected
from presets.exceptions import ServiceError
from presets.key_sealing import SealedKeyError
from read_path.http import error_body

log = logging.getLogger(__name__)


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    """DRF's nested validation detail as 'field: message' lines."""
    if isinstance(detail, dict):
        lines: list[str] = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            lines += _flatten(value, f"{prefix}.{name}" if prefix and name else name or prefix)
        return lines
    if isinstance(detail, list):
        return [line for item in detail for line in _flatten(item, prefix)]
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.status, exc.message, exc.details, exc.code), status=exc.status)
    if isinstance(exc, Http404):
        return Response(error_body(404, str(exc) or "not found"), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, DatabaseError):
        request = context.get("request")
        log.error(
            "database unavailable on %s %s: %s: %s",
            getattr(request, "method", "?"),
            getattr(request, "path", "?"),
            exc.__class__.__name__,
            exc,
        )
        return Response(
            error_body(503, "the control plane's database is unavailable; retry shortly"),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, SealedKeyError):
        # Never a document unsigned in place of a signed one: this process is not ready (/readyz).
        log.error("cannot sign chain documents: %s", exc)
        return Response(
            error_body(503, "this control plane process cannot open its signing key; /readyz says why"),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body(
                400, f"the body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes: send a smaller JSON object"
            ),
            status=400,
        )
    if isinstance(exc, exceptions.APIException):
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        if isinstance(exc, exceptions.ValidationError):
            lines = _flatten(exc.detail)
            message = "; ".join(lines) or "invalid input"
            details: dict[str, Any] = {"fields": exc.detail} if isinstance(exc.detail, dict) else {"errors": exc.detail}
            return Response(error_body(400, message, details), status=400, headers=headers)
        if isinstance(exc, BodyRejected):
            return Response(error_body(400, str(exc.detail), {"field": exc.field}), status=400)
        if isinstance(exc, exceptions.ParseError):
            message = "the body is not valid JSON: send a JSON object with Content-Type: application/json"
            return Response(error_body(400, message, {"parser": str(exc.detail)}), status=400)
        message = str(exc.detail)
        if isinstance(exc, exceptions.NotAuthenticated):
            message = "no credentials: send 'Authorization: Bearer <token>' (manage.py create_token NAME) or sign in"
        return Response(error_body(exc.status_code, message), status=exc.status_code, headers=headers)
    return None


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body(404, f"no API endpoint at {request.path}"), status=404)


def api_server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body(500, "internal error; it has been logged", code="internal_error"), status=500)
