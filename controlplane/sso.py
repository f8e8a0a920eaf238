"""Sign-in with OpenID Connect: the authorization-code flow (with PKCE and a nonce) of
mozilla-django-oidc, configured by the OIDC_* settings, with the provider's endpoints read
from its discovery document at the first sign-in.

On top of the library: the ID token's issuer and audience are checked (the library checks
only its signature and expiry), the userinfo must be about the ID token's subject, an email
address is a username only when the provider verified it (``email_verified``), and the
person is signed in by ``controlplane.sso_accounts`` (the account linked to the ID token's
issuer and subject, or made and linked; roles from the groups claim at every sign-in). A
refusal, a provider that cannot be reached or a stale sign-in link lands on the sign-in page
saying so, never on an error page.

URLs (under /accounts/oidc/): ``authenticate/`` starts a sign-in, ``callback/`` is where the
provider sends the browser back (register <base URL>/accounts/oidc/callback/ there). Both
answer 404 while OIDC_ISSUER is unset.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from controlplane.sso_accounts import SignInRefused, group_values, provider_name, sign_in

logger = logging.getLogger(__name__)

# The discovery document's endpoints this module uses, by their names there.
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")
# A provider's endpoints change rarely; a process reads them again after this long.
DISCOVERY_TTL_SECONDS = 3600


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or is not about OIDC_ISSUER."""


def enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


def actor() -> str:
    """Who role changes made at an OpenID Connect sign-in are attributed to."""
    return f"sso:{urlsplit(settings.OIDC_ISSUER).hostname}"


# --- the provider's metadata ------------------------------------------------------------

_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_discovery_lock = threading.Lock()


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def provider_metadata() -> dict[str, Any]:
    """The provider's issuer and endpoints: OIDC_ISSUER's discovery document (cached a while),
    with each explicit OIDC_*_ENDPOINT in place of its entry. With all four explicit, no
    document is read and the issuer is OIDC_ISSUER itself."""
    issuer = settings.OIDC_ISSUER
    explicit = {name: url for name, url in settings.OIDC_ENDPOINTS.items() if url}
    if all(name in explicit for name in ENDPOINTS):
        return {"issuer": issuer, **explicit}
    return {**_discover(issuer), **explicit}


def _discover(issuer: str) -> dict[str, Any]:
    with _discovery_lock:
        cached = _discovered.get(issuer)
        if cached and cached[0] > time.monotonic():
            return cached[1]
    url = discovery_url(issuer)
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT_SECONDS, verify=verify_tls())
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"could not read {url}: {exc}") from None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} is not a JSON object")
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise ProviderUnavailable(f"{url} names issuer {document.get('issuer')!r}, not OIDC_ISSUER={issuer!r}")
    missing = [name for name in ENDPOINTS if not isinstance(document.get(name), str)]
    if missing:
        raise ProviderUnavailable(f"{url} has no {', '.join(missing)}: set OIDC_* endpoint variables for them")
    with _discovery_lock:
        _discovered[issuer] = (time.monotonic() + DISCOVERY_TTL_SECONDS, document)
    return document


def forget_provider() -> None:
    """Read the discovery document again at the next sign-in."""
    with _discovery_lock:
        _discovered.clear()


def verify_tls() -> bool | str:
    """What requests verifies the provider's certificate with: OIDC_CA_BUNDLE, or the system's CAs."""
    return settings.OIDC_CA_BUNDLE or True


