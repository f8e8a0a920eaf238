"""Single sign-on: the groups-to-roles mapping both modes share, the settings' refusals, the
OpenID Connect flow against a real provider (tests/oidc_provider.py) with the Django client,
accounts found by the provider's issuer and subject (never by a name alone) and linked by an
administrator, the trusted-proxy headers, and LOCAL_PASSWORDS=false. The browser's view of it is
tests/test_web_browser_sso.py; the proxy mode under the production web process is
tests/test_proxy_auth_stack.py."""

from __future__ import annotations

import functools
import html
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.apps import apps as django_apps
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from controlplane import sso, sso_accounts
from controlplane.sso_accounts import RoleMapping, Roles, SignInRefused, group_values, roles_for
from presets.access_history import acting_as, link_identity, unlink_identity
from presets.models import AccessAction, AccessChange, SignInIdentity
from presets.roles import can_change
from tests import settings_env
from tests.oidc_provider import RunningProvider

MAPPING = RoleMapping(
    oncall=frozenset({"sre"}),
    viewer=frozenset({"eng"}),
    staff=frozenset({"platform-admins"}),
    superuser=frozenset({"platform-root"}),
)
ISSUER = "https://idp.example.com"


# --- the mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups,unmapped,roles",
    [
        (["sre"], "refuse", Roles(oncall=True)),
        (["eng", "sre"], "refuse", Roles(oncall=True, viewer=True)),
        (["platform-admins"], "refuse", Roles(staff=True)),
        (["platform-root"], "refuse", Roles(staff=True, superuser=True)),
        (["eng", "marketing"], "refuse", Roles(viewer=True)),
        (["marketing"], "refuse", None),
        ([], "refuse", None),
        (["marketing"], "viewer", Roles(viewer=True)),
        (["SRE"], "refuse", None),
    ],
    ids=[
        "oncall",
        "oncall-and-viewer",
        "staff-only",
        "superuser-and-staff",
        "viewer",
        "unmapped-refused",
        "none",
        "unmapped-viewer",
        "exact",
    ],
)
def test_groups_map_to_roles(groups: list[str], unmapped: str, roles: Roles | None) -> None:
    mapping = RoleMapping(
        oncall=MAPPING.oncall,
        viewer=MAPPING.viewer,
        staff=MAPPING.staff,
        superuser=MAPPING.superuser,
        unmapped=unmapped,
    )
    assert roles_for(groups, mapping=mapping) == roles


@pytest.mark.parametrize(
    "claim,values",
    [(["a", "b"], ["a", "b"]), ("a", ["a"]), (None, []), (["a", 3, None], ["a"]), ({"a": 1}, [])],
    ids=["list", "string", "missing", "mixed", "object"],
)
def test_a_groups_claim_is_read_as_a_list_of_strings(claim: Any, values: list[str]) -> None:
    assert group_values(claim) == values


@pytest.fixture
def mapped(settings: Any) -> None:
    settings.OIDC_ONCALL_GROUPS = ["sre"]
    settings.OIDC_VIEWER_GROUPS = ["eng"]
    settings.OIDC_STAFF_GROUPS = ["platform-admins"]
    settings.OIDC_SUPERUSER_GROUPS = ["platform-root"]
    settings.OIDC_UNMAPPED_USERS = "refuse"


def sign_in(username: str, groups: list[str], *, subject: str = "", issuer: str = ISSUER) -> User:
    """``sso_accounts.sign_in`` as OpenID Connect calls it, the subject ``sub-<username>``
    unless given."""
    return sso_accounts.sign_in(
        issuer=issuer, subject=subject or f"sub-{username}", username=username, groups=groups, actor="sso:idp"
    )


def text(response: Any) -> str:
    """A page's content with its whitespace runs as single spaces."""
    return " ".join(response.content.decode().split())


def roles_of(username: str) -> tuple[list[str], bool]:
    user = User.objects.get(username=username)
    return sorted(user.groups.values_list("name", flat=True)), user.is_staff


def flags_of(username: str) -> tuple[bool, bool]:
    user = User.objects.get(username=username)
    return user.is_staff, user.is_superuser


