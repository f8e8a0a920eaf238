"""Disposable real servers for system tests: a PostgreSQL cluster, a redis-server and the
production web process (granian ASGI), on loopback ports, started and stopped by the tests.

They never touch the shared PostgreSQL and Redis. They need initdb/pg_ctl, runuser and the
postgres user, redis-server and granian: a test module calls ``require_tools()`` from an
autouse fixture, which skips without them locally and fails in CI.
"""

from __future__ import annotations

import atexit
import functools
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.conftest import needs
from tests.metrics_text import value


def _tool(path_glob: str) -> str | None:
    found = sorted(glob.glob(path_glob))
    return found[-1] if found else shutil.which(Path(path_glob).name)


INITDB = _tool("/usr/lib/postgresql/*/bin/initdb")
PG_CTL = str(Path(INITDB).parent / "pg_ctl") if INITDB else None
PG_BIN = Path(INITDB).parent if INITDB else None
REDIS_SERVER = shutil.which("redis-server")
GRANIAN = str(Path(sys.executable).parent / "granian")


def granian(port: int, *, workers: int = 2, backlog: int | None = None) -> list[str]:
    """The production web process's command line (as ``make serve`` runs it)."""
    options = ["--interface", "asgi", "--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
    if backlog is not None:
        options += ["--backlog", str(backlog), "--backpressure", str(backlog)]
    return [GRANIAN, *options, "--http", "1", "--no-ws", "--log-level", "warning", "controlplane.asgi:application"]


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


def require_tools(what: str) -> None:
    missing = _missing()
    if missing:
        needs(f"{what} need {missing}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


# --- the disposable servers -------------------------------------------------------------


class Postgres:
    """A throwaway cluster in a temporary directory owned by postgres, trust auth, loopback."""

    def __init__(self, root: Path, *, max_connections: int = 100, copy_of: Path | None = None) -> None:
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.max_connections = max_connections
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        if copy_of is not None:  # a stopped cluster's files: the same cluster, copied in well under a second
            self.as_postgres("cp", "-a", copy_of, self.data)
        else:
            self.as_postgres(INITDB, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def as_postgres(self, *command: Any) -> str:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", *map(str, command)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={self.max_connections}"
        )
        self.as_postgres(PG_CTL, "-D", self.data, "-o", options, "-l", self.root / "log", "-w", "start")

    def stop(self) -> None:
        self.as_postgres(PG_CTL, "-D", self.data, "-m", "fast", "-w", "stop")

    def processes(self) -> list[int]:
        """The cluster's processes: the postmaster (from its pid file) and its children."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    def pause(self) -> None:
        """Stop every process of the cluster (SIGSTOP): the kernel still accepts connections
        and bytes for it, but nothing answers, as with a server that hangs."""
        for pid in self.processes():  # the postmaster first: it forks no new child meanwhile
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in reversed(self.processes()):
            os.kill(pid, signal.SIGCONT)

    def stop_quietly(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_CTL), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )

    def run(self, program: str, *arguments: Any) -> str:
        """Run one of PostgreSQL's programs (psql, pg_dump, pg_restore) against this cluster."""
        return self.as_postgres(PG_BIN / program, "-h", "127.0.0.1", "-p", self.port, "-U", "postgres", *arguments)

    def sql(self, statement: str) -> str:
        """Run one statement with psql and return its unaligned output."""
        return self.run("psql", "-d", "postgres", "-At", "-c", statement).strip()


class Redis:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                str(REDIS_SERVER),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
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
    """The control plane under test (its web process) and the servers it depends on."""

    root: Path
    postgres: Postgres
    redis: Redis
    env: dict[str, str]
    workers: int = 1
    url: str = ""
    read_token: str = ""
    write_token: str = ""
    relay_token: str = ""
    session: str = ""
    web: subprocess.Popen[bytes] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=settings.BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def set_up(self, prefix: str) -> None:
        """On a migrated database: the example presets synced, a read, a write and a relay
        token, and a signed-in on-call session (user oncall, password oncall-pass-123). The
        commands run in one process (each its own would start Django five times)."""
        output = self.manage("shell", "-c", set_up_script(prefix))
        _, reader, writer, relay, session = output.split(f"{SET_UP_PART}\n")[-5:]
        self.read_token, self.write_token = token_in(reader), token_in(writer)
        self.relay_token = token_in(relay)
        self.session = session.strip().splitlines()[-1]

    def public_keys(self) -> dict[str, str]:
        """The keys a relay or a service trusts (``signing_keys public --format json``); {}
        while the control plane has none."""
        keys = json.loads(self.manage("signing_keys", "public", "--format", "json") or "{}")
        return {str(key_id): str(key) for key_id, key in keys.items()}

    def start_web(self) -> None:
        port = int(self.url.rsplit(":", 1)[1]) if self.url else free_port()
        with open(self.root / "web.log", "ab") as log:
            self.web = subprocess.Popen(
                granian(port, workers=self.workers, backlog=4096),
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: get(self, "/healthz")[0] == 200, 30), "the web process did not start"

    def kill_web(self, sig: int = signal.SIGTERM) -> None:
        if self.web is None:
            return
        try:
            os.killpg(self.web.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.web.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.web.pid, signal.SIGKILL)
            self.web.wait(10)
        self.web = None


@dataclass
class RelayProcess:
    """A relay (``python -m relay``) following ``upstream`` with ``token``, its documents kept
    under ``cache_dir``; started by ``start`` on a port of its own, kept across restarts. With
    ``trusted_keys`` (the control plane's, ``Stack.public_keys()``) it verifies every document
    (``RELAY_TRUSTED_KEYS``); without, it runs as a relay with no keys set does."""

    upstream: str
    token: str
    cache_dir: Path
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    trusted_keys: dict[str, str] | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "RELAY_UPSTREAM": self.upstream,
            "RELAY_TOKEN": self.token,
            "RELAY_CACHE_DIR": str(self.cache_dir),
            "RELAY_NAME": f"relay-{self.port}",
            "RELAY_LOG_LEVEL": "WARNING",
            **({"RELAY_TRUSTED_KEYS": json.dumps(self.trusted_keys)} if self.trusted_keys else {}),
            **self.env,
        }
        with open(self.cache_dir.parent / f"relay-{self.port}.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "relay", "--host", "127.0.0.1", "--port", str(self.port)]
                + ["--workers", str(self.workers)],
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert wait_for(self._answers, 30), "the relay did not start"

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
            return True
        except OSError:
            return False

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:
            return dict(json.load(response))

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None


@contextmanager
def running_stack(
    prefix: str, *, workers: int = 1, env: dict[str, str] | None = None, max_connections: int = 100
) -> Iterator[Stack]:
    """PostgreSQL and Redis of its own, migrated and synced, tokens and an on-call session
    made, and the production web process (granian ASGI, ``workers`` processes) serving."""
    with stack_servers(prefix, workers=workers, env=env, max_connections=max_connections, migrated=True) as stack:
        stack.set_up(prefix)
        stack.start_web()
        yield stack


@contextmanager
def stack_servers(
    prefix: str,
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
    max_connections: int = 100,
    migrated: bool = False,
) -> Iterator[Stack]:
    """PostgreSQL (an empty cluster, or with ``migrated`` a copy of one every migration has
    run on) and Redis of its own, started, and a Stack whose environment points at them: no
    web process yet. Stops them all, the web process included, on the way out."""
    root = _new_root(prefix)
    postgres = Postgres(_postgres_dir(root), max_connections=max_connections, copy_of=_migrated() if migrated else None)
    redis = Redis(root)
    stack: Stack | None = None
    try:
        postgres.start()
        redis.start()
        stack = Stack(
            root=root, postgres=postgres, redis=redis, env=_environment(root, postgres, redis.url, env), workers=workers
        )
        yield stack
    finally:
        if stack is not None:
            stack.kill_web()
        redis.stop()
        postgres.stop_quietly()
        shutil.rmtree(root, ignore_errors=True)


def _new_root(prefix: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"controlplane-{prefix}-"))
    os.chmod(root, 0o755)
    return root


def _postgres_dir(root: Path) -> Path:
    pg_root = root / "pg"
    pg_root.mkdir()
    postgres_user = pwd.getpwnam("postgres")
    os.chown(pg_root, postgres_user.pw_uid, postgres_user.pw_gid)
    return pg_root


def _environment(root: Path, postgres: Postgres, broker_url: str, env: dict[str, str] | None) -> dict[str, str]:
    # PROMETHEUS_MULTIPROC_DIR too: the stack's metrics are its own (VAR_DIR/prometheus),
    # not summed with this process's and other stacks' (settings exported the suite's).
    base_env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ALERT_", "CELERY_", "DATABASE_", "PIN_", "PROMETHEUS_"))
    }
    base_env.update(
        {
            "DATABASE_URL": postgres.url,
            "CELERY_BROKER_URL": broker_url,
            "VAR_DIR": str(root / "var"),
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "ERROR",
            **(env or {}),
        }
    )
    return base_env


