"""Faults with real servers: the control plane's PostgreSQL and Redis stop and come back.

The tests start their own disposable PostgreSQL cluster and redis-server on loopback ports,
migrate and sync the example presets into them, and run the production web process (granian
ASGI: the read front and Django) against them. They stop and start those servers, never the
shared ones. They need initdb/pg_ctl, runuser and the postgres user, redis-server and
granian: skipped without them, failed in CI.

Behaviour under test (README, "Deploy and scale"): with PostgreSQL down, everything that needs
it answers 503 quickly (JSON on /api, a page elsewhere), warm chain reads keep answering from
the web process's snapshot, an expired pin is never served (503 instead), and everything
recovers by itself. With Redis down (the Celery broker only), reads, changes and pages work.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.conftest import IN_CI

# Generous: the bar is 1 s (DESIGN §12); a noisy CI machine gets slack, the real figures are
# printed (pytest -s) and reported.
OUTAGE_ANSWER_BOUND_S = 3.0


def _tool(path_glob: str) -> str | None:
    found = sorted(glob.glob(path_glob))
    return found[-1] if found else shutil.which(Path(path_glob).name)


INITDB = _tool("/usr/lib/postgresql/*/bin/initdb")
PG_CTL = str(Path(INITDB).parent / "pg_ctl") if INITDB else None
REDIS_SERVER = shutil.which("redis-server")
GRANIAN = str(Path(sys.executable).parent / "granian")


def _missing() -> str | None:
    if INITDB is None or not Path(str(PG_CTL)).exists():
        return "PostgreSQL's initdb and pg_ctl (/usr/lib/postgresql/*/bin)"
    if shutil.which("runuser") is None:
        return "runuser"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "the postgres user"
    if os.geteuid() != 0:
        return "root (to run the cluster as postgres)"
    if REDIS_SERVER is None:
        return "redis-server"
    if not Path(GRANIAN).exists():
        return "granian in the virtualenv"
    return None


@pytest.fixture(scope="module", autouse=True)
def _needs_the_tools() -> None:
    missing = _missing()
    if missing:
        message = f"fault tests need {missing}"
        if IN_CI:
            pytest.fail(message + " (CI must run them)")
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# --- the disposable servers -------------------------------------------------------------


class Postgres:
    """A throwaway cluster in a temporary directory owned by postgres, trust auth, loopback."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres(INITDB, "-D", str(self.data), "-U", "postgres", "-A", "trust",
                          "--no-sync")

    def _as_postgres(self, *command: Any) -> None:
        done = subprocess.run(["runuser", "-u", "postgres", "--", *map(str, command)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off")
        self._as_postgres(PG_CTL, "-D", self.data, "-o", options, "-l", self.root / "log",
                          "-w", "start")

    def stop(self) -> None:
        self._as_postgres(PG_CTL, "-D", self.data, "-m", "fast", "-w", "stop")

    def stop_quietly(self) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(PG_CTL), "-D", str(self.data),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)


class Redis:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        assert wait_for(self._answers, 10), "redis-server did not start"

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@dataclass
class Stack:
    """The control plane under test and the servers it depends on."""

    url: str
    postgres: Postgres
    redis: Redis
    env: dict[str, str]
    read_token: str
    write_token: str
    session: str
    timings: dict[str, float] = field(default_factory=dict)

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=settings.BASE_DIR,
                              env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    root = Path(tempfile.mkdtemp(prefix="controlplane-faults-"))
    os.chmod(root, 0o755)
    pg_root = root / "pg"
    pg_root.mkdir()
    postgres_user = pwd.getpwnam("postgres")
    os.chown(pg_root, postgres_user.pw_uid, postgres_user.pw_gid)
    postgres = Postgres(pg_root)
    redis = Redis(root)
    web: subprocess.Popen[bytes] | None = None
    try:
        postgres.start()
        redis.start()
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("ALERT_", "CELERY_", "DATABASE_", "PIN_"))}
        env.update({"DATABASE_URL": postgres.url, "CELERY_BROKER_URL": redis.url,
                    "VAR_DIR": str(root / "var"), "DJANGO_SETTINGS_MODULE": "controlplane.settings",
                    "LOG_LEVEL": "ERROR", "PYTHONDONTWRITEBYTECODE": "1"})
        stack = Stack(url="", postgres=postgres, redis=redis, env=env, read_token="",
                      write_token="", session="")
        stack.manage("migrate", "--no-input", "-v0")
        stack.manage("sync_presets")
        stack.read_token = _token(stack.manage("create_token", "fault-reader"))
        stack.write_token = _token(stack.manage("create_token", "fault-writer", "--scope", "write"))
        stack.session = stack.manage("shell", "-c", SIGN_IN_ONCALL).strip().splitlines()[-1]

        port = free_port()
        with open(root / "web.log", "wb") as log:
            # One worker: which process has a token or a chain warm is then certain.
            web = subprocess.Popen(
                [GRANIAN, "--interface", "asgi", "--workers", "1", "--host", "127.0.0.1",
                 "--port", str(port), "--no-ws", "--log-level", "warning",
                 "controlplane.asgi:application"],
                cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: get(stack, "/healthz")[0] == 200, 30), "the web process did not start"
        yield stack
        print("\nfault timings (s):", json.dumps({k: round(v, 3) for k, v in stack.timings.items()}))
    finally:
        if web is not None:
            os.killpg(web.pid, signal.SIGTERM)
            try:
                web.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(web.pid, signal.SIGKILL)
                web.wait(10)
        redis.stop()
        postgres.stop_quietly()
        shutil.rmtree(root, ignore_errors=True)


