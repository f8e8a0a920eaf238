"""Sign-in throttling (django-axes): the client's address, the two limits, and the page a
person sees when a sign-in is refused.

Failures are counted per (username, address) and per address across usernames, over the last
LOGIN_LOCKOUT_MINUTES. LOGIN_FAILURE_LIMIT failures for one username from one address pause
that username there; LOGIN_ADDRESS_FAILURE_LIMIT failures from one address, whatever the
usernames, pause every sign-in from it, so trying one password on many usernames (spraying)
is slowed as much as guessing one person's.
"""

from __future__ import annotations

from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_address(request: HttpRequest) -> str | None:
    """The address a sign-in comes from (AXES_CLIENT_IP_CALLABLE): the connection's, or behind
    FORWARDED_FOR_PROXIES proxies, the one the outermost of them appended to X-Forwarded-For
    (entries further left are whatever the client sent, so they are never trusted)."""
    proxies = settings.FORWARDED_FOR_PROXIES
    if proxies:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [part for part in forwarded if part]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")


def address_failures(request: HttpRequest) -> int:
    """Failed sign-ins from the request's address, all usernames together, in the window."""
    total = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
        attempt_time__gte=get_cool_off_threshold(request),
    ).aggregate(total=Sum("failures_since_start"))["total"]
    return int(total or 0)


def address_is_paused(request: HttpRequest) -> bool:
    return address_failures(request) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT


def failure_limit(request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
    """AXES_FAILURE_LIMIT: how many failures the (username, address) may have. Axes counts
    those itself; once the address as a whole has had its failures, none are left."""
    if address_is_paused(request):
        return 0
    return int(settings.LOGIN_FAILURE_LIMIT)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with what happened (this username, or this whole address) and when to try again
    (the pause lifts by itself)."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    by_address = address_is_paused(request)
    return render(
        request,
        "registration/locked_out.html",
        {
            "by_address": by_address,
            "failure_limit": settings.LOGIN_ADDRESS_FAILURE_LIMIT if by_address else settings.LOGIN_FAILURE_LIMIT,
            "minutes": minutes,
        },
        status=429,
    )
