"""The sign-in and password-reset pages in a real Chromium: no serious or critical axe
violation on a phone and a laptop, whether password reset is on or off, and the sign-in page
pausing after failures says so accessibly too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from tests.browser import LAPTOP, PHONE, axe_violations


def violations_on_a_phone_and_a_laptop(page: Any) -> list[str]:
    page.set_viewport_size(PHONE)
    found = axe_violations(page)
    page.set_viewport_size(LAPTOP)
    return found + axe_violations(page)


def test_the_reset_pages_have_no_serious_violations(settings: Any, open_page: Callable[..., Any], alice: User) -> None:
    settings.PASSWORD_RESET_ENABLED = True
    uid = urlsafe_base64_encode(force_bytes(alice.pk))
    token = default_token_generator.make_token(alice)
    checked = {}
    for path in ["/accounts/login/", "/accounts/password_reset/", "/accounts/password_reset/done/"]:
        checked[path] = violations_on_a_phone_and_a_laptop(open_page(path=path))
    page = open_page(path=f"/accounts/reset/{uid}/{token}/")
    assert page.get_by_label("New password", exact=True).is_visible()
    page.get_by_role("button", name="Set the password").click()  # empty: the error summary
    page.wait_for_selector(".error-summary")
    checked["set a new password, with errors"] = violations_on_a_phone_and_a_laptop(page)

    settings.PASSWORD_RESET_ENABLED = False
    checked["reset off"] = violations_on_a_phone_and_a_laptop(open_page(path="/accounts/password_reset/"))
    assert {name: found for name, found in checked.items() if found} == {}


def test_the_paused_sign_in_page_has_no_serious_violations(
    settings: Any, open_page: Callable[..., Any], alice: User
) -> None:
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = settings.LOGIN_FAILURE_LIMIT = 1
    page = open_page(path="/accounts/login/")
    page.get_by_label("Username").fill("mallory")
    page.get_by_label("Password").fill("Winter2026!")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Sign-in paused").wait_for()
    assert "Signing in from this address is paused" in page.content()
    assert violations_on_a_phone_and_a_laptop(page) == []
