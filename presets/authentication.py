"""API credentials: service tokens (``Authorization: Bearer ...``) and signed-in sessions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions

from presets.models import ServiceToken, hash_token
from presets.roles import can_change, can_view

# Writing last_used_at on every read would put a write on the hot path; a minute's
# precision is what an operator auditing tokens needs.
LAST_USED_PRECISION = timedelta(minutes=1)


class TokenPrincipal:
    """The request's user when it authenticated with a service token."""

    is_authenticated = True
    is_active = True
    is_superuser = False
    is_staff = False

    def __init__(self, token: ServiceToken) -> None:
        self.token = token
        self.username = token.actor

    def __str__(self) -> str:
        return self.username


def find_token(raw: str) -> ServiceToken | None:
    """The active token with this secret, with its last use recorded (at most once a minute)."""
    token = ServiceToken.objects.active().filter(token_hash=hash_token(raw)).first()
    if token is not None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_PRECISION:
            ServiceToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
    return token


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[TokenPrincipal, ServiceToken] | None:
        # Not DRF's get_authorization_header: it encodes to latin-1 and raises (a 500) on
        # anything else, which a test client or an ASGI server with a lenient decoder can send.
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed(
                "use the header 'Authorization: Bearer <token>' (create a token with "
                "manage.py create_token NAME)"
            )
        # Tokens are ASCII: anything else (a lone surrogate cannot even be hashed) is unknown.
        token = find_token(raw.strip()) if raw.isascii() else None
        if token is None:
            raise exceptions.AuthenticationFailed("the token is unknown or revoked")
        return TokenPrincipal(token), token

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


def actor_of(user: Any) -> str:
    """How a change by this principal is attributed in the history."""
    return user.username


class CanRead(permissions.BasePermission):
    message = "sign in or send a service token"

    def has_permission(self, request: Any, view: Any) -> bool:
        return isinstance(request.user, TokenPrincipal) or can_view(request.user)


class CanWrite(CanRead):
    message = "changing a selection needs a write-scope token or the on-call role"

    def has_permission(self, request: Any, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return super().has_permission(request, view)
        if isinstance(request.user, TokenPrincipal):
            return request.user.token.can_write
        return can_change(request.user)