def test_roles_are_set_again_at_every_sign_in_and_each_change_is_in_the_access_history(db: Any, mapped: None) -> None:
    sign_in("dana", ["sre", "platform-admins"])
    assert roles_of("dana") == (["oncall"], True)
    sign_in("dana", ["eng"])
    assert roles_of("dana") == (["viewer"], False)
    assert not can_change(User.objects.get(username="dana"))

    rows = AccessChange.objects.filter(subject="dana").order_by("id")
    assert [(row.action, row.details.get("role"), row.actor) for row in rows] == [
        (AccessAction.USER_CREATED, None, "sso:idp"),
        (AccessAction.IDENTITY_LINKED, None, "sso:idp"),
        (AccessAction.ROLE_GRANTED, "oncall", "sso:idp"),
        (AccessAction.STAFF_GRANTED, None, "sso:idp"),
        (AccessAction.ROLE_REVOKED, "oncall", "sso:idp"),
        (AccessAction.ROLE_GRANTED, "viewer", "sso:idp"),
        (AccessAction.STAFF_REVOKED, None, "sso:idp"),
    ]
    assert rows[1].details == {"issuer": ISSUER, "subject": "sub-dana", "how": "first sign-in"}
    # The same groups again change nothing and record nothing.
    sign_in("dana", ["eng"])
    assert AccessChange.objects.filter(subject="dana").count() == len(rows)


def test_a_person_in_no_mapped_group_is_refused_or_a_viewer_as_configured(db: Any, mapped: None, settings: Any) -> None:
    with pytest.raises(SignInRefused, match="none of their groups has access here"):
        sign_in("erin", ["marketing"])
    assert not User.objects.filter(username="erin").exists()
    settings.OIDC_UNMAPPED_USERS = "viewer"
    sign_in("erin", ["marketing"])
    assert roles_of("erin") == (["viewer"], False)


def test_single_sign_on_never_takes_over_a_local_account_even_without_its_password(db: Any, mapped: None) -> None:
    User.objects.create_superuser("admin", password="local-admin-pass-1")
    with pytest.raises(SignInRefused, match="admin is a local account here, not linked to single sign-on"):
        sign_in("admin", ["sre", "platform-root"])
    admin = User.objects.get(username="admin")
    admin.set_unusable_password()  # the old way to hand it over: no longer enough
    admin.save()
    with pytest.raises(SignInRefused, match=r"ask an administrator to link it to your identity \(issuer https://idp"):
        sign_in("admin", ["sre", "platform-root"])
    assert flags_of("admin") == (True, True) and not SignInIdentity.objects.exists()

    link_identity(user=admin, issuer=ISSUER + "/", subject="sub-admin", actor="boss", how="admin")
    assert sign_in("admin", ["sre", "platform-root"]).pk == admin.pk
    # Linked, its flags follow the groups: without the superuser group it is an engineer.
    sign_in("admin", ["sre"])
    assert flags_of("admin") == (False, False)


def test_a_name_that_cannot_be_a_username_is_refused(db: Any, mapped: None) -> None:
    with pytest.raises(SignInRefused, match="cannot be a username here"):
        sign_in("dana smith", ["sre"])


@pytest.mark.parametrize(
    "subject,issuer",
    [("", ISSUER), ("   ", ISSUER), ("s" * 256, ISSUER), ("sub-dana", "i" * 256)],
    ids=["empty-subject", "blank-subject", "long-subject", "long-issuer"],
)
def test_an_identity_this_site_cannot_keep_is_refused(db: Any, mapped: None, subject: str, issuer: str) -> None:
    with pytest.raises(SignInRefused, match="did not give an identity this site can keep"):
        sso_accounts.sign_in(issuer=issuer, subject=subject, username="dana", groups=["sre"], actor="sso:idp")
    assert not User.objects.filter(username="dana").exists()


def test_the_upgrade_marks_the_accounts_single_sign_on_made_and_their_next_sign_in_binds_them(
    db: Any, mapped: None
) -> None:
    migration = importlib.import_module("presets.migrations.0008_sign_in_identities")
    with acting_as("sso:idp.example.com"):
        made = User.objects.create_user("legacy")  # made by single sign-on, no password
    User.objects.create_user("handed", last_login=timezone.now())  # password off, signed in without it
    User.objects.create_user("never")  # password off, never signed in: made in the admin
    User.objects.create_user("local", password="local-pass-123", last_login=timezone.now())
    migration.mark_unclaimed(django_apps, None)
    marks = SignInIdentity.objects.order_by("subject").values_list("issuer", "subject", "user__username")
    assert list(marks) == [("unclaimed", "handed", "handed"), ("unclaimed", "legacy", "legacy")]

    assert sign_in("legacy", ["sre"], subject="sub-legacy").pk == made.pk
    assert list(SignInIdentity.objects.filter(user=made).values_list("issuer", "subject")) == [(ISSUER, "sub-legacy")]
    row = AccessChange.objects.get(action=AccessAction.IDENTITY_LINKED, subject="legacy")
    assert (row.actor, row.details) == ("sso:idp", {"issuer": ISSUER, "subject": "sub-legacy", "how": "claimed"})
    # Bound once: another identity carrying the name is refused.
    with pytest.raises(SignInRefused, match="The account legacy here belongs to someone else's sign-in"):
        sign_in("legacy", ["sre", "platform-root"], subject="sub-someone-else")
    for name in ("never", "local"):
        with pytest.raises(SignInRefused, match=f"{name} is a local account here"):
            sign_in(name, ["sre"])
    # A mark an administrator deleted leaves the account to be linked by hand.
    unlink_identity(identity=SignInIdentity.objects.get(subject="handed"), actor="boss")
    with pytest.raises(SignInRefused, match="handed is a local account here"):
        sign_in("handed", ["sre"])


