"""Two database roles, on a disposable PostgreSQL cluster: an owner (no superuser) migrates and
runs ``grant_app_role``; the web process, the commands and the sweeps run as the app role and
every feature works; the app role cannot rewrite history (TRUNCATE, UPDATE, DELETE, DISABLE
TRIGGER, DROP), while the owner still could, which is why the app must not connect as it."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.health_reports import BOUNDS, latency, step
from tests.metrics_text import value
from tests.servers import Stack, get, request, require_tools, stack_servers, wait_for

OWNER, APP, DATABASE = "controlplane_owner", "controlplane_app", "controlplane"
HISTORY = "presets_historicalselection"
HISTORY_TABLES = {
    "presets_historicalchain",
    "presets_historicalpreset",
    "presets_historicalselection",
    "presets_accesschange",  # the access history: append-only by its trigger, not simple-history
}
FIRST_GRANT: dict[str, str] = {}  # what the release step's grant_app_role printed


@pytest.fixture(scope="module", autouse=True)
def _needs_the_tools() -> None:
    require_tools("database role tests")


def database_url(stack: Stack, role: str) -> str:
    return f"postgres://{role}@127.0.0.1:{stack.postgres.port}/{DATABASE}"


def manage_as(stack: Stack, role: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A manage.py command connected as ``role``; its outcome, whatever it is."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**stack.env, "DATABASE_URL": database_url(stack, role)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def connect(stack: Stack, role: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host="127.0.0.1", port=stack.postgres.port, user=role, dbname=DATABASE, autocommit=True, connect_timeout=5
    )


PRIVILEGES = """
SELECT c.relname, string_agg(p.privilege, ',' ORDER BY p.privilege)
FROM pg_class c
CROSS JOIN unnest(ARRAY['DELETE', 'INSERT', 'REFERENCES', 'SELECT', 'TRIGGER', 'TRUNCATE', 'UPDATE']) AS p(privilege)
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND has_table_privilege(%s, c.oid, p.privilege)
GROUP BY c.relname
"""


def privileges(stack: Stack) -> dict[str, str]:
    """What the app role may do on each table now, through every grant (PostgreSQL's answer)."""
    with connect(stack, OWNER) as conn:
        return dict(conn.execute(PRIVILEGES, [APP]).fetchall())


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with stack_servers("roles") as stack:
        stack.postgres.sql(f"CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        stack.postgres.sql(f"CREATE ROLE {APP} LOGIN")
        stack.postgres.sql(f"CREATE DATABASE {DATABASE} OWNER {OWNER}")
        # The release step, as the owner: migrate, then grant.
        stack.env["DATABASE_URL"] = database_url(stack, OWNER)
        stack.manage("migrate", "--no-input", "-v0")
        FIRST_GRANT["output"] = stack.manage("grant_app_role", APP)
        # Everything else as the app role: sync, tokens, a session, the web process.
        stack.env["DATABASE_URL"] = database_url(stack, APP)
        stack.set_up("roles")
        stack.start_web()
        yield stack


# --- the grants ----------------------------------------------------------------------------


def test_the_app_role_gets_exactly_what_the_app_needs_and_a_second_run_converges(stack: Stack) -> None:
    lines = FIRST_GRANT["output"].splitlines()
    assert len(lines) == 6, lines  # the revocation, then one line per kind of grant
    assert lines[1] == "schema public: USAGE (no CREATE)"
    assert any(line.startswith(f"{len(HISTORY_TABLES)} append-only history tables (") for line in lines)
    assert lines[-1] == "django_migrations: SELECT"

    granted = privileges(stack)
    assert {table for table, allowed in granted.items() if allowed == "INSERT,SELECT"} == HISTORY_TABLES
    assert granted["django_migrations"] == "SELECT"
    ordinary = set(granted) - HISTORY_TABLES - {"django_migrations"}
    assert {"presets_selection", "presets_chain", "auth_user", "django_session", "axes_accessattempt"} <= ordinary
    assert {granted[table] for table in ordinary} == {"DELETE,INSERT,SELECT,UPDATE"}
    with connect(stack, OWNER) as conn:
        every_table = {name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert set(granted) == every_table
        assert conn.execute(
            "SELECT has_schema_privilege(%s, 'public', 'USAGE'), has_schema_privilege(%s, 'public', 'CREATE')",
            [APP, APP],
        ).fetchone() == (True, False)

        # Drift (someone granted more by hand): the next release's run takes it back.
        conn.execute(f"GRANT ALL ON {HISTORY}, presets_chain TO {APP}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {APP}")
    assert privileges(stack)[HISTORY] == "DELETE,INSERT,REFERENCES,SELECT,TRIGGER,TRUNCATE,UPDATE"
    again = manage_as(stack, OWNER, "grant_app_role", APP)
    assert again.returncode == 0, again.stderr
    assert again.stdout == FIRST_GRANT["output"]
    assert privileges(stack) == granted
    with connect(stack, OWNER) as conn:
        assert not conn.execute("SELECT has_schema_privilege(%s, 'public', 'CREATE')", [APP]).fetchone()[0]


@pytest.mark.parametrize(
    "role,argument,message",
    [
        (OWNER, "nobody", 'role "nobody" does not exist in this cluster; create it first'),
        (APP, APP, f'connected as "{APP}", which does not own the tables'),
        (OWNER, OWNER, f'"{OWNER}" is the role running this command, which owns the tables'),
        (OWNER, "postgres", '"postgres" is a superuser, which bypasses every privilege'),
        (OWNER, 'app"; DROP TABLE auth_user; --', "is not a role name this command accepts"),
    ],
    ids=["role-missing", "run-as-the-app-role", "the-owner-as-app-role", "a-superuser-as-app-role", "not-a-name"],
)
def test_grant_app_role_refuses_in_one_line_and_changes_nothing(
    stack: Stack, role: str, argument: str, message: str
) -> None:
    before = privileges(stack)
    refused = manage_as(stack, role, "grant_app_role", argument)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()], refused.stderr
    assert message in refused.stderr
    if argument == "nobody":
        assert "CREATE ROLE \"nobody\" LOGIN PASSWORD '...';" in refused.stderr
    assert privileges(stack) == before


def test_on_sqlite_it_says_roles_are_for_postgresql_and_succeeds(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "grant_app_role", APP],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "apply only to PostgreSQL" in done.stdout


# --- the app, as the app role ----------------------------------------------------------------


def long_poll(stack: Stack, etag: str, answers: list[tuple[int, bytes]]) -> None:
    req = urllib.request.Request(
        stack.url + "/api/v1/chains/chat?wait=30",
        headers={"Authorization": f"Bearer {stack.read_token}", "If-None-Match": etag},
    )
    try:
        with urllib.request.urlopen(req, timeout=40) as response:
            answers.append((response.status, response.read()))
    except urllib.error.HTTPError as exc:
        answers.append((exc.code, exc.read()))


def waiters(stack: Stack) -> float:
    return value(get(stack, "/metrics")[2].decode(), "controlplane_long_poll_waiters") or 0.0


def api(stack: Stack, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, _, answer = request(stack, "POST", path, token=stack.write_token, body=body)
    assert status == 200, answer
    return dict(json.loads(answer))


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def sign_in(stack: Stack, password: str) -> tuple[int, str, http.cookiejar.CookieJar]:
    """Sign in through /accounts/login/ as a browser would (CSRF cookie and field)."""
    cookies = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(cookies), _NoRedirects())
    with browser.open(stack.url + "/accounts/login/", timeout=15) as page:
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())
    assert csrf is not None
    form = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": csrf.group(1), "username": "oncall", "password": password}
    ).encode()
    try:
        with browser.open(stack.url + "/accounts/login/", data=form, timeout=15) as answer:
            return answer.status, answer.read().decode(), cookies
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", ""), cookies