# mozilla-django-oidc's setting names, answered from this project's OIDC_* settings.
_LIBRARY_SETTINGS = {
    "OIDC_RP_CLIENT_ID": lambda: settings.OIDC_CLIENT_ID,
    "OIDC_RP_CLIENT_SECRET": lambda: settings.OIDC_CLIENT_SECRET,
    "OIDC_RP_SCOPES": lambda: " ".join(settings.OIDC_SCOPES),
    "OIDC_RP_SIGN_ALGO": lambda: settings.OIDC_SIGN_ALGORITHM,
    "OIDC_RP_IDP_SIGN_KEY": lambda: None,
    "OIDC_OP_AUTHORIZATION_ENDPOINT": lambda: provider_metadata()["authorization_endpoint"],
    "OIDC_OP_TOKEN_ENDPOINT": lambda: provider_metadata()["token_endpoint"],
    "OIDC_OP_USER_ENDPOINT": lambda: provider_metadata()["userinfo_endpoint"],
    "OIDC_OP_JWKS_ENDPOINT": lambda: provider_metadata()["jwks_uri"],
    "OIDC_USE_PKCE": lambda: True,
    "OIDC_TIMEOUT": lambda: settings.OIDC_TIMEOUT_SECONDS,
    "OIDC_VERIFY_SSL": verify_tls,
    "OIDC_TOKEN_USE_BASIC_AUTH": lambda: settings.OIDC_TOKEN_AUTH_METHOD == "client_secret_basic",
    "OIDC_CREATE_USER": lambda: True,
    "OIDC_STORE_ACCESS_TOKEN": lambda: False,
    "OIDC_STORE_ID_TOKEN": lambda: False,
    "LOGIN_REDIRECT_URL_FAILURE": lambda: settings.LOGIN_URL,
}


def library_setting(name: str, *default: Any) -> Any:
    """The value mozilla-django-oidc asks for by ``name`` (its ``get_settings``)."""
    answer = _LIBRARY_SETTINGS.get(name)
    return answer() if answer is not None else import_from_settings(name, *default)