@pytest.mark.parametrize(
    "claim,verified",
    [(True, True), ("true", True), (" True", True), (False, False), ("false", False), (None, False), (1, False)],
    ids=["true", "string-true", "string-true-spaced", "false", "string-false", "missing", "number"],
)
def test_email_verified_is_yes_only_when_the_claim_says_true(claim: Any, verified: bool) -> None:
    assert sso.is_verified(claim) is verified


# --- the settings' refusals -------------------------------------------------------------

SSO_SETTINGS = ("OIDC_", "PROXY_AUTH_", "LOCAL_PASSWORDS")
OIDC = {"OIDC_ISSUER": "https://idp.example.com", "OIDC_CLIENT_ID": "cp", "OIDC_CLIENT_SECRET": "s3cret"}
PROXY = {"PROXY_AUTH_USER_HEADER": "X-Forwarded-User", "PROXY_AUTH_TRUSTED_PROXIES": "10.0.0.0/24"}


load_settings = functools.partial(settings_env.load_settings, clear=SSO_SETTINGS)


@pytest.mark.parametrize(
    "environment,message",
    [
        ({**OIDC, "OIDC_ISSUER": "http://idp.example.com"}, "OIDC_ISSUER='http://idp.example.com' must be an https://"),
        ({**OIDC, "OIDC_ISSUER": "idp.example.com"}, "OIDC_ISSUER='idp.example.com' must be an https:// URL"),
        ({**OIDC, "OIDC_CLIENT_SECRET": ""}, "OIDC_ISSUER is set but OIDC_CLIENT_SECRET is not"),
        ({**OIDC, "OIDC_SCOPES": "email profile"}, "OIDC_SCOPES='email profile' must include openid"),
        ({**OIDC, "OIDC_UNMAPPED_USERS": "admin"}, "OIDC_UNMAPPED_USERS='admin' must be refuse or viewer"),
        ({**OIDC, "OIDC_SIGN_ALGORITHM": "HS256"}, "OIDC_SIGN_ALGORITHM='HS256' must be RS256"),
        ({**OIDC, "OIDC_TOKEN_AUTH_METHOD": "none"}, "OIDC_TOKEN_AUTH_METHOD='none' must be client_secret_basic"),
        ({**OIDC, "OIDC_TIMEOUT_SECONDS": "0"}, "OIDC_TIMEOUT_SECONDS=0 must be at least 1"),
        ({**OIDC, "OIDC_CA_BUNDLE": "/nonexistent.pem"}, "OIDC_CA_BUNDLE='/nonexistent.pem' is not a file"),
        (
            {**OIDC, "OIDC_TOKEN_ENDPOINT": "ftp://idp.example.com/token"},
            "OIDC_TOKEN_ENDPOINT='ftp://idp.example.com/token' must be an https:// URL",
        ),
        (
            {"OIDC_CLIENT_ID": "cp"},
            "OIDC_CLIENT_ID, OIDC_CLIENT_SECRET or an OIDC_*_ENDPOINT is set without OIDC_ISSUER",
        ),
        (
            {**PROXY, "PROXY_AUTH_TRUSTED_PROXIES": ""},
            "PROXY_AUTH_TRUSTED_PROXIES is empty: list the proxy's addresses",
        ),
        ({**PROXY, "PROXY_AUTH_TRUSTED_PROXIES": "10.0.0.0/33"}, "PROXY_AUTH_TRUSTED_PROXIES: '10.0.0.0/33' is not"),
        ({**PROXY, "PROXY_AUTH_USER_HEADER": "X_User"}, "PROXY_AUTH_USER_HEADER='X_User' is not an HTTP header name"),
        (
            {"PROXY_AUTH_TRUSTED_PROXIES": "10.0.0.1"},
            "PROXY_AUTH_TRUSTED_PROXIES is set without PROXY_AUTH_USER_HEADER",
        ),
        ({"LOCAL_PASSWORDS": "false"}, "LOCAL_PASSWORDS=false leaves no way to sign in"),
        ({**OIDC, "LOCAL_PASSWORDS": "nope"}, "LOCAL_PASSWORDS='nope' is not a boolean"),
    ],
    ids=[
        "issuer-http",
        "issuer-no-scheme",
        "no-secret",
        "no-openid-scope",
        "unmapped",
        "algorithm",
        "token-auth",
        "timeout",
        "ca-bundle",
        "endpoint",
        "client-without-issuer",
        "no-trusted-proxies",
        "bad-network",
        "bad-header",
        "proxies-without-header",
        "no-way-in",
        "local-passwords",
    ],
)
def test_bad_values_stop_the_process_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(monkeypatch, environment)
    assert message in str(refused.value)


