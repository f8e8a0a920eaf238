"""Signing in: throttled per (username, address) and per address across usernames, with a
lockout page that says which; the client's address behind a proxy; and password reset by
email, offered only where outgoing mail is configured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client, RequestFactory
from django.utils import timezone

from controlplane.login_lockout import client_address

RIGHT = "alice-pass-123"
OFFICE = "203.0.113.10"
ELSEWHERE = "198.51.100.7"


def sign_in(username: str, password: str, *, address: str = OFFICE, **headers: str) -> Any:
    return Client().post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address, **headers
    )


def refused(response: Any) -> bool:
    """The form came back with "could not sign you in" (a failure axes counted)."""
    return response.status_code == 200 and "Could not sign you in" in response.content.decode()


# --- per address, across usernames ------------------------------------------------------


def test_spraying_usernames_from_one_address_pauses_that_address_and_no_other(settings: Any, alice: User) -> None:
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 8
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for n in range(7):
            assert refused(sign_in(f"user{n}", "Winter2026!")), n
        paused = sign_in("user7", "Winter2026!")
        assert paused.status_code == 429
        page = paused.content.decode()
        assert "Signing in from this address is paused for up to 15 minutes, for every account" in page
        assert "8 within 15 minutes, whatever the username" in page and "axes_reset_ip" in page
        # Now every username from that address is refused, even with its right password...
        assert sign_in("alice", RIGHT).status_code == 429
        assert sign_in("user8", "Winter2026!").status_code == 429
        # ...while alice, from any other address, signs in.
        elsewhere = sign_in("alice", RIGHT, address=ELSEWHERE)
        assert elsewhere.status_code == 302 and elsewhere["Location"] == "/"

        clock.shift(timedelta(minutes=16))
        assert sign_in("alice", RIGHT).status_code == 302


def test_an_office_behind_one_address_is_not_paused_by_a_few_typos(alice: User) -> None:
    """The defaults: twelve failures from one address, four by each of three people, pause
    nobody (the address allows 20, each username 5) and everyone then signs in."""
    assert (django_settings.LOGIN_FAILURE_LIMIT, django_settings.LOGIN_ADDRESS_FAILURE_LIMIT) == (5, 20)
    people = {"alice": RIGHT, "carol": "carol-pass-123", "dave": "dave-pass-123"}
    for name, password in people.items():
        if name != "alice":
            User.objects.create_user(name, password=password)
    with time_machine.travel(timezone.now(), tick=False):
        for _ in range(4):
            for name in people:
                assert refused(sign_in(name, "typo")), name
        for name, password in people.items():
            assert sign_in(name, password).status_code == 302, name


# --- per (username, address) --------------------------------------------------------------


def test_the_per_username_pause_still_holds_and_says_it_is_this_account(alice: User) -> None:
    with time_machine.travel(timezone.now(), tick=False):
        for _ in range(4):
            assert refused(sign_in("alice", "wrong"))
        paused = sign_in("alice", "wrong")
        assert paused.status_code == 429
        page = paused.content.decode()
        assert "Too many failed sign-ins for this account from your address (5 in a row)" in page
        assert "axes_reset_username" in page and "from this address is paused" not in page
        assert sign_in("alice", RIGHT).status_code == 429
        # The same person from another address, and another person from this one, sign in.
        assert sign_in("alice", RIGHT, address=ELSEWHERE).status_code == 302
        User.objects.create_user("carol", password="carol-pass-123")
        assert sign_in("carol", "carol-pass-123").status_code == 302


# --- the client's address -------------------------------------------------------------------


@pytest.mark.parametrize(
    "proxies,forwarded,expected",
    [
        (0, "192.0.2.1", "10.0.0.2"),  # no proxy: the header is the client's word, ignored
        (1, "192.0.2.1, 203.0.113.10", "203.0.113.10"),  # the entry our proxy appended
        (2, "192.0.2.1, 203.0.113.10, 10.0.0.9", "203.0.113.10"),
        (1, "", "10.0.0.2"),  # a request that did not come through the proxy (a probe)
    ],
    ids=["no-proxy", "one-proxy", "two-proxies", "no-header"],
)
def test_the_address_is_the_one_the_outermost_trusted_proxy_saw(
    settings: Any, proxies: int, forwarded: str, expected: str
) -> None:
    settings.FORWARDED_FOR_PROXIES = proxies
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


def test_behind_a_proxy_one_client_spraying_does_not_pause_the_others(settings: Any, alice: User) -> None:
    """Every connection comes from the proxy (10.0.0.2); the address throttled is the client's."""
    settings.FORWARDED_FOR_PROXIES = 1
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 5
    proxy = "10.0.0.2"
    with time_machine.travel(timezone.now(), tick=False):
        for n in range(5):
            sign_in(f"user{n}", "Winter2026!", address=proxy, HTTP_X_FORWARDED_FOR=f"1.1.1.1, {OFFICE}")
        assert sign_in("alice", RIGHT, address=proxy, HTTP_X_FORWARDED_FOR=OFFICE).status_code == 429
        assert sign_in("alice", RIGHT, address=proxy, HTTP_X_FORWARDED_FOR=ELSEWHERE).status_code == 302


