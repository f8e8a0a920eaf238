"""The access history: token and role changes recorded with who made them, from commands,
from the Django admin (as the signed-in admin) and from code inside ``acting_as``;
append-only in the database; shown on /access/ and by GET /api/v1/access-history to staff
and on-call engineers only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client

from pages import access as access_page
from presets.access_history import acting_as, current_actor, record_access_change
from presets.db_roles import history_tables
from presets.models import AccessChange, ServiceToken
from tests.browser import LAPTOP, PHONE, axe_violations

pytestmark = pytest.mark.usefixtures("synced")

PLAIN = {"is_active": True, "is_staff": False, "is_superuser": False}  # a new person's flags


def recorded(**filters: Any) -> list[tuple[str, str, str, dict[str, Any]]]:
    rows = AccessChange.objects.filter(**filters).order_by("id")
    return list(rows.values_list("actor", "action", "subject", "details"))


@pytest.fixture
def root(db: Any) -> User:
    return User.objects.create_superuser("root", "root@example.com", "root-pass-123")


@pytest.fixture
def admin_client(root: User) -> Client:
    client = Client()
    client.force_login(root)
    return client


def user_form(user: User, **changes: Any) -> dict[str, Any]:
    """The admin's change form for ``user`` as the page sends it, with ``changes``."""
    form = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on" if user.is_active else "",
        "is_staff": "on" if user.is_staff else "",
        "is_superuser": "on" if user.is_superuser else "",
        "groups": [str(pk) for pk in user.groups.values_list("pk", flat=True)],
        "user_permissions": [],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value != ""}


# --- what is recorded, and who made it ---------------------------------------------------------


def test_an_admin_giving_and_taking_roles_and_staff_is_recorded_as_that_admin(admin_client: Client, bob: User) -> None:
    oncall = Group.objects.get(name="oncall")
    viewer = Group.objects.get(name="viewer")
    mark = AccessChange.objects.latest("id").pk  # the fixtures' own rows, by "system"
    response = admin_client.post(
        f"/admin/auth/user/{bob.pk}/change/", user_form(bob, groups=[str(oncall.pk)], is_staff="on")
    )
    assert response.status_code == 302, response.content[:2000]
    bob.refresh_from_db()
    assert bob.is_staff and list(bob.groups.values_list("name", flat=True)) == ["oncall"]
    assert recorded(pk__gt=mark) == [
        ("root", "staff_granted", "bob", {}),
        ("root", "role_revoked", "bob", {"role": "viewer"}),
        ("root", "role_granted", "bob", {"role": "oncall"}),
    ]
    mark = AccessChange.objects.latest("id").pk
    response = admin_client.post(
        f"/admin/auth/user/{bob.pk}/change/", user_form(bob, is_active="", groups=[str(viewer.pk)])
    )
    assert response.status_code == 302
    assert recorded(pk__gt=mark) == [
        ("root", "user_deactivated", "bob", {}),
        ("root", "role_revoked", "bob", {"role": "oncall"}),
        ("root", "role_granted", "bob", {"role": "viewer"}),
    ]


def test_an_admin_adding_a_person_and_a_token_is_recorded_as_that_admin(admin_client: Client, bob: User) -> None:
    mark = AccessChange.objects.latest("id").pk  # root's own creation, by "system"
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "dana", "usable_password": "true", "password1": "dana-pass-12345", "password2": "dana-pass-12345"},
    )
    assert response.status_code == 302, response.content[:2000]
    response = admin_client.post(
        "/admin/presets/servicetoken/add/", {"name": "etl", "purpose": "write", "reports": "on"}
    )
    assert response.status_code == 302
    token = ServiceToken.objects.get(name="etl")
    response = admin_client.post(
        "/admin/presets/servicetoken/", {"action": "revoke", "_selected_action": [str(token.pk)]}, follow=True
    )
    assert "revoked 1 token(s)" in [str(m) for m in response.context["messages"]]
    assert admin_client.post(f"/admin/auth/user/{bob.pk}/delete/", {"post": "yes"}).status_code == 302
    assert recorded(pk__gt=mark) == [
        ("root", "user_created", "dana", PLAIN),
        (
            "root",
            "token_created",
            "etl",
            {
                "purpose": "write",
                "reports": True,
                "sole_evidence": False,
                "expires_at": None,
                "environment": "production",
                "chains": [],
            },
        ),
        ("root", "token_revoked", "etl", {"purpose": "write"}),
        ("root", "user_deleted", "bob", {"roles": ["viewer"], **PLAIN}),
    ]


def test_the_admin_refuses_a_token_expiry_in_the_past(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/presets/servicetoken/add/",
        {"name": "etl", "purpose": "read", "expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"},
    )
    assert response.status_code == 200
    assert b"is not in the future" in response.content
    assert not AccessChange.objects.filter(subject="etl").exists()


def test_changes_in_code_are_recorded_with_the_actor_of_acting_as_else_system(db: Any) -> None:
    oncall = Group.objects.get(name="oncall")
    with acting_as("oidc:erin@example.com"):
        erin = User.objects.create_user("erin")
        oncall.user_set.add(erin)  # from the group's side too
        with acting_as("cli:ops"):
            assert current_actor() == "cli:ops"
            erin.groups.clear()
        assert current_actor() == "oidc:erin@example.com"
    erin.is_superuser = True
    erin.save()
    assert recorded(subject="erin") == [
        (
            "oidc:erin@example.com",
            "user_created",
            "erin",
            {"is_active": True, "is_staff": False, "is_superuser": False},
        ),
        ("oidc:erin@example.com", "role_granted", "erin", {"role": "oncall"}),
        ("cli:ops", "role_revoked", "erin", {"role": "oncall"}),
        ("system", "superuser_granted", "erin", {}),
    ]


