"""Sign-in by a trusted reverse proxy (oauth2-proxy, an nginx or Caddy forward-auth, an
identity-aware proxy): the proxy signs the person in and names them in PROXY_AUTH_USER_HEADER
(their groups, comma-separated, in PROXY_AUTH_GROUPS_HEADER).

Anyone can send those headers, so they are believed only on a connection whose peer address
(REMOTE_ADDR, as the ASGI server saw the connection; never X-Forwarded-For, which the client
writes) is in PROXY_AUTH_TRUSTED_PROXIES. A request carrying either header from any other
address is refused with 403 and logged once per address: a spoofed identity is never quietly
ignored, and a proxy missing from the list shows itself on the first request instead of as an
unexplained sign-in page.

Built on Django's RemoteUserBackend, with the person signed in by ``controlplane.sso_accounts``
(the same account rules and group-to-role mapping as OpenID Connect). The middleware is its
own: Django's RemoteUserMiddleware has no notion of a trusted peer, and it would keep a
session whose groups changed. The roles are set again whenever the groups header changes, so a group removed at
the proxy's provider takes effect at the next request the proxy signs. A session made this way
lives only behind the proxy: a request without the header, or from another address, ends it.

A proxy names people and says nothing more about them (no issuer, no subject), so their sign-in
identity is the name: issuer ``proxy:<the user header, lower case>`` (``issuer()``), subject the
name. Keeping the proxy's names unique is its provider's job, as it always was; the identity
still keeps a local account of the same name from being taken (refused until an administrator
links it), and names read from another header are another kind of name, linked afresh.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import RemoteUserBackend
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.sso_accounts import SignInRefused, sign_in

logger = logging.getLogger(__name__)

ACTOR = "sso:proxy"
BACKEND = "controlplane.proxy_auth.ProxyBackend"
# The groups header as it was when this session's roles were set.
SESSION_GROUPS_KEY = "proxy_auth_groups"
# The name the proxy signed this session in with (a linked account may be named otherwise here).
SESSION_NAME_KEY = "proxy_auth_name"
# At most this many addresses are remembered for the once-per-address warning.
WARNED_ADDRESSES_MAX = 1024

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The addresses warned about, once each in this process.
_warned: set[str] = set()
_warned_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.PROXY_AUTH_USER_HEADER)


def meta_key(header: str) -> str:
    """``X-Forwarded-User`` as Django's request.META names it."""
    return "HTTP_" + header.upper().replace("-", "_")


@functools.lru_cache(maxsize=8)
def trusted_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def is_trusted(address: str | None) -> bool:
    """Whether a connection from ``address`` may name who is signed in."""
    if not address:
        return False
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    return any(peer in network for network in trusted_networks(tuple(settings.PROXY_AUTH_TRUSTED_PROXIES)))


def issuer() -> str:
    """The issuer of the identities the proxy names: its header, one namespace of names."""
    return f"proxy:{settings.PROXY_AUTH_USER_HEADER.lower()}"


def groups_from(header: str) -> list[str]:
    return [value.strip() for value in header.split(",") if value.strip()]


class ProxyBackend(RemoteUserBackend):
    """The person the trusted proxy names, signed in by ``sso_accounts``; refusals are kept on
    the request for the 403 page."""

    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, remote_user: str | None = None, proxy_groups: str = ""
    ) -> Any:
        if request is None or not remote_user or not enabled():
            return None
        name = remote_user.strip()
        try:
            return sign_in(issuer=issuer(), subject=name, username=name, groups=groups_from(proxy_groups), actor=ACTOR)
        except SignInRefused as refused:
            logger.warning("proxy sign-in refused %s: %s", remote_user, refused)
            request.sso_refusal = str(refused)  # type: ignore[attr-defined]
            return None

    def get_user(self, user_id: Any) -> Any:
        # Sessions made by the proxy end when the proxy mode is turned off.
        return super().get_user(user_id) if enabled() else None


class ProxyAuthMiddleware:
    """Signs in the person a trusted proxy names; refuses the headers from anyone else."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            return self.get_response(request)
        refusal = self.process_request(request)
        if refusal is not None:
            return refusal
        return self.get_response(request)

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        """None to go on (someone signed in, or nobody named), or the 403 that ends the request."""
        user_key = meta_key(settings.PROXY_AUTH_USER_HEADER)
        groups_key = meta_key(settings.PROXY_AUTH_GROUPS_HEADER) if settings.PROXY_AUTH_GROUPS_HEADER else None
        address = request.META.get("REMOTE_ADDR")
        named = request.META.get(user_key)
        groups = request.META.get(groups_key, "") if groups_key else ""
        if not is_trusted(address):
            self._end_proxy_session(request)
            if named is not None or (groups_key and groups_key in request.META):
                _warn_once(str(address))
                return render(request, "registration/proxy_refused.html", {"address": address}, status=403)
            return None
        if not named or not named.strip():
            self._end_proxy_session(request)
            return None
        username = named.strip()
        user = request.user
        if (
            user.is_authenticated
            and request.session.get(SESSION_NAME_KEY) == username
            and request.session.get(SESSION_GROUPS_KEY) == groups
        ):
            return None  # the same person with the same groups: the session stands
        # The backend itself, not auth.authenticate: the proxy's word is no password guess, so
        # django-axes must not count a refused person's every request against their address.
        signed_in = ProxyBackend().authenticate(request, remote_user=username, proxy_groups=groups)
        if signed_in is None:
            if user.is_authenticated:
                auth.logout(request)
            reason = getattr(request, "sso_refusal", None) or f"{username} may not sign in here."
            return render(request, "registration/sso_refused.html", {"reason": reason}, status=403)
        if not (user.is_authenticated and user.pk == signed_in.pk):
            auth.login(request, signed_in, backend=BACKEND)
        request.user = signed_in
        request.session[SESSION_NAME_KEY] = username
        request.session[SESSION_GROUPS_KEY] = groups
        return None

    def _end_proxy_session(self, request: HttpRequest) -> None:
        if request.user.is_authenticated and request.session.get(SESSION_GROUPS_KEY) is not None:
            auth.logout(request)


def _warn_once(address: str) -> None:
    with _warned_lock:
        if address in _warned or len(_warned) >= WARNED_ADDRESSES_MAX:
            return
        _warned.add(address)
    logger.warning(
        "refused %s or %s from %s: not in PROXY_AUTH_TRUSTED_PROXIES (warned once per address)",
        settings.PROXY_AUTH_USER_HEADER,
        settings.PROXY_AUTH_GROUPS_HEADER or "its groups header",
        address,
    )