@pytest.mark.system
def test_an_address_limit_below_the_per_username_one_is_refused_at_start() -> None:
    env = {**os.environ, "LOGIN_FAILURE_LIMIT": "5", "LOGIN_ADDRESS_FAILURE_LIMIT": "3"}
    done = subprocess.run(
        [sys.executable, "-c", "import controlplane.settings"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "LOGIN_ADDRESS_FAILURE_LIMIT=3 is below LOGIN_FAILURE_LIMIT=5" in done.stderr.splitlines()[-1]


# --- password reset ---------------------------------------------------------------------------

RESET_URLS = [
    "/accounts/password_reset/",
    "/accounts/password_reset/done/",
    "/accounts/reset/MQ/set-password/",
    "/accounts/reset/done/",
]


@pytest.mark.parametrize("path", RESET_URLS)
def test_without_mail_every_reset_page_is_a_404_saying_how_an_admin_resets_a_password(
    settings: Any, client: Client, path: str
) -> None:
    settings.PASSWORD_RESET_ENABLED = False
    response = client.get(path)
    assert response.status_code == 404
    page = response.content.decode()
    assert "Password reset is off" in page and "manage.py changepassword USERNAME" in page


def test_without_mail_nothing_is_sent_and_the_sign_in_page_offers_no_reset(
    settings: Any, client: Client, alice: User
) -> None:
    settings.PASSWORD_RESET_ENABLED = False
    alice.email = "alice@example.com"
    alice.save()
    assert client.post("/accounts/password_reset/", {"email": "alice@example.com"}).status_code == 404
    assert mail.outbox == []
    page = client.get("/accounts/login/").content.decode()
    assert "Forgotten your password?" not in page and "/accounts/password_reset/" not in page


def test_with_mail_a_person_resets_their_password_by_the_mailed_link(
    settings: Any, client: Client, alice: User
) -> None:
    settings.PASSWORD_RESET_ENABLED = True  # pytest-django sends mail to the locmem outbox
    alice.email = "alice@example.com"
    alice.save()
    sign_in_page = client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/password_reset/">Forgotten your password?' in sign_in_page

    sent = client.post("/accounts/password_reset/", {"email": "alice@example.com"})
    assert sent.status_code == 302 and sent["Location"] == "/accounts/password_reset/done/"
    assert "Check your email" in client.get(sent["Location"]).content.decode()
    assert [message.to for message in mail.outbox] == [["alice@example.com"]]
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", mail.outbox[0].body)
    assert link, mail.outbox[0].body

    form = client.get(link.group(1), follow=True)
    assert "Set a new password" in form.content.decode()
    new = "a-new-pass-456!"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    assert "Your new password is set" in client.get(done["Location"]).content.decode()

    assert sign_in("alice", new).status_code == 302
    assert refused(sign_in("alice", RIGHT))
    # The link worked once.
    assert "This link does not work" in client.get(link.group(1), follow=True).content.decode()


@pytest.mark.system
@pytest.mark.parametrize("email_host,enabled", [("", "False"), ("smtp.example.com", "True")], ids=["unset", "set"])
def test_password_reset_is_on_exactly_when_email_host_is_set(email_host: str, enabled: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "EMAIL_HOST"}
    if email_host:
        env["EMAIL_HOST"] = email_host
    done = subprocess.run(
        [sys.executable, "-c", "import controlplane.settings as s; print(s.PASSWORD_RESET_ENABLED)"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == enabled, done.stderr