def test_good_values_configure_both_modes_and_local_passwords_off(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_settings(
        monkeypatch,
        {
            **OIDC,
            **PROXY,
            "OIDC_ISSUER": "http://localhost:8080/realms/acme",  # a provider run locally
            "OIDC_ONCALL_GROUPS": "sre, incident-commanders",
            "LOCAL_PASSWORDS": "false",
        },
    )
    assert loaded["OIDC_ONCALL_GROUPS"] == ["sre", "incident-commanders"]
    assert loaded["OIDC_PROVIDER_NAME"] == "localhost"
    assert loaded["OIDC_SCOPES"] == ["openid", "email", "profile", "groups"]
    assert "django.contrib.auth.backends.ModelBackend" not in loaded["AUTHENTICATION_BACKENDS"]
    middleware = loaded["MIDDLEWARE"]
    assert middleware.index("controlplane.proxy_auth.ProxyAuthMiddleware") == (
        middleware.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1
    )
    # And without any of it, passwords as before.
    assert "django.contrib.auth.backends.ModelBackend" in load_settings(monkeypatch, {})["AUTHENTICATION_BACKENDS"]


# --- OpenID Connect with the Django client, against the real provider -------------------

CALLBACK = "http://testserver/accounts/oidc/callback/"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[RunningProvider]:
    running = RunningProvider(
        tmp_path,
        people={
            "dana": {
                "password": "dana-at-the-provider",
                "claims": {
                    "sub": "sub-dana",
                    "preferred_username": "dana",
                    "email": "dana@example.com",
                    "given_name": "Dana",
                    "groups": ["sre"],
                },
            },
            "nameless": {"password": "nameless-pass", "claims": {"sub": "sub-nameless", "groups": ["sre"]}},
        },
        redirect_uris=[CALLBACK],
    )
    running.start()
    sso.forget_provider()
    yield running
    running.stop()
    sso.forget_provider()


@pytest.fixture
def oidc(db: Any, settings: Any, provider: RunningProvider, mapped: None) -> RunningProvider:
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = provider.client_id
    settings.OIDC_CLIENT_SECRET = provider.client_secret
    settings.OIDC_CA_BUNDLE = str(provider.ca_file)
    settings.OIDC_PROVIDER_NAME = "Acme SSO"
    return provider


def through_the_provider(client: Client, provider: RunningProvider, username: str, password: str) -> Any:
    """Start at the sign-in button, sign in at the provider's form, and come back: the
    callback's answer."""
    start = client.get("/accounts/oidc/authenticate/?next=/chains/chat/")
    assert start.status_code == 302 and start["Location"].startswith(f"{provider.issuer}/authorize?"), start
    query = urlsplit(start["Location"]).query
    assert {"code_challenge", "nonce", "state"} <= set(parse_qs(query))
    answer = requests.post(
        f"{provider.issuer}/authorize",
        data={"request": query, "username": username, "password": password},
        verify=str(provider.ca_file),
        allow_redirects=False,
        timeout=10,
    )
    assert answer.status_code == 303, answer.text
    back = answer.headers["Location"]
    assert back.startswith(CALLBACK)
    return client.get(back.removeprefix("http://testserver"))


@pytest.mark.system
def test_a_person_signs_in_through_the_provider_with_the_roles_of_their_groups(
    client: Client, oidc: RunningProvider, synced: None
) -> None:
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with Acme SSO" in page and 'name="password"' in page

    done = through_the_provider(client, oidc, "dana", "dana-at-the-provider")
    assert done.status_code == 302 and done["Location"] == "/chains/chat/"
    dana = User.objects.get(username="dana")
    assert (dana.email, dana.first_name, dana.has_usable_password()) == ("dana@example.com", "Dana", False)
    assert can_change(dana)
    assert client.get("/chains/chat/").context["user"] == dana
    assert client.session.get_expiry_age() == 12 * 3600  # OIDC_SESSION_HOURS: roles are re-read within it
    assert AccessChange.objects.filter(
        subject="dana", action=AccessAction.ROLE_GRANTED, actor="sso:127.0.0.1", details={"role": "oncall"}
    ).exists()

    # Sign-out ends the session: the next page asks to sign in again.
    client.post("/accounts/logout/")
    assert client.get("/chains/chat/").status_code == 302


@pytest.mark.system
def test_a_refusal_lands_on_the_sign_in_page_saying_why(client: Client, oidc: RunningProvider) -> None:
    oidc.write_people(
        {"dana": {"password": "dana-at-the-provider", "claims": {"sub": "sub-dana", "preferred_username": "dana"}}}
    )
    done = through_the_provider(client, oidc, "dana", "dana-at-the-provider")
    assert done.status_code == 302 and done["Location"] == "/accounts/login/"
    page = client.get("/accounts/login/").content.decode()
    assert "dana is signed in, but none of their groups has access here" in page
    assert not User.objects.filter(username="dana").exists()


@pytest.mark.system
def test_no_username_claim_is_refused_naming_the_setting(client: Client, oidc: RunningProvider) -> None:
    through_the_provider(client, oidc, "nameless", "nameless-pass")
    page = client.get("/accounts/login/").content.decode()
    assert "did not say who you are (no preferred_username claim)" in page and "OIDC_USERNAME_CLAIM" in page


@pytest.mark.system
def test_a_callback_used_twice_is_refused_without_an_error_page(client: Client, oidc: RunningProvider) -> None:
    start = client.get("/accounts/oidc/authenticate/")
    query = urlsplit(start["Location"]).query
    answer = requests.post(
        f"{oidc.issuer}/authorize",
        data={"request": query, "username": "dana", "password": "dana-at-the-provider"},
        verify=str(oidc.ca_file),
        allow_redirects=False,
        timeout=10,
    )
    back = answer.headers["Location"].removeprefix("http://testserver")
    assert client.get(back)["Location"] == "/"
    client.post("/accounts/logout/")
    again = client.get(back)
    assert again.status_code == 302 and again["Location"] == "/accounts/login/"
    assert "That sign-in was already used or has expired" in client.get("/accounts/login/").content.decode()


@pytest.mark.system
def test_a_provider_that_names_another_issuer_is_not_used(client: Client, oidc: RunningProvider, settings: Any) -> None:
    settings.OIDC_ISSUER = oidc.issuer.replace("127.0.0.1", "localhost")  # discovery says 127.0.0.1
    start = client.get("/accounts/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"] == "/accounts/login/"
    assert "Acme SSO cannot be reached just now" in client.get("/accounts/login/").content.decode()


# --- accounts found by issuer and subject, through the real provider --------------------

DANA = {
    "sub": "sub-dana",
    "preferred_username": "dana",
    "email": "dana@example.com",
    "email_verified": True,
    "given_name": "Dana",
}


def signed_in_user(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else User.objects.get(pk=user_id)


def sign_in_page(client: Client) -> str:
    """The sign-in page's words (its refusal message among them), unescaped."""
    return html.unescape(text(client.get("/accounts/login/")))


@pytest.mark.system
def test_a_second_person_at_the_provider_with_the_same_name_and_email_is_refused(
    client: Client, oidc: RunningProvider
) -> None:
    oidc.write_people({"dana": {"password": "dana-at-the-provider", "claims": {**DANA, "groups": ["sre"]}}})
    through_the_provider(client, oidc, "dana", "dana-at-the-provider")
    dana = User.objects.get(username="dana")
    assert signed_in_user(client) == dana
    assert list(SignInIdentity.objects.values_list("issuer", "subject", "user")) == [(oidc.issuer, "sub-dana", dana.pk)]
    client.post("/accounts/logout/")

    # Someone else at the provider (another subject) is given dana's name and address, and an
    # admin group.
    impostor = {**DANA, "sub": "sub-someone-else", "groups": ["sre", "platform-root"]}
    oidc.write_people({"mallory": {"password": "mallory-pass", "claims": impostor}})
    history_before = AccessChange.objects.count()
    done = through_the_provider(client, oidc, "mallory", "mallory-pass")
    assert done.status_code == 302 and done["Location"] == "/accounts/login/"
    page = sign_in_page(client)
    assert "The account dana here belongs to someone else's sign-in, so you are not signed in" in page
    assert f"issuer {oidc.issuer}, subject sub-someone-else" in page
    assert signed_in_user(client) is None
    assert flags_of("dana") == (False, False) and roles_of("dana") == (["oncall"], False)
    assert AccessChange.objects.count() == history_before


@pytest.mark.system
def test_a_local_account_of_the_same_name_is_refused_until_an_admin_links_it(
    client: Client, oidc: RunningProvider
) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "root-local-pass-1")  # createsuperuser
    boss = User.objects.create_superuser("boss", "boss@example.com", "boss-local-pass-1")
    oidc.write_people(
        {
            "root": {
                "password": "root-at-the-provider",
                "claims": {"sub": "sub-root", "preferred_username": "root", "groups": ["sre", "platform-root"]},
            }
        }
    )
    through_the_provider(client, oidc, "root", "root-at-the-provider")
    page = sign_in_page(client)
    assert "root is a local account here, not linked to single sign-on" in page
    assert f"ask an administrator to link it to your identity (issuer {oidc.issuer}, subject sub-root)" in page
    assert signed_in_user(client) is None
    # Without its password (the old way of handing it over) it is still not taken.
    root.set_unusable_password()
    root.save()
    through_the_provider(client, oidc, "root", "root-at-the-provider")
    assert "root is a local account here" in sign_in_page(client) and signed_in_user(client) is None

    admin = Client()
    admin.force_login(boss)
    add = "/admin/presets/signinidentity/add/"
    assert "proxy:x-forwarded-user" in text(admin.get(add))  # the form says what an issuer is
    refused = admin.post(add, {"user": root.pk, "issuer": "unclaimed", "subject": "sub-root"})
    assert refused.status_code == 200 and "Give the provider&#x27;s issuer" in refused.content.decode()
    linked = admin.post(add, {"user": root.pk, "issuer": oidc.issuer + "/", "subject": " sub-root "})
    assert linked.status_code == 302, text(linked)
    assert list(SignInIdentity.objects.values_list("issuer", "subject", "user")) == [(oidc.issuer, "sub-root", root.pk)]
    row = AccessChange.objects.get(action=AccessAction.IDENTITY_LINKED)
    assert (row.actor, row.subject, row.details) == (
        "boss",
        "root",
        {"issuer": oidc.issuer, "subject": "sub-root", "how": "admin"},
    )
    # The same identity twice is a form error, not an error page.
    again = admin.post(add, {"user": boss.pk, "issuer": oidc.issuer, "subject": "sub-root"})
    assert again.status_code == 200 and "This identity is linked to an account already" in again.content.decode()

    through_the_provider(client, oidc, "root", "root-at-the-provider")
    assert signed_in_user(client) == root
    assert flags_of("root") == (True, True)  # its groups include the superuser group

    # Unlinked in the admin (recorded), the person is refused again.
    identity = SignInIdentity.objects.get()
    assert admin.post(f"/admin/presets/signinidentity/{identity.pk}/delete/", {"post": "yes"}).status_code == 302
    row = AccessChange.objects.get(action=AccessAction.IDENTITY_UNLINKED)
    assert (row.actor, row.subject, row.details) == ("boss", "root", {"issuer": oidc.issuer, "subject": "sub-root"})
    client.post("/accounts/logout/")
    through_the_provider(client, oidc, "root", "root-at-the-provider")
    assert "root is a local account here" in sign_in_page(client) and signed_in_user(client) is None


@pytest.mark.system
def test_an_email_is_a_username_only_when_the_provider_verified_it(
    client: Client, oidc: RunningProvider, settings: Any
) -> None:
    settings.OIDC_USERNAME_CLAIM = "email"
    claims = {"sub": "sub-dana", "email": "dana@example.com", "groups": ["sre"]}
    for verified in ({"email_verified": False}, {}):
        oidc.write_people({"dana": {"password": "dana-at-the-provider", "claims": {**claims, **verified}}})
        done = through_the_provider(client, oidc, "dana", "dana-at-the-provider")
        assert done["Location"] == "/accounts/login/", verified
        assert "Acme SSO has not verified your email address dana@example.com" in sign_in_page(client), verified
        assert signed_in_user(client) is None and not User.objects.exists(), verified

    oidc.write_people({"dana": {"password": "dana-at-the-provider", "claims": {**claims, "email_verified": True}}})
    through_the_provider(client, oidc, "dana", "dana-at-the-provider")
    assert signed_in_user(client) == User.objects.get(username="dana@example.com")


@pytest.mark.system
def test_staff_and_superuser_follow_the_admin_group_at_every_sign_in(client: Client, oidc: RunningProvider) -> None:
    def sign_in_with(groups: list[str]) -> None:
        oidc.write_people({"dana": {"password": "dana-at-the-provider", "claims": {**DANA, "groups": groups}}})
        through_the_provider(client, oidc, "dana", "dana-at-the-provider")
        assert signed_in_user(client) == User.objects.get(username="dana")
        client.post("/accounts/logout/")

    sign_in_with(["sre"])
    assert flags_of("dana") == (False, False)
    # Made superuser by hand (as the README once advised): the provider's groups say otherwise.
    dana = User.objects.get(username="dana")
    dana.is_superuser = dana.is_staff = True
    dana.save()
    sign_in_with(["sre"])
    assert flags_of("dana") == (False, False)

    sign_in_with(["sre", "platform-root"])  # the admin group added at the provider
    assert flags_of("dana") == (True, True)
    sign_in_with(["sre"])  # and removed
    assert flags_of("dana") == (False, False)

    flags = [AccessAction.STAFF_GRANTED, AccessAction.STAFF_REVOKED]
    flags += [AccessAction.SUPERUSER_GRANTED, AccessAction.SUPERUSER_REVOKED]
    rows = AccessChange.objects.filter(subject="dana", action__in=flags).order_by("id")
    by_provider = [(row.action, row.actor) for row in rows if row.actor != "system"]
    provider = "sso:127.0.0.1"
    assert by_provider == [
        (AccessAction.STAFF_REVOKED, provider),
        (AccessAction.SUPERUSER_REVOKED, provider),
        (AccessAction.STAFF_GRANTED, provider),
        (AccessAction.SUPERUSER_GRANTED, provider),
        (AccessAction.STAFF_REVOKED, provider),
        (AccessAction.SUPERUSER_REVOKED, provider),
    ]


def test_without_an_issuer_there_is_no_button_and_no_oidc_urls(client: Client, settings: Any) -> None:
    settings.OIDC_ISSUER = ""
    assert "Sign in with" not in client.get("/accounts/login/").content.decode()
    assert client.get("/accounts/oidc/authenticate/").status_code == 404
    assert client.get("/accounts/oidc/callback/?code=x&state=y").status_code == 404


# --- LOCAL_PASSWORDS=false --------------------------------------------------------------


@pytest.fixture
def passwords_off(db: Any, settings: Any) -> None:
    settings.OIDC_ISSUER = "https://idp.example.com"
    settings.OIDC_PROVIDER_NAME = "Acme SSO"
    settings.LOCAL_PASSWORDS = False
    settings.AUTHENTICATION_BACKENDS = [
        name for name in settings.AUTHENTICATION_BACKENDS if name != "django.contrib.auth.backends.ModelBackend"
    ]


def test_with_local_passwords_off_the_page_offers_only_the_provider(client: Client, passwords_off: None) -> None:
    page = client.get("/accounts/login/?next=/alerts/").content.decode()
    assert re.search(r'href="/accounts/oidc/authenticate/\?next=/alerts/"[^>]*>Sign in with Acme SSO<', page)
    assert 'name="password"' not in page and "Forgotten your password?" not in page


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"], ids=["site", "admin"])
def test_with_local_passwords_off_a_password_is_refused_saying_how_to_sign_in(
    client: Client, passwords_off: None, alice: User, path: str
) -> None:
    User.objects.create_superuser("root", password="root-pass-123")
    for username, password in (("alice", "alice-pass-123"), ("root", "root-pass-123")):
        refused = client.post(path, {"username": username, "password": password})
        assert refused.status_code == 403
        assert "does not take passwords" in refused.content.decode() and "Sign in with Acme SSO" in (
            refused.content.decode()
        )
        assert "_auth_user_id" not in client.session


def test_with_local_passwords_off_the_admin_sends_people_to_the_sites_sign_in(
    client: Client, passwords_off: None
) -> None:
    answer = client.get("/admin/login/?next=/admin/auth/user/")
    assert answer.status_code == 302 and answer["Location"] == "/accounts/login/?next=%2Fadmin%2Fauth%2Fuser%2F"
    assert client.get("/accounts/password_change/").status_code == 404


def test_with_local_passwords_on_the_password_form_still_signs_in(client: Client, alice: User) -> None:
    answer = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert answer.status_code == 302 and client.session["_auth_user_id"] == str(alice.pk)
    assert client.get("/admin/login/").status_code == 200


# --- the trusted proxy's headers (in process; the production process: test_proxy_auth_stack) ---

PROXY_HEADERS = {"HTTP_X_FORWARDED_USER": "frank", "HTTP_X_FORWARDED_GROUPS": "eng, sre"}


@pytest.fixture
def proxy(db: Any, settings: Any, mapped: None) -> None:
    settings.PROXY_AUTH_USER_HEADER = "X-Forwarded-User"
    settings.PROXY_AUTH_GROUPS_HEADER = "X-Forwarded-Groups"
    settings.PROXY_AUTH_TRUSTED_PROXIES = ["10.0.0.0/24", "127.0.0.1"]


def test_the_trusted_proxy_signs_people_in_with_their_roles_and_follows_their_groups(proxy: None, synced: None) -> None:
    client = Client(**PROXY_HEADERS)
    page = client.get("/chains/chat/")
    assert page.status_code == 200 and page.context["user"].username == "frank"
    assert roles_of("frank") == (["oncall", "viewer"], False)
    # The provider drops frank from sre: the next request through the proxy says so.
    assert client.get("/chains/chat/", HTTP_X_FORWARDED_GROUPS="eng").status_code == 200
    assert roles_of("frank") == (["viewer"], False)
    assert AccessChange.objects.filter(
        subject="frank", action=AccessAction.ROLE_REVOKED, actor="sso:proxy", details={"role": "oncall"}
    ).exists()
    # Without the header the proxy's session ends.
    assert client.get("/chains/chat/", HTTP_X_FORWARDED_USER="").status_code == 302


def test_the_proxy_keeps_its_names_as_identities_and_never_takes_a_local_account(proxy: None, synced: None) -> None:
    assert Client(**PROXY_HEADERS).get("/chains/chat/").status_code == 200
    frank = User.objects.get(username="frank")
    identities = SignInIdentity.objects.values_list("issuer", "subject", "user")
    assert list(identities) == [("proxy:x-forwarded-user", "frank", frank.pk)]

    # Made in the admin with password-based sign-in "Disabled": still not the proxy's by name.
    gil = User.objects.create_user("gil")
    refused = Client(HTTP_X_FORWARDED_USER="gil", HTTP_X_FORWARDED_GROUPS="sre").get("/chains/chat/")
    assert refused.status_code == 403
    words = html.unescape(text(refused))
    assert "gil is a local account here, not linked to single sign-on" in words
    assert "issuer proxy:x-forwarded-user, subject gil" in words

    # Linked by an administrator, to the name the proxy knows them by.
    link_identity(user=gil, issuer="proxy:x-forwarded-user", subject="gil.g", actor="boss", how="admin")
    client = Client(HTTP_X_FORWARDED_USER="gil.g", HTTP_X_FORWARDED_GROUPS="sre")
    for _ in range(2):
        page = client.get("/chains/chat/")
        assert page.status_code == 200 and page.context["user"] == gil
    assert not User.objects.filter(username="gil.g").exists()


def test_the_headers_from_an_untrusted_address_are_refused(proxy: None, synced: None, caplog: Any) -> None:
    for _ in range(2):
        refused = Client(REMOTE_ADDR="203.0.113.9", **PROXY_HEADERS).get("/chains/chat/")
        assert refused.status_code == 403
        assert "203.0.113.9, which is not one of the sign-in proxies" in text(refused)
    assert not User.objects.filter(username="frank").exists()
    warnings = [r for r in caplog.records if "not in PROXY_AUTH_TRUSTED_PROXIES" in r.getMessage()]
    assert len(warnings) == 1  # once per address
    # Without the headers, that address is an ordinary visitor.
    assert Client(REMOTE_ADDR="203.0.113.9").get("/chains/chat/").status_code == 302
    # X-Forwarded-For is the client's to write: it makes no address trusted.
    spoofed = Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="10.0.0.7", **PROXY_HEADERS)
    assert spoofed.get("/chains/chat/").status_code == 403


def test_a_person_the_mapping_refuses_gets_a_403_saying_why(proxy: None) -> None:
    refused = Client(HTTP_X_FORWARDED_USER="gil", HTTP_X_FORWARDED_GROUPS="marketing").get("/")
    assert refused.status_code == 403
    assert "gil is signed in, but none of their groups has access here" in text(refused)
    assert not User.objects.filter(username="gil").exists()


def test_a_refused_persons_requests_are_not_counted_as_failed_sign_ins(proxy: None, settings: Any) -> None:
    settings.LOGIN_FAILURE_LIMIT = settings.LOGIN_ADDRESS_FAILURE_LIMIT = 2
    gil = Client(HTTP_X_FORWARDED_USER="gil", HTTP_X_FORWARDED_GROUPS="marketing")
    for _ in range(4):  # every page gil opens is refused again
        assert gil.get("/").status_code == 403
    # The address (the proxy's, or an office's) is not paused for anyone else.
    assert Client(**PROXY_HEADERS).get("/").status_code == 200
