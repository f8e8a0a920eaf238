"""Shared fixtures: alice the on-call, bob the viewer, tokens, and the example presets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from presets.models import ServiceToken
from presets.presets_file import load_presets_file
from presets.providers import get_registry
from tests.example_sync import sync_example

IN_CI = os.environ.get("CI", "").lower() == "true"


def needs(message: str) -> NoReturn:
    """A test that cannot run here: skipped on a developer's machine, failed in CI
    (CI=true), where everything the suite needs must be."""
    if IN_CI:
        pytest.fail(message + " (CI must run it)")
    pytest.skip(message)


# Child processes (granian, celery, manage.py) often run with a VAR_DIR of their own, where
# there is no generated local key: they sign with the suite's (controlplane/secret_key.py).
os.environ.setdefault("SECRET_KEY", settings.SECRET_KEY)

# The real-browser fixtures (browser, open_page, ...) for every page test module.
pytest_plugins = ["tests.browser", "tests.notify_targets"]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres") and not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        needs("needs PostgreSQL: set DATABASE_URL=postgres://...")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Tests sign people in many times; a slow hasher is a production concern only."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_fleet_recorder() -> None:
    """The process-wide fleet recorder remembers what it wrote (to write each instance once a
    minute); each test starts with an empty database, so it must forget."""
    from audit.fleet_recorder import recorder

    recorder.forget()


@pytest.fixture(autouse=True)
def fresh_signer() -> None:
    """Each process keeps its signing key a few seconds (``presets.signing``); each test
    starts with an empty database, so it must forget the key a previous test made."""
    from presets.signing import forget_signer

    forget_signer()


@pytest.fixture
def example_file() -> Path:
    return Path(settings.BASE_DIR) / "presets" / "presets.example.json"


@pytest.fixture
def synced(db: Any, example_file: Path) -> None:
    """The example presets loaded: chat and incident-summary at v1 on their defaults (synced
    for real once a process, then written from its rows: tests/example_sync.py)."""
    sync_example(load_presets_file(example_file, registry=get_registry()))


@pytest.fixture
def alice(db: Any) -> User:
    user = User.objects.create_user("alice", password="alice-pass-123")
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])
    return user


@pytest.fixture
def bob(db: Any) -> User:
    user = User.objects.create_user("bob", password="bob-pass-123")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return user


def make_token(name: str, scope: str, **flags: Any) -> str:
    """A token's secret; ``scope`` is its purpose (read, write or relay), ``flags`` its
    ``reports`` and ``sole_evidence``."""
    token = ServiceToken(name=name, purpose=scope, **flags)
    raw = token.issue()
    token.save()
    return raw


@pytest.fixture
def read_token(db: Any) -> str:
    # The suite's one service, the only one reading its chains: its evidence alone may raise a
    # provider alert or move a guard (tests/test_fleet_evidence.py has services that are not).
    return make_token("reader", "read", sole_evidence=True)


@pytest.fixture
def relay_token(db: Any) -> str:
    return make_token("relay-eu", "relay", reports=False)


@pytest.fixture
def write_token(db: Any) -> str:
    return make_token("deployer", "write")


@pytest.fixture
def oncall(client: Client, alice: User) -> Client:
    """The test client signed in as alice, who has the on-call role."""
    client.force_login(alice)
    return client


@pytest.fixture
def viewer(bob: User) -> Client:
    """A client of its own signed in as bob, who may only look."""
    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture
def reader(read_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {read_token}"})


@pytest.fixture
def writer(write_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {write_token}"})


@pytest.fixture
def relay(relay_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {relay_token}"})


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"


# --- background work: Celery, Redis, subprocesses on the test database, a webhook receiver ---


@pytest.fixture(autouse=True, scope="session")
def _celery_in_memory_broker() -> None:
    """Tasks queued by the code under test go to kombu's in-memory broker, never to the
    filesystem queue under var/ that a local `make run` worker would consume."""
    from controlplane.celery import app

    app.conf.broker_url = "memory://"
    app.conf.broker_transport_options = {}


@pytest.fixture
def redis_url() -> Any:
    """A Redis database of its own for one test (flushed before and after); skips without
    Redis, fails in CI."""
    import redis

    url = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
    # Each of the suite's parallel processes (pytest-xdist's gw0, gw1, ...) flushes a database of its own.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    base, _, number = url.rpartition("/")
    url = f"{base}/{int(number or 0) - worker}"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        needs(f"needs Redis at {url} ({exc})")
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def subprocess_env(transactional_db: Any, tmp_path: Path) -> dict[str, str]:
    """Environment for a child process (a Celery worker, a management command) that uses the
    test database: PostgreSQL only, with committed data (transactional_db)."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("a child process cannot see the SQLite in-memory test database")
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ALERT_", "CELERY_", "DATABASE_", "PIN_"))
    }
    env.update(
        {
            "DATABASE_URL": f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
            "VAR_DIR": str(tmp_path / "var"),  # the beat schedule file and any filesystem queue
        }
    )
    return env


@pytest.fixture
def start_worker(subprocess_env: dict[str, str], redis_url: str, tmp_path: Path) -> Any:
    """Start Celery workers with beat as the test asks (``tests.test_celery_worker.Workers``);
    stop them (each one's whole process group) after the test."""
    from tests.test_celery_worker import Workers

    workers = Workers(subprocess_env | {"CELERY_BROKER_URL": redis_url}, tmp_path)
    yield workers
    workers.stop()


class WebhookReceiver:
    """A local HTTP server on an ephemeral port that records each POSTed JSON body and
    answers with the next status in `answers` (200 once they run out)."""

    def __init__(self) -> None:
        import http.server
        import json
        import threading

        self.bodies: list[Any] = []
        self.answers: list[int] = []
        self.received = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                receiver.received.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Any:
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def count_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement any thread runs, while the fixture is active."""
    from django.db.backends import utils as db_utils

    seen: list[str] = []
    original = db_utils.CursorWrapper._execute

    def counting(self: Any, sql: str, params: Any, *ignored: Any) -> Any:
        seen.append(sql)
        return original(self, sql, params, *ignored)

    monkeypatch.setattr(db_utils.CursorWrapper, "_execute", counting)
    return seen