SIGN_IN_ONCALL = """
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
user = User.objects.create_superuser("oncall", password="oncall-pass-123")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(session.session_key)
"""


def _token(output: str) -> str:
    return next(word for word in output.split() if word.startswith("cpt_"))


# --- HTTP -------------------------------------------------------------------------------


def request(stack: Stack, method: str, path: str, *, token: str | None = None,
            body: dict[str, Any] | None = None, session: bool = False) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Cookie"] = f"sessionid={stack.session}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(stack.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=15) as response:
            return response.status, _lower(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers), exc.read()


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def get(stack: Stack, path: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    try:
        return request(stack, "GET", path, **kwargs)
    except OSError:
        return 0, {}, b""


def read_version(stack: Stack, chain: str) -> int | None:
    status, _, body = get(stack, f"/api/v1/chains/{chain}", token=stack.read_token)
    return json.loads(body)["version"] if status == 200 else None


def timed(stack: Stack, label: str, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    started = time.monotonic()
    answer = request(stack, method, path, **kwargs)
    stack.timings[label] = time.monotonic() - started
    return answer


def assert_unavailable_json(answer: tuple[int, dict[str, str], bytes]) -> dict[str, Any]:
    status, headers, body = answer
    assert status == 503, body[:500]
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "unavailable" and error["message"]
    return error


def select(stack: Stack, chain: str, preset: str, **extra: Any) -> tuple[int, dict[str, str], bytes]:
    return request(stack, "POST", f"/api/v1/chains/{chain}/select", token=stack.write_token,
                   body={"preset": preset, "reason": "fault test", **extra})


# --- PostgreSQL down --------------------------------------------------------------------


def test_with_postgres_down_the_api_answers_503_fast_warm_reads_go_on_and_all_recovers(
    stack: Stack,
) -> None:
    # Warm up: the front has the read token and both chains; a short pin on incident-summary.
    assert get(stack, "/api/v1/chains/chat", token=stack.read_token)[0] == 200
    warmed_at = time.monotonic()
    expires_at = datetime.now(UTC) + timedelta(seconds=3)
    status, _, body = select(stack, "incident-summary", "local_only",
                             expires_at=expires_at.isoformat())
    assert status == 200, body
    pinned_version = json.loads(body)["version"]
    assert wait_for(lambda: json.loads(get(stack, "/api/v1/chains/incident-summary",
                                           token=stack.read_token)[2])["version"] == pinned_version, 10)
    assert get(stack, "/", session=True)[0] == 200

    stack.postgres.stop()
    try:
        assert_unavailable_json(timed(stack, "select_503", "POST", "/api/v1/chains/chat/select",
                                      token=stack.write_token,
                                      body={"preset": "pin_secondary", "reason": "during the outage"}))
        assert_unavailable_json(timed(stack, "history_503", "GET", "/api/v1/chains/chat/history",
                                      token=stack.read_token))
        # A token the front has never seen cannot be checked: 503, not 401.
        assert_unavailable_json(timed(stack, "unknown_token_503", "GET", "/api/v1/chains/chat",
                                      token="cpt_never-seen-before"))
        status, headers, page = timed(stack, "page_503", "GET", "/", session=True)
        assert status == 503
        assert headers["content-type"].startswith("text/html")
        assert b"database is unavailable" in page and b"Traceback" not in page
        assert all(took < OUTAGE_ANSWER_BOUND_S
                   for label, took in stack.timings.items() if label.endswith("_503")), stack.timings

        # Warm reads go on, past the token cache's lifetime (5 s), from the snapshot...
        assert wait_for(lambda: time.monotonic() - warmed_at > 5.5, 10)
        status, _, body = timed(stack, "warm_read", "GET", "/api/v1/chains/chat", token=stack.read_token)
        assert (status, json.loads(body)["version"]) == (200, 1)
        # ...but the pin that has expired meanwhile is never served: its revert needs the DB.
        assert datetime.now(UTC) > expires_at
        error = assert_unavailable_json(get(stack, "/api/v1/chains/incident-summary",
                                            token=stack.read_token))
        assert "expired" in error["message"]
        assert_unavailable_json(get(stack, "/api/v1/chains", token=stack.read_token))
    finally:
        stack.postgres.start()

    # Everything answers again, without restarting the web process.
    status, _, body = get(stack, "/api/v1/chains/incident-summary", token=stack.read_token)
    assert status == 200, body
    document = json.loads(body)
    assert (document["is_default"], document["version"]) == (True, pinned_version + 1)
    assert get(stack, "/api/v1/chains", token=stack.read_token)[0] == 200
    assert get(stack, "/api/v1/chains/chat/history", token=stack.read_token)[0] == 200
    assert get(stack, "/", session=True)[0] == 200
    assert get(stack, "/api/v1/chains/chat", token="cpt_never-seen-before")[0] == 401
    status, _, body = select(stack, "chat", "pin_secondary")
    assert status == 200, body
    # The front missed no change: its listener reconnects (with backoff) and its version check
    # runs every 5 s, so a change made right after the restart reaches warm reads soon after.
    version = json.loads(body)["version"]
    started = time.monotonic()
    assert wait_for(lambda: read_version(stack, "chat") == version, 15)
    stack.timings["front_caught_up_after_restart"] = time.monotonic() - started
    entries = json.loads(get(stack, "/api/v1/chains/incident-summary/history",
                             token=stack.read_token)[2])["entries"]
    assert (entries[0]["action"], entries[0]["actor"]) == ("expire", "system:expiry")


# --- Redis down -------------------------------------------------------------------------


def test_with_redis_down_reads_selects_and_pages_work(stack: Stack) -> None:
    stack.redis.stop()
    try:
        assert get(stack, "/api/v1/chains/chat", token=stack.read_token)[0] == 200
        status, _, body = timed(stack, "select_without_redis", "POST", "/api/v1/chains/chat/select",
                                token=stack.write_token,
                                body={"preset": "drop_vendor_b", "reason": "redis is down"})
        assert status == 200, body
        version = json.loads(body)["version"]
        assert wait_for(lambda: read_version(stack, "chat") == version, 10)
        status, _, page = get(stack, "/", session=True)
        assert status == 200 and b"drop_vendor_b" in page
        assert get(stack, "/api/v1/chains/chat/history", token=stack.read_token)[0] == 200
        assert get(stack, "/alerts/", session=True)[0] == 200
    finally:
        stack.redis.start()
    status, _, body = request(stack, "POST", "/api/v1/chains/chat/revert", token=stack.write_token,
                              body={"reason": "redis is back"})
    assert status == 200, body
