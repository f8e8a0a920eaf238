"""Liveness and readiness probes for load balancers and orchestrators."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse

from presets.read_path.http import error_body


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no dependency is checked)."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """The process can serve: its database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse(error_body(503, "database unreachable"), status=503)
    return JsonResponse({"status": "ready"})
