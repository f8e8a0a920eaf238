"""The LISTEN connection that wakes held long polls: made like Django's own connections, given
a connection of its own behind a transaction pooler (LISTEN_DATABASE_URL), and saying so when
the process falls back to polling (one WARNING line, ``/readyz``).

The system tests run one disposable PostgreSQL cluster that accepts TCP connections only over
TLS (``hostssl``, a self-signed certificate made here with the openssl CLI), the production web
process (granian) against it, and PgBouncer in transaction mode in front of it. They need
initdb/pg_ctl, runuser and the postgres user, redis-server, granian, openssl and pgbouncer:
skipped without them, failed in CI.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import dj_database_url
import psycopg
import pytest
from django.conf import settings
from django.db import connections

from read_path import notifications
from read_path.notifications import State, conninfo_for, listen_settings, set_state
from read_path.snapshot import PG_SAFETY_POLL_S
from tests import metrics_text
from tests.conftest import needs
from tests.proxies import FreezableProxy
from tests.servers import Postgres, Stack, free_port, get, require_tools, running_stack, select, wait_for

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
OPENSSL = shutil.which("openssl")
# The acceptance's bound for a held long poll after a change, measured from the moment the
# change is sent (so it includes the change's own time). LISTEN delivers in milliseconds;
# the fallback poll takes up to PG_SAFETY_POLL_S.
WAKE_BOUND_S = 1.0
APP_NAME = "listen-test"


# --- the connection's settings --------------------------------------------------------------


def test_the_conninfo_keeps_every_libpq_option_and_drops_the_pool() -> None:
    database = dj_database_url.parse(
        "postgres://app:secret@db.internal:6543/controlplane?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem"
        f"&options=-c%20statement_timeout%3D5s&application_name={APP_NAME}"
    )
    database["OPTIONS"].update(
        connect_timeout=1,
        pool={"min_size": 1, "max_size": 8, "timeout": 5},
        server_side_binding=True,
        isolation_level=1,
        prepare_threshold=5,
    )
    params = psycopg.conninfo.conninfo_to_dict(conninfo_for(database))
    assert params == {
        "dbname": "controlplane",
        "user": "app",
        "password": "secret",
        "host": "db.internal",
        "port": "6543",
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ssl/db-ca.pem",
        "options": "-c statement_timeout=5s",
        "application_name": APP_NAME,
        "connect_timeout": "1",
        "client_encoding": "UTF8",
    }


def test_listen_database_url_replaces_the_connection_settings_but_not_the_rest(settings: Any) -> None:
    settings.LISTEN_DATABASE = {
        **dj_database_url.parse("postgres://listener@db-direct:5432/controlplane?sslmode=require"),
    }
    settings.LISTEN_DATABASE["OPTIONS"]["connect_timeout"] = 2
    settings_dict, source = listen_settings()
    params = psycopg.conninfo.conninfo_to_dict(conninfo_for(settings_dict))
    assert source == "LISTEN_DATABASE_URL"
    assert (params["host"], params["port"], params["user"], params["sslmode"]) == (
        "db-direct",
        "5432",
        "listener",
        "require",
    )
    assert "pool" not in params and "password" not in params
    settings.LISTEN_DATABASE = None
    assert listen_settings()[1] == "DATABASE_URL"


@pytest.mark.system
def test_listen_database_urls_connection_notices_a_peer_that_is_gone_as_every_connection_does() -> None:
    """TCP keepalives and tcp_user_timeout on LISTEN_DATABASE_URL's connection too (its URL's own
    query string still wins), not only on DATABASE_URL's."""
    env = {
        **os.environ,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://u@h/db",
        "LISTEN_DATABASE_URL": "postgres://listener@db-direct:5432/db?keepalives_idle=7",
    }
    code = "import json; from controlplane import settings; print(json.dumps(settings.LISTEN_DATABASE['OPTIONS']))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    options = json.loads(done.stdout.strip().splitlines()[-1])
    assert {key: options.get(key) for key in ("keepalives", "keepalives_interval", "keepalives_count")} == {
        "keepalives": 1,
        "keepalives_interval": 2,
        "keepalives_count": 3,
    }
    assert options["tcp_user_timeout"] == 10_000 and str(options["keepalives_idle"]) == "7"