# --- the authentication backend --------------------------------------------------------


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend: the token exchange and the ID token's signature, with
    the issuer and audience checked too, and the person signed in by ``sso_accounts``."""

    get_settings = staticmethod(library_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django makes a backend for every sign-in and every session's request: nothing here
        # may read the provider. The library reads its endpoints through these properties.
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute names
        return str(library_setting("OIDC_OP_TOKEN_ENDPOINT"))

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return str(library_setting("OIDC_OP_USER_ENDPOINT"))

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return str(library_setting("OIDC_OP_JWKS_ENDPOINT"))

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802
        return str(settings.OIDC_CLIENT_ID)

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:  # noqa: N802
        return str(settings.OIDC_CLIENT_SECRET)

    @property
    def OIDC_RP_SIGN_ALGO(self) -> str:  # noqa: N802
        return str(settings.OIDC_SIGN_ALGORITHM)

    OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        # Only the callback view's call (it passes the nonce); never a password or a proxy
        # sign-in that happens to carry ?code=&state= in its URL.
        if not enabled() or request is None or "nonce" not in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as exc:
            logger.warning("single sign-on refused %s's answer: %s", provider_name(), exc)
            request.sso_refusal = f"{provider_name()}'s answer could not be verified, so you are not signed in."  # type: ignore[attr-defined]
            return None

    def get_user(self, user_id: Any) -> Any:
        # Sessions made by single sign-on end when it is turned off.
        return super().get_user(user_id) if enabled() else None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        if kwargs.get("nonce") is None:
            return payload  # a signed userinfo response, not an ID token
        issuer = provider_metadata()["issuer"]
        if payload.get("iss") != issuer:
            raise SuspiciousOperation(f"ID token issued by {payload.get('iss')!r}, not {issuer!r}")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if settings.OIDC_CLIENT_ID not in audiences:
            raise SuspiciousOperation(f"ID token for {audience!r}, not this client")
        if len(audiences) > 1 and payload.get("azp") != settings.OIDC_CLIENT_ID:
            raise SuspiciousOperation("ID token for several audiences without this client as its azp")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo is about another subject than the ID token")
        # Some providers put groups in the ID token only (Entra ID), others in the userinfo.
        claims = {**payload, **userinfo}
        username = claims.get(settings.OIDC_USERNAME_CLAIM)
        request = self.request
        if not isinstance(username, str) or not username:
            request.sso_refusal = (
                f"{provider_name()} did not say who you are (no {settings.OIDC_USERNAME_CLAIM} claim): "
                "ask an administrator to check OIDC_USERNAME_CLAIM."
            )
            return None
        subject = payload.get("sub")
        if not isinstance(subject, str):
            raise SuspiciousOperation("the ID token names no subject")
        if settings.OIDC_USERNAME_CLAIM == "email" and not is_verified(claims.get("email_verified")):
            # Anyone may type an address into a provider's profile; only a verified one is theirs.
            logger.warning("single sign-on refused %s: email_verified is %r", username, claims.get("email_verified"))
            request.sso_refusal = (
                f"{provider_name()} has not verified your email address {username}, which is your username here, "
                f"so you are not signed in: verify it at {provider_name()} and sign in again, or ask an administrator."
            )
            return None
        try:
            return sign_in(
                issuer=str(payload["iss"]),
                subject=subject,
                username=username,
                groups=group_values(claims.get(settings.OIDC_GROUPS_CLAIM)),
                actor=actor(),
                profile={
                    "email": claims.get("email", ""),
                    "first_name": claims.get("given_name", ""),
                    "last_name": claims.get("family_name", ""),
                },
            )
        except SignInRefused as refused:
            logger.warning("single sign-on refused %s: %s", username, refused)
            request.sso_refusal = str(refused)
            return None


def is_verified(claim: Any) -> bool:
    """Whether an ``email_verified`` claim says yes: a JSON true, or (as some providers send
    it) the string "true"."""
    return claim is True or (isinstance(claim, str) and claim.strip().lower() == "true")


# --- the views -------------------------------------------------------------------------


def _back_to_sign_in(request: HttpRequest, message: str) -> HttpResponse:
    messages.error(request, message)
    return redirect(settings.LOGIN_URL)


class StartSignIn(OIDCAuthenticationRequestView):
    """Sends the browser to the provider (state, nonce and PKCE kept in the session)."""

    get_settings = staticmethod(library_setting)

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)

    @property
    def OIDC_OP_AUTH_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute names
        return str(library_setting("OIDC_OP_AUTHORIZATION_ENDPOINT"))

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802
        return str(settings.OIDC_CLIENT_ID)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured (OIDC_ISSUER)")
        try:
            return super().get(request)
        except ProviderUnavailable as exc:
            logger.warning("single sign-on could not start: %s", exc)
            return _back_to_sign_in(request, f"{provider_name()} cannot be reached just now: try again in a minute.")


class FinishSignIn(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: the code exchanged, the person signed in,
    or the sign-in page saying why not."""

    get_settings = staticmethod(library_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured (OIDC_ISSUER)")
        state = request.GET.get("state")
        if request.GET.get("code") and state not in request.session.get("oidc_states", {}):
            # Back, reload, or a second tab: this state's sign-in is over (or never began here).
            return _back_to_sign_in(request, "That sign-in was already used or has expired: sign in again.")
        if request.GET.get("error"):
            logger.warning(
                "single sign-on: %s answered %s (%s)",
                provider_name(),
                request.GET.get("error"),
                request.GET.get("error_description", ""),
            )
        try:
            return super().get(request)
        except (ProviderUnavailable, requests.RequestException) as exc:
            logger.warning("single sign-on could not finish: %s", exc)
            return _back_to_sign_in(request, f"The sign-in with {provider_name()} did not complete: try again.")

    def login_success(self) -> HttpResponse:
        response: HttpResponse = super().login_success()
        # The roles stand until the next sign-in: keep that within OIDC_SESSION_HOURS.
        self.request.session.set_expiry(settings.OIDC_SESSION_HOURS * 3600)
        return response

    def login_failure(self) -> HttpResponse:
        refusal = getattr(self.request, "sso_refusal", None)
        return _back_to_sign_in(
            self.request,
            refusal or f"{provider_name()} did not sign you in: try again, or ask an administrator.",
        )


urlpatterns = [
    path("authenticate/", StartSignIn.as_view(), name="oidc_authentication_init"),
    path("callback/", FinishSignIn.as_view(), name="oidc_authentication_callback"),
]
