"""Single sign-on in a real Chromium, through a real OpenID Connect provider
(tests/oidc_provider.py: discovery, the authorization-code flow with PKCE, an RS256-signed ID
token, userinfo) started on a free port: an on-call engineer signs in with the provider's
button, pins a preset, and the history names them; the provider then drops them from the
on-call group, and at their next sign-in they are a viewer, with the change in the access
history."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from controlplane import sso
from presets.models import AccessAction, AccessChange, Selection
from presets.roles import can_change
from tests.browser import PHONE, axe_violations
from tests.oidc_provider import RunningProvider

REASON = "INC-5120 vendor_a timeouts"
CAROL = {"sub": "sub-carol", "preferred_username": "carol", "email": "carol@example.com", "given_name": "Carol"}


def people(groups: list[str]) -> dict[str, Any]:
    return {"carol": {"password": "carol-at-the-provider", "claims": {**CAROL, "groups": groups}}}


@pytest.fixture
def provider(browser_ready: None, live_server: Any, tmp_path: Path) -> Iterator[RunningProvider]:
    running = RunningProvider(
        tmp_path,
        people=people(["llm-oncall", "engineering"]),
        redirect_uris=[f"{live_server.url}/accounts/oidc/callback/"],
    )
    running.start()
    sso.forget_provider()
    yield running
    running.stop()
    sso.forget_provider()


@pytest.fixture
def signed_out_page(browser: Any, live_server: Any, provider: RunningProvider, settings: Any, synced: None) -> Any:
    """A browser page on the live server, configured for the provider with local passwords off;
    it trusts the provider's certificate as an organisation's browsers trust its CA."""
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = provider.client_id
    settings.OIDC_CLIENT_SECRET = provider.client_secret
    settings.OIDC_CA_BUNDLE = str(provider.ca_file)
    settings.OIDC_PROVIDER_NAME = "Acme SSO"
    settings.OIDC_ONCALL_GROUPS = ["llm-oncall"]
    settings.OIDC_VIEWER_GROUPS = ["engineering"]
    settings.LOCAL_PASSWORDS = False
    settings.AUTHENTICATION_BACKENDS = [
        name for name in settings.AUTHENTICATION_BACKENDS if name != "django.contrib.auth.backends.ModelBackend"
    ]
    context = browser.new_context(base_url=live_server.url, viewport=PHONE, ignore_https_errors=True)
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def sign_in_with_the_provider(page: Any) -> None:
    page.wait_for_url(re.compile(r"/accounts/login/"))
    assert page.get_by_label("Password").count() == 0  # LOCAL_PASSWORDS=false: only the provider
    page.get_by_role("link", name="Sign in with Acme SSO").click()
    page.wait_for_url(re.compile(r"/authorize\?"))
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill("carol-at-the-provider")
    page.get_by_role("button", name="Sign in").click()


def test_the_provider_signs_carol_in_as_on_call_and_a_group_removed_there_ends_it(
    signed_out_page: Any, provider: RunningProvider
) -> None:
    page = signed_out_page
    page.goto("/chains/chat/")
    assert axe_violations(page) == []
    sign_in_with_the_provider(page)

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "on-call" in page.locator(".who").inner_text()
    page.get_by_role("radio", name="pin_secondary").check()
    page.locator("#id_reason").fill(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    live = Selection.objects.select_related("preset").get(chain__name="chat")
    assert (live.preset.name, live.updated_by, live.reason) == ("pin_secondary", "carol", REASON)
    page.goto("/chains/chat/history/")
    assert re.search(r"carol.*INC-5120 vendor_a timeouts", " ".join(page.locator("main").inner_text().split()))

    # At the provider, carol leaves the on-call group; she signs out and in again.
    provider.write_people(people(["engineering"]))
    page.get_by_role("button", name="Sign out").click()
    page.goto("/chains/chat/")
    sign_in_with_the_provider(page)

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "viewer" in page.locator(".who").inner_text()
    assert page.get_by_role("button", name="Review and pin…").count() == 0
    assert not can_change(User.objects.get(username="carol"))
    oncall = AccessChange.objects.filter(subject="carol", details={"role": "oncall"}).order_by("id")
    assert [(row.action, row.actor) for row in oncall] == [
        (AccessAction.ROLE_GRANTED, "sso:127.0.0.1"),
        (AccessAction.ROLE_REVOKED, "sso:127.0.0.1"),
    ]
