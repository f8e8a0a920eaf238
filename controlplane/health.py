"""Liveness and readiness probes for load balancers and orchestrators."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse

from presets.signing import signing_problem
from read_path import notifications
from read_path.http import error_body


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no dependency is checked)."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """The process can serve: its database answers and it can open the key that signs (when
    there is one: a wrong ``SIGNING_KEYS_SECRET`` answers 503 naming the one it needs). A
    process running the read front also says how its long polls learn of changes
    (``change_notifications``: ``listen``, or ``polling`` with the ``detail`` of why): polling
    still serves, so it stays ready."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        # A process that cannot open the key that signs would answer reads with 503 rather
        # than unsigned documents: out of rotation, saying which secret it needs.
        cannot_sign = signing_problem()
    except DatabaseError:
        return JsonResponse(error_body(503, "database unreachable"), status=503)
    if cannot_sign:
        return JsonResponse(error_body(503, f"cannot sign chain documents: {cannot_sign}"), status=503)
    body = {"status": "ready"}
    state = notifications.state()
    if state is not None:
        body["change_notifications"] = state.mode
        if state.detail:
            body["detail"] = state.detail
    return JsonResponse(body)
