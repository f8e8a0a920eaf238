"""The /accounts/ pages: sign in and out, change a password, and reset a forgotten one by
email, which is offered only where outgoing mail is configured (PASSWORD_RESET_ENABLED:
EMAIL_HOST set). Elsewhere the reset pages answer 404 saying how an administrator sets a new
password, and the sign-in page offers no reset link (a form that sends nothing would leave
the person waiting for a mail that never comes).

With single sign-on configured (``controlplane.sso``) the sign-in page offers "Sign in with
<provider>"; with LOCAL_PASSWORDS=false it offers only that, a password POST (here or to the
admin's sign-in) is refused with 403 saying how to sign in instead, and the password pages
answer 404."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import URLPattern, URLResolver, include, path
from django.utils.http import urlencode

from controlplane import proxy_auth, sso


class SignInView(auth_views.LoginView):
    """Django's sign-in, telling the page what to offer: the password form (and a reset link),
    single sign-on, or both."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(sign_in_options())
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.LOCAL_PASSWORDS:
            return passwords_off(request)
        return super().post(request, *args, **kwargs)


def sign_in_options() -> dict[str, Any]:
    return {
        "local_passwords": settings.LOCAL_PASSWORDS,
        "password_reset_enabled": settings.PASSWORD_RESET_ENABLED and settings.LOCAL_PASSWORDS,
        "sso_provider": settings.OIDC_PROVIDER_NAME if sso.enabled() else None,
        "proxy_sign_in": proxy_auth.enabled(),
    }


def passwords_off(request: HttpRequest, status: int = 403) -> HttpResponse:
    """The refusal of a password where LOCAL_PASSWORDS=false, saying how to sign in instead."""
    return render(request, "registration/passwords_off.html", sign_in_options(), status=status)


def admin_sign_in(request: HttpRequest) -> HttpResponseBase:
    """The admin's own sign-in form, unless passwords are off: then the site's sign-in page."""
    if settings.LOCAL_PASSWORDS:
        return admin.site.login(request)
    if request.method == "POST":
        return passwords_off(request)
    return redirect(f"{settings.LOGIN_URL}?{urlencode({'next': request.GET.get('next', '/admin/')})}")


def when_local_passwords(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The view, or a 404 saying passwords are off here (LOCAL_PASSWORDS=false)."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.LOCAL_PASSWORDS:
            return passwords_off(request, status=404)
        return view(request, *args, **kwargs)

    return guarded


def when_mail_is_configured(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The view, or a 404 saying password reset is off and what to do instead."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.LOCAL_PASSWORDS:
            return passwords_off(request, status=404)
        if not settings.PASSWORD_RESET_ENABLED:
            return render(request, "registration/password_reset_off.html", status=404)
        return view(request, *args, **kwargs)

    return guarded


urlpatterns: list[URLPattern | URLResolver] = [
    path("login/", SignInView.as_view(), name="login"),
    # Logout is a POST (a form button); it lands on the login page.
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("password_change/", when_local_passwords(auth_views.PasswordChangeView.as_view()), name="password_change"),
    path(
        "password_change/done/",
        when_local_passwords(auth_views.PasswordChangeDoneView.as_view()),
        name="password_change_done",
    ),
    path("password_reset/", when_mail_is_configured(auth_views.PasswordResetView.as_view()), name="password_reset"),
    path(
        "password_reset/done/",
        when_mail_is_configured(auth_views.PasswordResetDoneView.as_view()),
        name="password_reset_done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        when_mail_is_configured(auth_views.PasswordResetConfirmView.as_view()),
        name="password_reset_confirm",
    ),
    path(
        "reset/done/",
        when_mail_is_configured(auth_views.PasswordResetCompleteView.as_view()),
        name="password_reset_complete",
    ),
    # Single sign-on with OpenID Connect: start, and the provider's way back (404 while off).
    path("oidc/", include(sso.urlpatterns)),
]