def test_other_groups_and_other_fields_record_nothing(
    db: Any, alice: User, django_assert_num_queries: Callable[..., Any]
) -> None:
    before = AccessChange.objects.count()
    alice.groups.add(Group.objects.create(name="book-club"))
    alice.first_name = "Alice"
    alice.save()
    with django_assert_num_queries(1):  # the UPDATE alone: a sign-in's last_login costs no lookup
        alice.save(update_fields=["last_login"])
    assert AccessChange.objects.count() == before
    Client().post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert AccessChange.objects.count() == before


def test_an_access_change_rolled_back_leaves_no_row(db: Any, bob: User) -> None:
    before = AccessChange.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        bob.groups.add(Group.objects.get(name="oncall"))
        assert AccessChange.objects.count() == before + 1
        raise RuntimeError("the change failed")
    assert AccessChange.objects.count() == before


def test_an_unknown_action_is_refused(db: Any) -> None:
    with pytest.raises(ValueError, match="unknown access action 'token_stolen'"):
        record_access_change(actor="x", action="token_stolen", subject="y")


# --- append-only -------------------------------------------------------------------------------


@pytest.mark.postgres
def test_the_database_refuses_to_rewrite_the_access_history(db: Any, alice: User) -> None:
    row = AccessChange.objects.latest("id")
    for statement in ("UPDATE presets_accesschange SET actor = 'nobody'", "DELETE FROM presets_accesschange"):
        with pytest.raises(DatabaseError, match="history is append-only"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement)
    with pytest.raises(DatabaseError, match="history is append-only"), transaction.atomic():
        row.delete()
    assert AccessChange.objects.get(pk=row.pk).actor == row.actor
    # The negative control: INSERT, what the history is for, works.
    record_access_change(actor="x", action="token_created", subject="y")
    assert "presets_accesschange" in history_tables()  # so grant_app_role grants it SELECT, INSERT only


# --- reading it: the page and the API ----------------------------------------------------------


def test_staff_and_oncall_see_the_page_and_viewers_do_not(db: Any, root: User, alice: User, bob: User) -> None:
    details = {"scope": "write", "expires_at": "2031-02-03T04:05:00Z"}
    record_access_change(actor="cli:ops", action="token_created", subject="checkout", details=details)
    for user in (root, alice):
        client = Client()
        client.force_login(user)
        page = client.get("/access/")
        assert page.status_code == 200
        assert b'href="/access/" aria-current="page">Access</a>' in page.content
        assert b"role granted" in page.content and b">alice</a>" in page.content
        assert b"scope: write \xc2\xb7 expires Mon 03 Feb 04:05 UTC" in page.content
    viewer = Client()
    viewer.force_login(bob)
    assert viewer.get("/access/").status_code == 403
    assert b'href="/access/"' not in viewer.get("/").content
    assert Client().get("/access/").status_code == 302  # to the sign-in page


def test_the_page_pages_by_keyset_and_narrows_to_one_subject(
    db: Any, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access_page, "ACCESS_PAGE_SIZE", 2)
    for name in ("t1", "t2", "t3"):
        record_access_change(actor="cli:ops", action="token_created", subject=name)
    client = Client()
    client.force_login(alice)
    first = client.get("/access/")
    assert [e["entry"]["subject"] for e in first.context["items"]] == ["t3", "t2"]
    second = client.get(first.context["older_url"])
    assert [e["entry"]["subject"] for e in second.context["items"]] == ["t1", "alice"]
    only = client.get("/access/?subject=t2")
    assert [e["entry"]["subject"] for e in only.context["items"]] == ["t2"]
    assert only.context["older_url"] is None
    assert client.get("/access/?older_than=999999").status_code == 400
    assert client.get("/access/?older_than=x").status_code == 400


def test_the_api_lists_the_access_history_for_staff_and_oncall_only(
    db: Any, alice: User, bob: User, read_token: str
) -> None:
    client = Client()
    client.force_login(alice)
    answer = client.get("/api/v1/access-history?limit=1")
    assert answer.status_code == 200
    body = answer.json()
    assert [(e["actor"], e["action"], e["subject"]) for e in body["entries"]] == [("system", "role_granted", "bob")]
    older = client.get(f"/api/v1/access-history?limit=1&older_than={body['older_than']}").json()
    assert older["entries"][0]["subject"] == "bob" and older["entries"][0]["action"] == "user_created"
    assert client.get("/api/v1/access-history?limit=0").status_code == 400
    viewer = Client()
    viewer.force_login(bob)
    assert viewer.get("/api/v1/access-history").status_code == 403
    assert Client(headers={"Authorization": f"Bearer {read_token}"}).get("/api/v1/access-history").status_code == 403
    assert Client().get("/api/v1/access-history").status_code == 401


def test_the_access_page_passes_axe_in_both_themes(open_page: Callable[..., Any], alice: User, bob: User) -> None:
    record_access_change(actor="cli:ops", action="token_created", subject="checkout", details={"scope": "write"})
    for color_scheme, viewport in (("light", PHONE), ("dark", LAPTOP)):
        page = open_page(alice, "/access/", color_scheme=color_scheme, viewport=viewport)
        assert page.get_by_role("heading", name="Access history").is_visible()
        assert page.locator("ol.access-history > li").count() >= 4
        assert axe_violations(page) == [], color_scheme
        assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]


def test_every_kind_of_access_change_reads_in_words_on_the_page() -> None:
    from pages.access import ACTION_WORDS
    from presets.models import AccessAction

    assert set(ACTION_WORDS) == set(AccessAction)