SWEEPS = """
from datetime import timedelta
from django.utils import timezone
from audit import alerts, delivery, provider_alerts, provider_health
from worker.tasks import alert_providers, alert_stale_pins, prune_provider_health
from presets import services
from presets.models import Selection
from worker.pins import expire_pins
pin = Selection.objects.get(chain__name="chat")
print("stale", alerts.sweep_stale_pins(now=timezone.now() + timedelta(minutes=61)).raised)
print("expired", services.expire_pins(now=pin.expires_at + timedelta(seconds=1)))
print("providers", provider_alerts.sweep().raised)
print("delivered", delivery.deliver_due_alerts())
print("pruned", provider_health.prune(now=timezone.now() + timedelta(days=30)))
print("tasks", alert_stale_pins(), alert_providers(), prune_provider_health(), expire_pins())
"""


def test_every_feature_works_as_the_app_role(stack: Stack) -> None:
    # A token read, and a long poll held until a change wakes it.
    status, headers, body = get(stack, "/api/v1/chains/chat", token=stack.read_token)
    assert status == 200 and json.loads(body)["version"] == 1
    answers: list[tuple[int, bytes]] = []
    poll = threading.Thread(target=long_poll, args=(stack, headers["etag"], answers))
    poll.start()
    assert wait_for(lambda: waiters(stack) >= 1, 10), "the long poll was not held"

    # select, extend, revert, restore with a write token.
    selected = api(stack, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1"})
    poll.join(15)
    assert answers and answers[0][0] == 200 and json.loads(answers[0][1])["version"] == selected["version"] == 2
    api(stack, "/api/v1/chains/chat/extend", {"reason": "still broken", "duration_minutes": 600})
    api(stack, "/api/v1/chains/chat/revert", {"reason": "fixed"})
    restored = api(stack, "/api/v1/chains/chat/history/4/restore", {"reason": "undo v4"})
    assert (restored["version"], restored["preset"]) == (5, "pin_secondary")

    # A usage report (fleet status and provider health), with vendor_a failing, from three
    # instances that poll the chain (reports are evidence only from those).
    for instance in ("i1", "i2", "i3"):
        identity = {"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": "5"}
        assert request(stack, "GET", "/api/v1/chains/chat", token=stack.read_token, headers=identity)[0] == 200
        status, _, body = request(
            stack,
            "POST",
            "/api/v1/chains/chat/usage",
            token=stack.read_token,
            body={
                "client": f"checkout/{instance}",
                "providers": {},
                "health": {
                    "latency_bounds_ms": BOUNDS,
                    "steps": [step("vendor_a", "large", {"served": 50, "server_error": 50}, latency(b4=50))],
                },
            },
        )
        assert status == 202, body

    # The on-call pages, signed in.
    for path in ("/", "/history/", "/chains/chat/history/", "/chains/chat/", "/alerts/"):
        status, _, body = get(stack, path, session=True)
        assert status == 200, (path, body[:300])
    assert b"undo v4" in get(stack, "/history/", session=True)[2]

    # Sign-in through the form: a failure (axes records it), then success (axes resets it).
    status, page, _ = sign_in(stack, "wrong-password")
    assert status == 200 and "Could not sign you in" in page
    status, location, cookies = sign_in(stack, "oncall-pass-123")
    assert (status, location) == (302, "/")
    assert any(cookie.name == "sessionid" for cookie in cookies)

    # The background work: the beat tasks' sweeps and the cron commands.
    done = manage_as(stack, APP, "shell", "-v", "0", "-c", SWEEPS)
    assert done.returncode == 0, done.stderr
    swept = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    assert (swept["stale"], swept["expired"]) == ("1", "1"), swept
    for command in ("expire_pins", "alert_stale_pins", "prune_provider_health"):
        assert manage_as(stack, APP, command).returncode == 0, command
    status, _, body = request(stack, "GET", "/api/v1/alerts", token=stack.read_token)
    assert status == 200, body
    kinds = {alert["kind"] for alert in json.loads(body)["alerts"]}
    assert {"stale_pin", "pin_expired", "provider_failing"} <= kinds, kinds

    # Every connection the web process holds (its pool and its LISTEN) is the app role's.
    with connect(stack, OWNER) as conn:
        users = conn.execute(
            "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [DATABASE]
        ).fetchall()
    assert users == [(APP,)]


# --- history cannot be rewritten ----------------------------------------------------------------


REWRITES = [
    (f"TRUNCATE {HISTORY}", f"permission denied for table {HISTORY}"),
    (f"UPDATE {HISTORY} SET history_change_reason = 'rewritten'", f"permission denied for table {HISTORY}"),
    (f"DELETE FROM {HISTORY}", f"permission denied for table {HISTORY}"),
    (f"ALTER TABLE {HISTORY} DISABLE TRIGGER {HISTORY}_append_only", f"must be owner of table {HISTORY}"),
    (f"ALTER TABLE {HISTORY} DISABLE TRIGGER ALL", f"must be owner of table {HISTORY}"),
    (f"DROP TABLE {HISTORY}", f"must be owner of table {HISTORY}"),
    ("TRUNCATE presets_selection", "permission denied for table presets_selection"),
    ("UPDATE presets_accesschange SET actor = 'nobody'", "permission denied for table presets_accesschange"),
    ("DELETE FROM presets_accesschange", "permission denied for table presets_accesschange"),
    ("CREATE TABLE presets_rewritten (id int)", "permission denied for schema public"),
]


def test_the_app_role_cannot_rewrite_history_but_the_owner_could(stack: Stack) -> None:
    with connect(stack, APP) as app:
        before = app.execute(f"SELECT count(*) FROM {HISTORY}").fetchone()
        assert before is not None and before[0] >= 2
        for statement, message in REWRITES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                app.execute(statement)
            assert refused.value.sqlstate == "42501", statement
            assert message in str(refused.value), (statement, str(refused.value))
        assert app.execute(f"SELECT count(*) FROM {HISTORY}").fetchone() == before

    # The negative control: the owner may (which is why the app must not connect as it).
    with connect(stack, OWNER) as owner, owner.transaction(force_rollback=True):
        owner.execute(f"ALTER TABLE {HISTORY} DISABLE TRIGGER {HISTORY}_append_only")
        owner.execute(f"TRUNCATE {HISTORY}")
        assert owner.execute(f"SELECT count(*) FROM {HISTORY}").fetchone() == (0,)
