"""The page a person sees when django-axes refuses a sign-in after too many failures."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with what happened and when to try again (the lock lifts by itself)."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return render(
        request,
        "registration/locked_out.html",
        {
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "minutes": minutes,
        },
        status=429,
    )