@functools.cache
def _migrated() -> Path:
    """The data directory of a stopped cluster every migration has run on, made once a test
    session (initdb and ``migrate`` take ~6 s; a copy of their result well under one), and
    removed at its end. Each stack that wants it starts a copy: the same as migrating its own."""
    root = _new_root("migrated")
    atexit.register(shutil.rmtree, root, True)
    postgres = Postgres(_postgres_dir(root))
    postgres.start()
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v0"],
            cwd=settings.BASE_DIR,
            env=_environment(root, postgres, "memory://", None),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        postgres.stop()
    return postgres.data


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

SET_UP_PART = "--- set-up ---"


def set_up_script(prefix: str) -> str:
    """``Stack.set_up``'s commands as one ``manage.py shell -c`` script, each output after a
    ``SET_UP_PART`` line."""
    commands = [
        'call_command("sync_presets")',
        # The stack's one service, the only one reading its chains (as conftest's reader).
        f'call_command("create_token", "{prefix}-reader", "--sole-evidence")',
        f'call_command("create_token", "{prefix}-writer", "--scope", "write")',
        f'call_command("create_token", "{prefix}-relay", "--purpose", "relay")',
        f"exec({SIGN_IN_ONCALL!r})",
    ]
    return "from django.core.management import call_command\n" + "".join(
        f"print({SET_UP_PART!r})\n{command}\n" for command in commands
    )


def token_in(output: str) -> str:
    return next(word for word in output.split() if word.startswith("cpt_"))


# --- HTTP -------------------------------------------------------------------------------


def request(
    stack: Stack,
    method: str,
    path: str,
    *,
    token: str | None = None,
    body: dict[str, Any] | None = None,
    session: bool = False,
    timeout: float = 15,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", **(headers or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Cookie"] = f"sessionid={stack.session}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(stack.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
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


def held_polls(stack: Stack) -> float | None:
    """Long polls the web process holds now (its ``controlplane_long_poll_waiters`` gauge,
    written once a second); None when /metrics does not answer."""
    status, _, body = get(stack, "/metrics")
    return value(body.decode(), "controlplane_long_poll_waiters") if status == 200 else None


def read_version(stack: Stack, chain: str) -> int | None:
    status, _, body = get(stack, f"/api/v1/chains/{chain}", token=stack.read_token)
    return json.loads(body)["version"] if status == 200 else None


def select(stack: Stack, chain: str, preset: str, **extra: Any) -> tuple[int, dict[str, str], bytes]:
    return request(
        stack,
        "POST",
        f"/api/v1/chains/{chain}/select",
        token=stack.write_token,
        body={"preset": preset, "reason": "system test", **extra},
    )
