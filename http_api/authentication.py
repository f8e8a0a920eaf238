"""API credentials: service tokens (``Authorization: Bearer ...``) and signed-in sessions."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions

from presets.models import ServiceToken, use_token
from presets.roles import VIEWER_GROUP, can_change, can_view
from read_path.http import BEARER_HELP, TOKEN_REFUSED, bearer_token


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


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[TokenPrincipal, ServiceToken] | None:
        # Not DRF's get_authorization_header: it encodes to latin-1 and raises (a 500) on
        # anything else, which a test client or an ASGI server with a lenient decoder can send.
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        raw = bearer_token(header)
        if raw is None:
            raise exceptions.AuthenticationFailed(BEARER_HELP)
        token = use_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed(TOKEN_REFUSED)
        return TokenPrincipal(token), token

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


class CanRead(permissions.BasePermission):
    """A service token (any purpose: read, write, relay), or a person signed in with a role that reads
    (``roles.can_view``). Someone signed in without one is refused (403), not asked to sign in."""

    message = f"reading needs the {VIEWER_GROUP} role: ask an admin for it, or send a service token"

    def has_permission(self, request: Any, view: Any) -> bool:
        return isinstance(request.user, TokenPrincipal) or can_view(request.user)


class CanWrite(CanRead):
    message = "changing a selection needs a write-scope token or the on-call role"

    def has_permission(self, request: Any, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            # A URL that reads and changes (a chain's plans): a read refused says what reading
            # needs. DRF makes the permission per request, so this changes no other request.
            self.message = CanRead.message
            return super().has_permission(request, view)
        if isinstance(request.user, TokenPrincipal):
            return request.user.token.can_write
        return can_change(request.user)