@pytest.mark.system
@pytest.mark.parametrize(
    ("database_url", "listen_url", "message"),
    [
        ("postgres://u@h/db", "not a url", "LISTEN_DATABASE_URL is not a database URL"),
        ("postgres://u@h/db", "mysql://u@h/db", "LISTEN_DATABASE_URL must be a postgres:// URL"),
        ("postgres://u@h/db", "postgres://u@h:5432", "LISTEN_DATABASE_URL must name the database"),
        ("sqlite:////tmp/x.sqlite3", "postgres://u@h/db", "LISTEN_DATABASE_URL is for PostgreSQL"),
    ],
    ids=["not-a-url", "not-postgres", "no-database", "sqlite"],
)
def test_a_bad_listen_database_url_fails_at_start(database_url: str, listen_url: str, message: str) -> None:
    env = {
        **os.environ,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": database_url,
        "LISTEN_DATABASE_URL": listen_url,
    }
    done = subprocess.run(
        [sys.executable, "-c", "import controlplane.settings"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert message in done.stderr.strip().splitlines()[-1]


# --- what the process says -------------------------------------------------------------------


def test_falling_back_to_polling_logs_one_warning_until_listen_works_again(caplog: Any) -> None:
    caplog.set_level(logging.DEBUG, logger="read_path.notifications")
    try:
        set_state(State("starting", "loading"))
        set_state(State("polling", "the LISTEN connection failed (OperationalError)"))
        set_state(State("polling", "the LISTEN connection failed (TimeoutError)"))
        set_state(State("listen"), log_line="LISTEN on db:5432/controlplane (DATABASE_URL)")
        set_state(State("polling", "a NOTIFY did not arrive"), log_line="a NOTIFY did not arrive at db:5432")
    finally:
        set_state(None)
    lines = [(record.levelname, record.getMessage()) for record in caplog.records if record.levelno >= logging.INFO]
    assert lines == [
        ("WARNING", "change notifications: polling instead of LISTEN: the LISTEN connection failed (OperationalError)"),
        ("INFO", "change notifications: LISTEN on db:5432/controlplane (DATABASE_URL)"),
        ("WARNING", "change notifications: polling instead of LISTEN: a NOTIFY did not arrive at db:5432"),
    ]


@pytest.mark.django_db
def test_readyz_says_how_changes_arrive_only_where_a_read_front_runs(client: Any) -> None:
    assert client.get("/readyz").json() == {"status": "ready"}
    try:
        set_state(State("polling", "why, and what to set"))
        assert client.get("/readyz").json() == {
            "status": "ready",
            "change_notifications": "polling",
            "detail": "why, and what to set",
        }
        set_state(State("listen"))
        answer = client.get("/readyz")
        assert (answer.status_code, answer.json()) == (200, {"status": "ready", "change_notifications": "listen"})
    finally:
        set_state(None)


# --- a server that stops answering ------------------------------------------------------------


class _Follower:
    """What the listener hands on; this test needs none of it."""

    async def catch_up(self) -> None:
        pass

    async def notified(self, payload: str) -> None:
        pass

    async def tokens_changed(self) -> None:
        pass


@pytest.mark.system  # a thread of its own opens connections to the test database
@pytest.mark.django_db(transaction=True)
def test_a_listen_the_server_never_answers_ends_at_the_statement_deadline_and_listening_resumes(
    settings: Any, is_postgres: bool
) -> None:
    """The path to PostgreSQL goes silent as the LISTEN statement is sent (a proxy that stops
    forwarding; the kernel still acknowledges the bytes, so TCP notices nothing). Before the
    deadline the listener waited for ever and the process never said it was polling; now the
    statement ends after DATABASE_STATEMENT_TIMEOUT, the process says it polls, and once the
    path answers again it listens again by itself."""
    if not is_postgres:
        needs("LISTEN is PostgreSQL's: run with TEST_DATABASE_URL=postgres://...")
    database = connections["default"].settings_dict
    proxy = FreezableProxy(int(database["PORT"] or 5432), freeze_on=b"LISTEN")
    settings.DATABASE_STATEMENT_TIMEOUT = 1
    settings.LISTEN_DATABASE = {
        **{key: database[key] for key in ("NAME", "USER", "PASSWORD")},
        "HOST": "127.0.0.1",
        "PORT": str(proxy.port),
        "OPTIONS": {"connect_timeout": 2},
    }

    async def until(mode: str, within_s: float) -> tuple[State, float]:
        started = time.monotonic()
        while time.monotonic() - started < within_s:
            seen = notifications.state()
            if seen is not None and seen.mode == mode:
                return seen, time.monotonic() - started
            await asyncio.sleep(0.05)
        raise AssertionError(f"still {notifications.state()} after {within_s:g} s (waiting for {mode})")

    async def scenario() -> tuple[State, float, State]:
        task = asyncio.create_task(notifications.listen(_Follower(), polling_every=5))
        try:
            # Generous: 1 s is the deadline; without one this waits for ever.
            polling, after_s = await until("polling", within_s=20)
            assert proxy.flowing.is_set() is False, "the path went silent at the LISTEN"
            proxy.freeze_on = None
            proxy.thaw()
            listening, _ = await until("listen", within_s=30)
            return polling, after_s, listening
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    try:
        polling, after_s, listening = asyncio.run(scenario())
    finally:
        proxy.close()
        set_state(None)
    assert "OperationalError" in polling.detail, polling
    assert after_s < 10, f"the LISTEN statement ended {after_s:.1f} s after the path went silent"
    assert listening == State("listen")


# --- the disposable servers -----------------------------------------------------------------


def _require(tool: str | None, what: str) -> None:
    if tool is None:
        needs(f"the LISTEN connection tests need {what}")


def make_tls_only(postgres: Postgres, root: Path) -> Path:
    """Turn TLS on with a fresh self-signed certificate and accept TCP clients only over it.
    Returns the certificate (a client's sslrootcert)."""
    cert, key = root / "server.crt", root / "server.key"
    subprocess.run(
        [str(OPENSSL), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    owner = pwd.getpwnam("postgres")
    for source in (cert, key):
        target = postgres.data / source.name
        shutil.copy(source, target)
        os.chown(target, owner.pw_uid, owner.pw_gid)
        os.chmod(target, 0o600)
    (postgres.data / "pg_hba.conf").write_text("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
    postgres.sql("ALTER SYSTEM SET ssl = on")
    postgres.sql("SELECT pg_reload_conf()")
    assert wait_for(lambda: postgres.sql("SHOW ssl") == "on", 10)
    return cert


class PgBouncer:
    """PgBouncer in transaction mode in front of ``postgres`` (TLS to the server), on a
    loopback port, with its own ini in a directory of its own, run as postgres."""

    def __init__(self, root: Path, postgres: Postgres) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        (root / "userlist.txt").write_text('"postgres" ""\n')
        (root / "pgbouncer.ini").write_text(
            f"[databases]\npostgres = host=127.0.0.1 port={postgres.port} dbname=postgres\n\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {root / 'userlist.txt'}\n"
            "pool_mode = transaction\ndefault_pool_size = 20\nmax_client_conn = 200\n"
            "server_tls_sslmode = require\n"
            f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
        )
        self.process = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", str(PGBOUNCER), str(root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_for(self._answers, 15), (root / "pgbouncer.log").read_text()

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.process.wait(10)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """The web process (one worker: /readyz and its log are that process's) against a cluster
    that takes TCP clients over TLS only. LOG_LEVEL=WARNING: the fallback's line is logged."""
    require_tools("the LISTEN connection tests")
    _require(OPENSSL, "the openssl command")
    with running_stack("listen", env={"LOG_LEVEL": "WARNING"}) as stack:
        make_tls_only(stack.postgres, stack.root)
        yield stack


@pytest.fixture(scope="module")
def pgbouncer(stack: Stack) -> Iterator[PgBouncer]:
    _require(PGBOUNCER, "pgbouncer (Debian package pgbouncer)")
    root = Path(tempfile.mkdtemp(prefix="controlplane-pgbouncer-"))
    bouncer = PgBouncer(root, stack.postgres)
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(root, ignore_errors=True)


def restart_web(stack: Stack, **env: str) -> int:
    """Restart the web process with these database settings; returns where its log starts."""
    stack.kill_web()
    for name in ("DATABASE_URL", "LISTEN_DATABASE_URL"):
        stack.env.pop(name, None)
    stack.env.update(env)
    log = stack.root / "web.log"
    start = log.stat().st_size if log.exists() else 0
    stack.start_web()
    return start


def readyz(stack: Stack) -> dict[str, Any]:
    status, _, body = get(stack, "/readyz")
    return json.loads(body) if status == 200 else {"status": status}


def waiters(stack: Stack) -> float:
    status, _, body = get(stack, "/metrics")
    found = metrics_text.value(body.decode(), "controlplane_long_poll_waiters") if status == 200 else None
    return found or 0.0


def long_poll_wake(stack: Stack, chain: str = "chat") -> float:
    """Hold a long poll on ``chain``, change the chain through the API, and return how long
    after the change was sent the long poll answered with the new version."""
    status, headers, body = get(stack, f"/api/v1/chains/{chain}", token=stack.read_token)
    assert status == 200, body[:300]
    held = json.loads(body)
    answer: dict[str, Any] = {}

    def hold() -> None:
        request = urllib.request.Request(
            f"{stack.url}/api/v1/chains/{chain}?wait=30",
            headers={"Authorization": f"Bearer {stack.read_token}", "If-None-Match": headers["etag"]},
        )
        try:
            with urllib.request.urlopen(request, timeout=40) as response:
                answer.update(status=response.status, body=response.read())
        except urllib.error.HTTPError as exc:
            answer.update(status=exc.code, body=exc.read())
        answer["at"] = time.monotonic()

    poller = threading.Thread(target=hold, daemon=True)
    poller.start()
    assert wait_for(lambda: waiters(stack) >= 1, 10, every=0.2), "the long poll is not held"
    preset = next(p for p in ("pin_secondary", "drop_vendor_b", "local_only") if p != held["preset"])
    changed_at = time.monotonic()
    status, _, body = select(stack, chain, preset)
    assert status == 200, body[:300]
    poller.join(40)
    assert answer.get("status") == 200, answer
    assert json.loads(answer["body"])["version"] == held["version"] + 1
    return float(answer["at"] - changed_at)


def listen_backends(stack: Stack) -> list[str]:
    """(ssl, application_name) of the client backends whose last statement was a LISTEN."""
    rows = stack.postgres.sql(
        "SELECT s.ssl || ' ' || a.application_name FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
        "WHERE a.backend_type = 'client backend' AND a.query LIKE 'LISTEN %'"
    )
    return rows.splitlines()


# --- the system tests -----------------------------------------------------------------------


def test_the_listen_connection_uses_database_urls_tls_settings(stack: Stack) -> None:
    direct = f"postgresql://postgres@127.0.0.1:{stack.postgres.port}/postgres"
    # The server takes no TCP client without TLS.
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(f"{direct}?sslmode=disable", connect_timeout=2).close()

    cert = stack.root / "server.crt"
    restart_web(stack, DATABASE_URL=f"{direct}?sslmode=require&sslrootcert={cert}&application_name={APP_NAME}")
    assert wait_for(lambda: readyz(stack).get("change_notifications") == "listen", 20), readyz(stack)
    assert readyz(stack) == {"status": "ready", "change_notifications": "listen"}
    # The LISTEN backend is this process's, over TLS, with the URL's application_name (the
    # LISTEN connection used to be made from NAME/USER/PASSWORD/HOST/PORT alone).
    assert listen_backends(stack) == [f"true {APP_NAME}"]
    elapsed = long_poll_wake(stack)
    print(f"\nTLS: a held long poll woke {elapsed:.3f} s after the change")
    assert elapsed < WAKE_BOUND_S


def test_behind_a_transaction_pooler_listen_database_url_keeps_long_polls_instant(
    stack: Stack, pgbouncer: PgBouncer
) -> None:
    direct = f"postgresql://postgres@127.0.0.1:{stack.postgres.port}/postgres?sslmode=require"
    start = restart_web(
        stack,
        DATABASE_URL=f"{pgbouncer.url}?application_name=pooled",
        LISTEN_DATABASE_URL=f"{direct}&application_name={APP_NAME}",
    )
    assert wait_for(lambda: readyz(stack).get("change_notifications") == "listen", 20), readyz(stack)
    assert listen_backends(stack) == [f"true {APP_NAME}"]
    elapsed = long_poll_wake(stack)
    print(f"\nPgBouncer + LISTEN_DATABASE_URL: a held long poll woke {elapsed:.3f} s after the change")
    assert elapsed < WAKE_BOUND_S
    assert "polling instead of LISTEN" not in (stack.root / "web.log").read_bytes()[start:].decode()


def test_behind_a_transaction_pooler_without_it_the_process_says_it_polls_and_still_serves(
    stack: Stack, pgbouncer: PgBouncer
) -> None:
    start = restart_web(stack, DATABASE_URL=pgbouncer.url)
    assert wait_for(lambda: readyz(stack).get("change_notifications") == "polling", 20), readyz(stack)
    ready = readyz(stack)
    assert ready["status"] == "ready"
    assert "transaction pooler" in ready["detail"] and "LISTEN_DATABASE_URL" in ready["detail"]
    log = (stack.root / "web.log").read_bytes()[start:].decode()
    warnings = [line for line in log.splitlines() if "polling instead of LISTEN" in line]
    assert len(warnings) == 1, log
    assert " WARNING " in warnings[0] and "set LISTEN_DATABASE_URL" in warnings[0]
    # Polling still serves: the change reaches the held long poll within the poll interval.
    elapsed = long_poll_wake(stack)
    print(f"\nPgBouncer, polling: a held long poll woke {elapsed:.3f} s after the change")
    assert elapsed < PG_SAFETY_POLL_S + 2.0
