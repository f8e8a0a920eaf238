"""Security: who may do what, CSRF, escaping, headers, sign-in throttling, tokens kept out of
logs, an append-only history, and Django's deploy checks with the production environment."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.utils import timezone

from audit.alerts import sweep_stale_pins
from presets import services
from presets.models import Selection

PAYLOAD = '<script>alert("xss")</script><img src=x onerror=alert(1)>'
ESCAPED = "&lt;script&gt;alert(&quot;xss&quot;)&lt;/script&gt;"

API_ENDPOINTS = [
    ("get", "/api/v1/chains"),
    ("get", "/api/v1/chains/chat"),
    ("post", "/api/v1/chains/chat/select"),
    ("post", "/api/v1/chains/chat/revert"),
    ("post", "/api/v1/chains/chat/extend"),
    ("get", "/api/v1/chains/chat/history"),
    ("post", "/api/v1/chains/chat/history/1/restore"),
    ("get", "/api/v1/alerts"),
    ("get", "/api/v1/fleet"),
    ("get", "/api/v1/chains/chat/instances"),
    ("get", "/api/v1/history"),
    ("post", "/api/v1/chains/chat/usage"),
    ("get", "/api/v1/access-history"),
]
PAGES = [
    ("get", "/"),
    ("get", "/chains/chat/"),
    ("post", "/chains/chat/select"),
    ("post", "/chains/chat/revert"),
    ("post", "/chains/chat/extend"),
    ("get", "/chains/chat/history/"),
    ("post", "/chains/chat/history/1/restore"),
    ("get", "/history/"),
    ("get", "/alerts/"),
    ("get", "/access/"),
    ("get", "/admin/"),
    ("get", "/admin/presets/selection/"),
]
WRITES = [path for method, path in API_ENDPOINTS if method == "post" and "usage" not in path]


def ids(cases: list[tuple[str, str]]) -> list[str]:
    return [f"{method} {path}" for method, path in cases]


# --- who may do what ----------------------------------------------------------------------


@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize("method,path", API_ENDPOINTS, ids=ids(API_ENDPOINTS))
def test_every_api_endpoint_without_credentials_is_401(method: str, path: str) -> None:
    response = getattr(Client(), method)(path, {}, content_type="application/json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize("method,path", PAGES, ids=ids(PAGES))
def test_every_page_without_a_session_redirects_to_sign_in(method: str, path: str) -> None:
    response = getattr(Client(), method)(path)
    assert response.status_code == 302
    assert re.match(r"^/(admin|accounts)/login/\?next=", response["Location"])


@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize("path", WRITES)
def test_a_read_token_cannot_write(reader: Client, path: str) -> None:
    response = reader.post(path, {"reason": "r", "preset": "pin_secondary"}, content_type="application/json")
    assert response.status_code == 403
    assert Selection.objects.get(chain__name="chat").version == 1


@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize(
    "path",
    WRITES + ["/chains/chat/select", "/chains/chat/revert", "/chains/chat/extend", "/chains/chat/history/1/restore"],
)
def test_a_viewer_cannot_change_anything(client: Client, bob: User, path: str) -> None:
    client.force_login(bob)
    data = {"reason": "r", "preset": "pin_secondary", "expected_version": 1, "confirmed": "yes"}
    if path.startswith("/api/"):
        response = client.post(path, data, content_type="application/json")
    else:
        response = client.post(path, data)
    assert response.status_code == 403
    assert Selection.objects.get(chain__name="chat").version == 1


@pytest.mark.usefixtures("synced")
def test_csrf_is_enforced_on_pages_and_on_session_api_writes(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.post(
        "/chains/chat/select",
        {
            "preset": "pin_secondary",
            "reason": "r",
            "duration_minutes": "60",
            "expected_version": "1",
            "confirmed": "yes",
        },
    )
    assert page.status_code == 403
    api = client.post(
        "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "r"}, content_type="application/json"
    )
    assert api.status_code == 403 and "CSRF" in api.json()["error"]["message"]
    assert Selection.objects.get(chain__name="chat").version == 1


# --- a reason is text, everywhere ---------------------------------------------------------


@pytest.mark.usefixtures("synced")
def test_a_script_in_a_reason_renders_as_text_on_every_page_and_in_the_admin(alice: User) -> None:
    alice.is_staff = alice.is_superuser = True
    alice.save()
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=PAYLOAD)
    assert sweep_stale_pins().raised == 1  # the alert carries the reason too
    selection = Selection.objects.get(chain__name="chat")
    history_id = Selection.history.filter(chain_id=selection.chain_id).first().history_id

    client = Client()
    client.force_login(alice)
    pages = [
        "/",
        "/chains/chat/",
        "/chains/chat/history/",
        "/history/",
        "/alerts/",
        f"/admin/presets/selection/{selection.pk}/change/",
        f"/admin/presets/selection/{selection.pk}/history/",
        f"/admin/presets/selection/{selection.pk}/history/{history_id}/",
        "/admin/audit/alert/",
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert PAYLOAD not in html and "<script>alert" not in html, url
    for url in ["/", "/chains/chat/", "/history/", "/chains/chat/history/", "/alerts/"]:
        assert ESCAPED in client.get(url).content.decode(), url

    confirm = client.post("/chains/chat/revert", {"reason": PAYLOAD, "expected_version": "2"}, follow=True)
    assert confirm.status_code == 200 and confirm.redirect_chain, "the review is shown by a GET"
    html = confirm.content.decode()
    assert PAYLOAD not in html and ESCAPED in html


# --- headers and cookies ------------------------------------------------------------------


@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize("path", ["/accounts/login/", "/", "/chains/chat/history/", "/admin/"])
def test_pages_send_a_content_security_policy_and_the_other_protective_headers(
    client: Client, alice: User, path: str
) -> None:
    client.force_login(alice)
    response = client.get(path)
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert "script-src 'self';" in response["Content-Security-Policy"]
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


def test_the_session_and_csrf_cookies_are_httponly_and_samesite(client: Client, alice: User) -> None:
    login = client.get("/accounts/login/")
    assert login.cookies["csrftoken"]["samesite"] == "Lax"
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert response.status_code == 302
    session = response.cookies[settings.SESSION_COOKIE_NAME]
    assert session["httponly"] and session["samesite"] == "Lax"


# --- sign-in throttling -------------------------------------------------------------------


def test_sign_in_pauses_after_repeated_failures_and_lets_the_person_in_after_the_window(
    client: Client, alice: User
) -> None:
    limit = settings.LOGIN_FAILURE_LIMIT
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(limit - 1):
            response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
            assert response.status_code == 200 and "Could not sign you in" in response.content.decode()
        locked = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert locked.status_code == 429
        assert "Signing in is paused for 15 minutes" in locked.content.decode()
        # Locked: even the right password is refused until the window passes.
        right = {"username": "alice", "password": "alice-pass-123"}
        assert client.post("/accounts/login/", right).status_code == 429
        # Another person signing in from the same address is not affected.
        User.objects.create_user("carol", password="carol-pass-123")
        other = Client().post("/accounts/login/", {"username": "carol", "password": "carol-pass-123"})
        assert other.status_code == 302

        clock.shift(timedelta(minutes=16))
        response = client.post("/accounts/login/", right)
        assert response.status_code == 302 and response["Location"] == "/"


# --- tokens never reach the logs ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("synced")
def test_no_log_line_ever_contains_a_raw_token(
    caplog: pytest.LogCaptureFixture, read_token: str, write_token: str, reader: Client, writer: Client
) -> None:
    from django.core.asgi import get_asgi_application

    from read_path.front import ReadFront
    from tests.test_read_front import call

    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    connection.force_debug_cursor = True  # log every SQL statement too
    try:
        reader.get("/api/v1/chains/chat")
        reader.post("/api/v1/chains/chat/select", {}, content_type="application/json")
        writer.post(
            "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "r"}, content_type="application/json"
        )
        writer.post("/api/v1/chains/chat/select", {"preset": "nope", "reason": "r"}, content_type="application/json")
        Client(headers={"Authorization": f"Bearer {read_token}x"}).get("/api/v1/chains/chat")

        async def front() -> None:
            app = ReadFront(get_asgi_application())
            try:
                for token in (read_token, write_token, read_token + "x"):
                    await call(app, "/api/v1/chains/chat", {"Authorization": f"Bearer {token}"})
                await call(app, "/api/v1/chains/chat/history", {"Authorization": f"Bearer {read_token}"})
            finally:
                await app.stop()

        asyncio.run(front())
    finally:
        connection.force_debug_cursor = False
    logged = "\n".join(f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records)
    assert any(r.name == "django.db.backends" for r in caplog.records), "SQL was logged"
    for token in (read_token, write_token):
        assert token not in logged
        assert token.removeprefix("cpt_") not in logged


# --- the history is append-only -------------------------------------------------------------


def test_the_admin_offers_no_way_to_change_or_delete_history(client: Client, alice: User) -> None:
    from django.contrib import admin

    alice.is_staff = alice.is_superuser = True
    alice.save()
    for model_admin in admin.site._registry.values():
        name = model_admin.model._meta.label
        if name in {"presets.Chain", "presets.Preset", "presets.Selection", "audit.Alert"}:
            assert not model_admin.has_change_permission(_request(alice)), name
            assert not model_admin.has_delete_permission(_request(alice)), name
            assert not model_admin.has_add_permission(_request(alice)), name
        # The history tables themselves are never registered.
        assert not name.startswith("presets.Historical"), name
    assert settings.SIMPLE_HISTORY_REVERT_DISABLED


def _request(user: User) -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request


@pytest.mark.postgres
@pytest.mark.usefixtures("synced")
@pytest.mark.parametrize(
    "table", ["presets_historicalselection", "presets_historicalpreset", "presets_historicalchain"]
)
def test_postgres_refuses_to_update_or_delete_history_rows(table: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        rows = cursor.fetchone()[0]
        assert rows > 0
        for statement in (f"UPDATE {table} SET history_change_reason = 'edited'", f"DELETE FROM {table}"):
            with pytest.raises(DatabaseError, match="history is append-only"):
                with transaction.atomic():
                    cursor.execute(statement)
        cursor.execute(f"SELECT count(*) FROM {table} WHERE history_change_reason = 'edited'")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f"SELECT count(*) FROM {table}")
        assert cursor.fetchone()[0] == rows
    # Through the ORM too.
    with pytest.raises(DatabaseError), transaction.atomic():
        Selection.history.all().update(reason="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        Selection.history.first().delete()
