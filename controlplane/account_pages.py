"""The /accounts/ pages: sign in and out, change a password, and reset a forgotten one by
email, which is offered only where outgoing mail is configured (PASSWORD_RESET_ENABLED:
EMAIL_HOST set). Elsewhere the reset pages answer 404 saying how an administrator sets a new
password, and the sign-in page offers no reset link (a form that sends nothing would leave
the person waiting for a mail that never comes)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render
from django.urls import path


class SignInView(auth_views.LoginView):
    """Django's sign-in, telling the page whether to offer a password reset."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["password_reset_enabled"] = settings.PASSWORD_RESET_ENABLED
        return context


def when_mail_is_configured(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The view, or a 404 saying password reset is off and what to do instead."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.PASSWORD_RESET_ENABLED:
            return render(request, "registration/password_reset_off.html", status=404)
        return view(request, *args, **kwargs)

    return guarded


urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    # Logout is a POST (a form button); it lands on the login page.
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
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
]
