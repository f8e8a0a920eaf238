"""Publishing to a static host and to object storage (docs/publishing.md), with real processes:
a real Celery worker on Redis and the test database, real nginx serving the published directory,
and moto's S3 server.

The promises: a change (made by a runbook command, committed, queued, published by the worker)
reaches an SDK polling nginx and one polling the bucket; so do a key's activation (documents
signed anew) and a raised epoch; a task that runs late publishes what is current, never the
version that queued it; an older document offered to a publisher, or written by a second
publisher at the same moment, never replaces a newer one; a publish is retried until the target
is back; what is written is the exact signed bytes, as application/json.

The evidence (docs/publishing.md, "Evidence"): what a target holds counts only if it verifies
with the control plane's trusted keys and is not beyond the chain's own record; anything else is
replaced and reported (the command's exit status and stderr, the worker's log, the
``publish_forged`` alert, ``controlplane_publish_replaced_total``). And a publisher killed at any
point leaves no temporary file a static host serves (nginx with the documentation's own example
config), and never a half-written document.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import Client

from audit import drills as fleet_drills
from audit.models import Alert, AlertKind
from chainclient import ChainClient, Provider, Registry, Step
from controlplane.celery import app
from presets import document_files, publishing, services, signing
from presets import drills as chain_drills
from presets.document_files import Publication
from presets.document_signatures import PublicKeys
from presets.documents import encode_document
from presets.models import SigningKey
from presets.registry import PROVIDERS
from tests.conftest import needs
from tests.metrics_text import value as sample
from tests.servers import free_port, wait_for
from tests.settings_env import load_settings
from tests.test_celery_worker import Workers

REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000), Step("self_hosted", "8b", 10000)]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
PREFIX = "cp"
DOCUMENT_PATH = "api/v1/chains/chat"


# --- the servers -------------------------------------------------------------------------------------


class Nginx:
    """nginx in the foreground on a loopback port, serving ``root`` as a static host would (its
    own ETags, 304 on If-None-Match, ``?wait=`` ignored), with its pid, logs and temporary
    files in ``run``; workers as nginx's unprivileged user when run as root, so the published
    files must be readable by others. ``server``: the server block, with ``{port}`` and
    ``{root}`` to fill (by default, the whole root served as JSON)."""

    SERVER = """
        server {{
            listen 127.0.0.1:{port};
            root {root};
            default_type application/json;
            add_header Cache-Control no-cache;
        }}
    """

    def __init__(self, root: Path, run: Path, server: str = SERVER) -> None:
        self.root, self.run, self.port = root, run, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        temp = " ".join(
            f"{kind}_temp_path {run}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (run / "nginx.conf").write_text(
            f"daemon off; pid {run}/nginx.pid; error_log {run}/error.log warn; worker_processes 1;\n"
            f"events {{ worker_connections 64; }}\n"
            f"http {{ access_log {run}/access.log; {temp}\n{server.format(port=self.port, root=root)}\n}}\n"
        )
        self.process = subprocess.Popen(
            [NGINX, "-p", str(run), "-c", str(run / "nginx.conf"), "-e", str(run / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not wait_for(lambda: _answers(self.url), 10):
            self.stop()
            raise AssertionError("nginx did not start: " + _tail(run / "error.log"))

    def stop(self) -> None:
        _stop(self.process)


class Moto:
    """moto's S3 server on ``port`` (chosen up front, so a test can start it late)."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        self.log, self.port = log, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Moto:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not wait_for(lambda: _answers(self.url), 30):
            self.stop()
            raise AssertionError("moto's server did not start: " + _tail(self.log))
        return self

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", **_credentials())

    def bucket(self, name: str, *, versioned: bool = False) -> str:
        """A bucket whose documents anyone may read (as services read a public bucket, or a CDN
        its origin), versioned on request; its base URL for the SDK."""
        s3 = self.client()
        s3.create_bucket(Bucket=name)
        public = {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{name}/*"}
        s3.put_bucket_policy(Bucket=name, Policy=json.dumps({"Version": "2012-10-17", "Statement": [public]}))
        if versioned:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return f"{self.url}/{name}/{PREFIX}"


def _credentials() -> dict[str, str]:
    return {"aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"]}


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/", timeout=1).close()
    except urllib.error.HTTPError:
        return True  # it answers, with a status of its own
    except OSError:
        return False
    return True


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _tasks_done(log: Path) -> int:
    """How many publish tasks the worker's log says succeeded."""
    return sum(
        f"{publishing.PUBLISH_TASK}[" in line and " succeeded in " in line for line in log.read_text().splitlines()
    )


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def served() -> Iterator[Path]:
    """A directory others may traverse (nginx's workers run unprivileged), removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="controlplane-publishing-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx(served: Path) -> Iterator[Nginx]:
    if not Path(NGINX).exists():
        needs("the publishing tests need nginx (apt-get install nginx)")
    run = served / ".nginx"
    run.mkdir()
    server = Nginx(served / "sites", run)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto(served: Path) -> Iterator[Moto]:
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        needs(f"the publishing tests need moto's server (pip install 'moto[server]'): {exc}")
    server = Moto(served / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def site(served: Path, request: pytest.FixtureRequest) -> Path:
    """This test's published directory (a fresh database starts again at v1)."""
    path = served / "sites" / request.node.name.replace("[", "-").replace("]", "")
    path.mkdir(parents=True)
    return path


@pytest.fixture
def bucket_name(request: pytest.FixtureRequest) -> str:
    return request.node.name.replace("_", "-")[:40].rstrip("-").lower()


@pytest.fixture
def keys(transactional_db: Any, synced: None) -> dict[str, str]:
    """Two signing keys: the first signs, the second waits to be activated; both trusted."""
    signing.create_key(actor="test")
    signing.create_key(actor="test")
    return {key.key_id: key.public_key for key in SigningKey.objects.order_by("id")}


@pytest.fixture
def publish_to(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point this process's publishing at a directory and a bucket (for ``manage.py publish``
    and the service called in the test); returns the targets and the worker's environment."""

    def point(*, directory: Path | None, bucket: str | None, endpoint: str) -> tuple[list[Any], dict[str, str]]:
        for name, value in AWS.items():
            monkeypatch.setenv(name, value)
        settings.PUBLISH_DIRECTORY = str(directory) if directory else ""
        settings.PUBLISH_S3_BUCKET = bucket or ""
        settings.PUBLISH_S3_PREFIX = PREFIX
        settings.PUBLISH_S3_ENDPOINT_URL = endpoint
        env = {
            **AWS,
            "PUBLISH_DIRECTORY": settings.PUBLISH_DIRECTORY,
            "PUBLISH_S3_BUCKET": settings.PUBLISH_S3_BUCKET,
            "PUBLISH_S3_PREFIX": PREFIX if bucket else "",
            "PUBLISH_S3_ENDPOINT_URL": endpoint if bucket else "",
            "PUBLISH_BACKOFF_SECONDS": "1",
            "PUBLISH_TIMEOUT_SECONDS": "2",
            "PUBLISH_EVERY_SECONDS": "0",  # only the changes publish: what a test sees is theirs
        }
        return publishing.targets(), env

    return point


@pytest.fixture
def worker(subprocess_env: dict[str, str], redis_url: str, tmp_path: Path) -> Iterator[Any]:
    """Start a Celery worker with beat (``Workers``, as tests/test_celery_worker.py runs it) on
    the test database and a Redis of its own, and run runbook commands against the same."""
    # One task at a time: tasks queued together run in the order they were queued.
    workers = Workers(subprocess_env | {"CELERY_BROKER_URL": redis_url}, tmp_path, concurrency=1)

    def manage(*args: str, env: dict[str, str]) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=settings.BASE_DIR,
            env=workers.env | env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    workers.manage = manage  # type: ignore[attr-defined]
    yield workers
    workers.stop()


def published_client(base_url: str, trusted: dict[str, str]) -> ChainClient:
    return ChainClient(
        base_url,
        chain="chat",
        registry=REGISTRY,
        default=DEFAULT,
        published=True,
        trusted_keys=trusted,
        poll_interval=0.1,
        timeout=2,
        max_backoff=0.5,
    ).start()


@contextmanager
def clients(*base_urls: str, trusted: dict[str, str]) -> Iterator[list[ChainClient]]:
    started = [published_client(url, trusted) for url in base_urls]
    try:
        yield started
    finally:
        for client in started:
            client.stop()


def order(client: ChainClient) -> tuple[int, int]:
    document = client.current()
    return (document.epoch, document.version)


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def held(targets: list[Any]) -> list[tuple[int, int, str | None] | None]:
    """(epoch, version, key) of what each target holds for chat."""
    found = [target.held("chat") for target in targets]
    return [None if p is None else (p.epoch, p.version, p.key_id) for p in found]


# --- through the worker, to SDKs polling nginx and the bucket ----------------------------------------


@pytest.mark.postgres
def test_an_sdk_polling_nginx_or_the_bucket_follows_every_change_the_worker_publishes(
    keys: dict[str, str], nginx: Nginx, moto: Moto, site: Path, bucket_name: str, publish_to: Any, worker: Workers
) -> None:
    """``manage.py publish`` sets both targets up; then a change made by a runbook command, a
    key's activation and a raised epoch each reach an SDK polling nginx and one polling the
    bucket, through the worker, as the exact signed bytes served as application/json."""
    bucket_url = moto.bucket(bucket_name)
    targets, env = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    out = StringIO()
    call_command("publish", stdout=out)
    assert out.getvalue().splitlines() == [
        f"chat v1: published to directory {site}",
        f"chat v1: published to s3://{bucket_name}/{PREFIX}",
        f"incident-summary v1: published to directory {site}",
        f"incident-summary v1: published to s3://{bucket_name}/{PREFIX}",
    ]
    first, second = keys
    worker(**env)
    nginx_url = f"{nginx.url}/{site.name}"

    with clients(nginx_url, bucket_url, trusted=keys) as followers:
        assert wait_for(lambda: all(order(c) == (0, 1) for c in followers), 10)

        worker.manage("select_preset", "chat", "pin_secondary", "--reason", "INC-9 vendor_a 5xx", env=env)
        assert wait_for(lambda: all(order(c) == (0, 2) for c in followers), 30), _tail(worker.log_dir / "worker-0.log")
        assert all(c.current().preset == "pin_secondary" for c in followers)

        worker.manage("signing_keys", "activate", second, env=env)
        assert wait_for(lambda: held(targets) == [(0, 2, second)] * 2, 20), _tail(worker.log_dir / "worker-0.log")

        worker.manage("raise_epoch", "--reason", "restored from last night's backup", env=env)
        assert wait_for(lambda: all(order(c)[0] > 0 for c in followers), 20)
        assert all(c.health()["signatures"]["key_id"] == second and c.health()["rejected"] == 0 for c in followers)

    for url in (f"{nginx_url}/{DOCUMENT_PATH}", f"{bucket_url}/{DOCUMENT_PATH}"):
        status, headers, body = fetch(url)
        assert (status, headers["content-type"]) == (200, "application/json")
        document = json.loads(body)
        assert body == encode_document(document)  # the read path's encoding, byte for byte
        assert (document["version"], document["signature"]["key_id"]) == (2, second)
    assert fetch(f"{nginx_url}/{DOCUMENT_PATH}")[2] == fetch(f"{bucket_url}/{DOCUMENT_PATH}")[2]
    assert first != second


@pytest.mark.postgres
def test_a_task_that_runs_late_publishes_what_is_current_never_the_version_that_queued_it(
    keys: dict[str, str], moto: Moto, site: Path, bucket_name: str, publish_to: Any, worker: Workers
) -> None:
    """Two changes are queued while no worker runs; the worker started later runs both tasks,
    and each reads the chain when it runs: the first publishes v3, the second finds it there,
    and v2 is never written (every write the versioned bucket kept, and the worker's log)."""
    moto.bucket(bucket_name, versioned=True)
    targets, env = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    call_command("publish", "--chain", "chat", stdout=StringIO())
    worker.manage("select_preset", "chat", "pin_secondary", "--reason", "INC-9", env=env)
    worker.manage("select_preset", "chat", "drop_vendor_b", "--reason", "INC-9 vendor_b too", env=env)
    assert held(targets) == [(0, 1, next(iter(keys)))] * 2  # queued, not published

    log = worker(**env)
    assert wait_for(lambda: [h and h[1] for h in held(targets)] == [3, 3], 30), _tail(log)
    assert wait_for(lambda: _tasks_done(log) == 2, 10), _tail(log)  # the second one too

    s3 = moto.client()
    key = f"{PREFIX}/{DOCUMENT_PATH}"
    written = [
        json.loads(s3.get_object(Bucket=bucket_name, Key=key, VersionId=v["VersionId"])["Body"].read())["version"]
        for v in s3.list_object_versions(Bucket=bucket_name, Prefix=key)["Versions"]
    ]
    assert sorted(written) == [1, 3]
    assert "chat v2" not in log.read_text()


@pytest.mark.postgres
def test_a_publish_is_retried_with_backoff_until_the_target_is_back(
    keys: dict[str, str], nginx: Nginx, served: Path, site: Path, bucket_name: str, publish_to: Any, worker: Workers
) -> None:
    """With the directory missing and the S3 server down when a change commits, the task fails,
    is retried with backoff, and publishes once both are back; an SDK polling nginx follows."""
    later = Moto(served / f"{bucket_name}.log")
    missing = site / "not-yet"
    targets, env = publish_to(directory=missing, bucket=bucket_name, endpoint=later.url)
    log = worker(**env)
    worker.manage("select_preset", "chat", "pin_secondary", "--reason", "INC-9", env=env)
    assert wait_for(lambda: "attempt 1 for chat v2 failed" in log.read_text(), 30), _tail(log)
    text = log.read_text()
    assert "not published to directory" in text and "is not a directory" in text
    assert "Could not connect to the endpoint URL" in text

    try:
        missing.mkdir()
        later.start().bucket(bucket_name)
        with clients(f"{nginx.url}/{site.name}/not-yet", trusted=keys) as (follower,):
            assert wait_for(lambda: order(follower) == (0, 2), 30), _tail(log)
        # Each target is retried on its own: the bucket may come a retry after the directory.
        assert wait_for(lambda: held(targets) == [(0, 2, next(iter(keys)))] * 2, 30), (held(targets), _tail(log))
    finally:
        later.stop()


# --- the order, offered to the publishers directly ------------------------------------------------


@pytest.mark.postgres
def test_an_older_document_offered_never_replaces_a_newer_one(
    keys: dict[str, str], nginx: Nginx, moto: Moto, site: Path, bucket_name: str, publish_to: Any
) -> None:
    """Offered to both targets after v2 is published: v1 (genuinely signed) and v2 signed again
    by the same key are left out; v2 signed by the newly activated key replaces it (a re-sign
    after a key rotation). An SDK polling nginx never goes back."""
    moto.bucket(bucket_name)
    targets, _ = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    first, second = keys
    v1 = publishing.current_publication("chat")
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-9")
    v2 = publishing.current_publication("chat")
    assert all(outcome.written for outcome in publishing.publish_document(v2, to=targets))

    with clients(f"{nginx.url}/{site.name}", trusted=keys) as (follower,):
        assert wait_for(lambda: order(follower) == (0, 2), 10)
        outcomes = publishing.publish_document(v1, to=targets)
        assert [(o.written, str(o)) for o in outcomes] == [
            (False, f"chat v1: directory {site} holds the newer chat v2; left as it is"),
            (False, f"chat v1: s3://{bucket_name}/{PREFIX} holds the newer chat v2; left as it is"),
        ]
        again = publishing.current_publication("chat")
        assert (again.order, again.key_id) == (v2.order, first)
        assert not any(outcome.written for outcome in publishing.publish_document(again, to=targets))
        assert [target.held("chat").body for target in targets] == [v2.body, v2.body]

        signing.activate_key(key_id=second, actor="test")
        resigned = publishing.current_publication("chat")
        assert all(outcome.written for outcome in publishing.publish_document(resigned, to=targets))
        assert held(targets) == [(0, 2, second)] * 2
        polls = follower.health()["polls"]
        assert wait_for(lambda: follower.health()["polls"] >= polls + 3, 10)
        assert order(follower) == (0, 2) and follower.health()["rejected"] == 0


@pytest.mark.postgres
def test_a_drill_is_published_unchanged_and_an_sdk_polling_the_copy_takes_part(
    keys: dict[str, str], nginx: Nginx, site: Path, publish_to: Any
) -> None:
    """A failover drill of every service, started on the chain, is in the published copy: the
    read path's signed bytes, drill and all; an SDK polling nginx with the trusted keys takes
    part in it (a client without a token takes part in a drill of every service only), and its
    abort, published, ends it there."""
    targets, _ = publish_to(directory=site, bucket=None, endpoint="")
    drill = fleet_drills.start_drill(chain="chat", hop=1, fault="server_error", share=10, reason="drill", actor="alice")
    with_drill = publishing.current_publication("chat")
    assert json.loads(with_drill.body)["drill"]["id"] == drill.pk
    assert all(outcome.written for outcome in publishing.publish_document(with_drill, to=targets))
    assert targets[0].held("chat").body == with_drill.body
    assert fetch(f"{nginx.url}/{site.name}/{DOCUMENT_PATH}")[2] == with_drill.body

    with clients(f"{nginx.url}/{site.name}", trusted=keys) as (follower,):
        assert wait_for(lambda: order(follower) == (0, with_drill.version), 10)
        assert follower.current().drill is not None and follower.takes_part(follower.current().drill)
        chain_drills.abort_drill(drill=drill.pk, actor="alice", reason="done")
        ended = publishing.current_publication("chat")
        assert "drill" not in json.loads(ended.body) or json.loads(ended.body)["drill"] is None
        assert all(outcome.written for outcome in publishing.publish_document(ended, to=targets))
        assert wait_for(lambda: order(follower) == (0, ended.version), 10)
        assert follower.current().drill is None and follower.health()["rejected"] == 0


@pytest.mark.postgres
def test_a_second_publisher_writing_between_the_read_and_the_write_keeps_its_newer_document(
    keys: dict[str, str], moto: Moto, site: Path, bucket_name: str, publish_to: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two publishers at once (two workers, a task and the command): the older one has read the
    target when the newer one writes. S3's conditional write refuses the older one's, whether
    the object was absent (If-None-Match: *) or held a document (If-Match), and it reads again
    and leaves the newer; the directory's lock keeps the older one from reading until the newer
    one is written."""
    moto.bucket(bucket_name)
    targets, _ = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    directory, bucket = targets
    versions = [publishing.current_publication("chat")]
    for preset in ("pin_secondary", "drop_vendor_b", "pin_secondary"):
        services.select_preset(chain="chat", preset=preset, actor="alice", reason="INC-9")
        versions.append(publishing.current_publication("chat"))
    v1, v2, v3, v4 = versions
    real_read = publishing.S3Target._read

    def race(older: publishing.Publication, newer: publishing.Publication) -> publishing.Outcome:
        reads = 0

        def read_then_lose(self: Any, key: str) -> Any:
            nonlocal reads
            reads += 1
            found = real_read(self, key)
            if reads == 1:  # the older publisher has read: the newer one writes now
                assert bucket.publish(newer).written
            return found

        monkeypatch.setattr(publishing.S3Target, "_read", read_then_lose)
        try:
            return bucket.publish(older)
        finally:
            monkeypatch.setattr(publishing.S3Target, "_read", real_read)

    for older, newer in ((v1, v2), (v3, v4)):  # the bucket empty, then holding v2
        outcome = race(older, newer)
        assert (outcome.written, outcome.held and outcome.held.version) == (False, newer.version)
        assert bucket.held("chat").body == newer.body

    real_locked = document_files.locked
    entered = 0

    @contextmanager
    def newer_gets_there_first(path: Path) -> Iterator[None]:
        nonlocal entered
        entered += 1
        if entered == 1:  # the older publisher is at the lock: the newer one takes it first
            assert directory.publish(v4).written
        with real_locked(path):
            yield

    monkeypatch.setattr(document_files, "locked", newer_gets_there_first)
    outcome = directory.publish(v3)
    assert (outcome.written, outcome.held and outcome.held.version) == (False, 4)
    assert (site / DOCUMENT_PATH).read_bytes() == v4.body


@pytest.mark.postgres
def test_documents_written_within_one_second_get_distinct_etags_from_nginx(
    keys: dict[str, str], nginx: Nginx, site: Path, publish_to: Any
) -> None:
    """nginx's ETag is the file's size and modification time in whole seconds: each document
    written is dated a second after the one it replaces, so two of one size written within a
    second still differ, and a client holding the first is not answered 304 for the second."""
    [directory], _ = publish_to(directory=site, bucket=None, endpoint="")
    url = f"{nginx.url}/{site.name}/{DOCUMENT_PATH}"
    etags = []
    for preset in ("pin_secondary", "drop_vendor_b", "pin_secondary"):
        services.select_preset(chain="chat", preset=preset, actor="alice", reason="INC-9 one of three")
        assert directory.publish(publishing.current_publication("chat")).written
        headers = fetch(url)[1]
        etags.append(headers["etag"])
    assert len(set(etags)) == 3, etags
    assert fetch(url, {"If-None-Match": etags[0]})[0] == 200
    assert fetch(url, {"If-None-Match": etags[-1]})[0] == 304


# --- the command and the settings ------------------------------------------------------------------


@pytest.mark.postgres
def test_the_command_says_what_each_target_did_and_fails_on_a_target_that_fails(
    keys: dict[str, str], site: Path, publish_to: Any
) -> None:
    """``manage.py publish --chain``: one line per target; again, nothing new to write; a
    target that fails is named on stderr and the command exits non-zero; an unknown chain or
    no target at all is refused with what to do."""
    publish_to(directory=site, bucket=None, endpoint="")
    out = StringIO()
    call_command("publish", "--chain", "chat", stdout=out)
    assert out.getvalue() == f"chat v1: published to directory {site}\n"
    out = StringIO()
    call_command("publish", "--chain", "chat", stdout=out)
    assert out.getvalue().startswith(f"chat v1: directory {site} already holds it (signed by ")

    with pytest.raises(CommandError, match="--chain: unknown chain 'nope'"):
        call_command("publish", "--chain", "nope", stdout=StringIO())
    publish_to(directory=site / "missing", bucket=None, endpoint="")
    err = StringIO()
    with pytest.raises(CommandError, match=r"1 chain\(s\) not published everywhere"):
        call_command("publish", "--chain", "chat", stdout=StringIO(), stderr=err)
    assert err.getvalue().startswith(f"chat v1: not published to directory {site / 'missing'}: ")
    publish_to(directory=None, bucket=None, endpoint="")
    with pytest.raises(CommandError, match="nothing to publish to: set PUBLISH_DIRECTORY"):
        call_command("publish", stdout=StringIO())


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"PUBLISH_DIRECTORY": "var/published"}, "PUBLISH_DIRECTORY='var/published' must be an absolute path"),
        ({"PUBLISH_S3_BUCKET": "s3://chains"}, "PUBLISH_S3_BUCKET='s3://chains' is not a bucket name"),
        ({"PUBLISH_S3_BUCKET": "Chains"}, "PUBLISH_S3_BUCKET='Chains' is not a bucket name"),
        ({"PUBLISH_S3_PREFIX": "prod"}, "PUBLISH_S3_PREFIX is set but PUBLISH_S3_BUCKET is not"),
        ({"PUBLISH_S3_ENDPOINT_URL": "http://minio:9000"}, "PUBLISH_S3_ENDPOINT_URL is set but PUBLISH_S3_BUCKET"),
        (
            {"PUBLISH_S3_BUCKET": "chains", "PUBLISH_S3_ENDPOINT_URL": "minio:9000"},
            "PUBLISH_S3_ENDPOINT_URL='minio:9000' must be an http:// or https:// URL",
        ),
        ({"PUBLISH_MAX_ATTEMPTS": "0"}, "PUBLISH_MAX_ATTEMPTS=0 must be at least 1"),
        ({"PUBLISH_EVERY_SECONDS": "soon"}, "PUBLISH_EVERY_SECONDS='soon' is not a whole number"),
    ],
    ids=[
        "relative-dir",
        "url-as-bucket",
        "uppercase-bucket",
        "prefix-alone",
        "endpoint-alone",
        "endpoint-scheme",
        "no-attempts",
        "every-word",
    ],
)
def test_bad_publishing_settings_stop_the_process_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str
) -> None:
    """A publishing setting the process cannot work with stops it at start, saying which and why."""
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(monkeypatch, environment, clear=("PUBLISH_",))
    assert str(refused.value).startswith(message)


def test_publishing_settings_are_taken_and_the_beat_publishes_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Good values are taken (the prefix without its slashes); the beat's publish of every chain
    is scheduled only when a target is set, every PUBLISH_EVERY_SECONDS."""
    assert "publish-chains" not in load_settings(monkeypatch, {}, clear=("PUBLISH_",))["CELERY_BEAT_SCHEDULE"]
    loaded = load_settings(
        monkeypatch,
        {
            "PUBLISH_S3_BUCKET": "chains.example-1",
            "PUBLISH_S3_PREFIX": "/prod/",
            "PUBLISH_S3_ENDPOINT_URL": "https://minio.internal:9000",
            "PUBLISH_EVERY_SECONDS": "60",
        },
        clear=("PUBLISH_",),
    )
    assert (loaded["PUBLISH_S3_BUCKET"], loaded["PUBLISH_S3_PREFIX"]) == ("chains.example-1", "prod")
    assert loaded["CELERY_BEAT_SCHEDULE"]["publish-chains"] == {
        "task": "worker.publishing.publish_chains",
        "schedule": 60.0,
    }
    app.loader.import_default_modules()
    assert {"worker.publishing.publish_chains", publishing.PUBLISH_TASK} <= set(app.tasks)


# --- evidence: what a target holds counts only if the control plane made it ------------------------

CHAINS = publishing.CHAINS_PATH
REPLACED = "controlplane_publish_replaced_total"


# --- what an intruder writes ---------------------------------------------------------------------


def forge(genuine: bytes, how: str) -> bytes:
    """A document as someone other than the control plane would write it over ``genuine``."""
    if how == "not_a_document":
        return b"<html><body>hacked</body></html>"
    document = json.loads(genuine)
    if how.startswith("future_"):
        document["version"] = 99999
    if how in ("unsigned", "future_unsigned"):
        document.pop("signature")
        document["updated_by"] = "mallory"
    elif how in ("bad_signature", "future_bad_signature"):
        document["updated_by"] = "mallory"  # the control plane's signature kept, over other words
    elif how == "untrusted_key":
        document.pop("signature")
        document = signing.Signer("mallory-1", Ed25519PrivateKey.generate()).sign(document)
    elif how == "future_signed":
        # Only a stolen key (or a database restored without raise_epoch) makes this.
        document.pop("signature")
        signer = signing.signer_now()
        assert signer is not None
        document = signer.sign(document)
    return encode_document(document)


# (how, the reason reported, what the report says after "held ") for the control plane at v2.
FORGERIES = [
    ("unsigned", "unsigned", "v2 (unsigned, while the control plane signs every document)"),
    (
        "bad_signature",
        "bad_signature",
        "v2 (its signature does not verify with key {key}: changed after it was signed)",
    ),
    ("untrusted_key", "untrusted_key", "v2 (signed by key 'mallory-1', none of the control plane's trusted keys)"),
    (
        "future_unsigned",
        "unsigned",
        "v99999 (unsigned, while the control plane signs every document), which the control plane never "
        "made (it is at v2)",
    ),
    (
        "future_bad_signature",
        "bad_signature",
        "v99999 (its signature does not verify with key {key}: changed after it was signed), which the "
        "control plane never made (it is at v2)",
    ),
    (
        "future_signed",
        "beyond_record",
        "v99999, which the control plane never made (it is at v2), yet signed by a trusted key: the database "
        "was restored without `manage.py raise_epoch`, or a signing key is in other hands",
    ),
    ("not_a_document", "not_a_document", "{thing} that is no chain document (not JSON ("),
]


def write_over(targets: list[Any], moto: Moto, body: bytes) -> None:
    """Write ``body`` as chat's document at both targets, as an intruder would: past the
    publisher's lock and conditions."""
    directory, bucket = targets
    directory.path("chat").write_bytes(body)
    moto.client().put_object(Bucket=bucket.bucket, Key=bucket.key("chat"), Body=body)


def verified(body: bytes, keys: dict[str, str]) -> Publication:
    """The publication of ``body``, which must verify with ``keys``."""
    refusal = PublicKeys.parse(keys, where="test").refusal_of_body(body)
    assert refusal is None, refusal
    return Publication.of(body)


def scrape() -> str:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.postgres
@pytest.mark.parametrize(("how", "reason", "found"), FORGERIES, ids=[how for how, _, _ in FORGERIES])
def test_a_forged_document_at_either_target_is_replaced_and_reported(
    keys: dict[str, str], moto: Moto, site: Path, publish_to: Any, how: str, reason: str, found: str
) -> None:
    """Whatever it claims (a version the control plane never made, signed or not), a document
    that does not verify or is beyond the chain's record is replaced by the current one at both
    targets; ``manage.py publish`` names each on stderr and fails; each is a ``publish_forged``
    alert (an event, with the target as subject) and counted by reason in /metrics. The next
    publish finds them clean and says nothing."""
    bucket_name = f"forged-{how.replace('_', '-')}"  # one each: the parametrized names share a prefix
    moto.bucket(bucket_name)
    targets, _ = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-9")
    call_command("publish", "--chain", "chat", stdout=StringIO())
    genuine = targets[0].held("chat")
    write_over(targets, moto, forge(genuine.body, how))

    err = StringIO()
    with pytest.raises(CommandError, match=r"2 document\(s\) at the targets were not the control plane's"):
        call_command("publish", "--chain", "chat", stdout=StringIO(), stderr=err)

    names = [f"directory {site}", f"s3://{bucket_name}/{PREFIX}"]
    lines = err.getvalue().splitlines()
    assert len(lines) == 2, lines
    for line, name, thing in zip(lines, names, ("a file", "an object"), strict=True):
        said = found.format(key=repr(genuine.key_id), thing=thing)
        assert line.startswith(f"chat: {name} held {said}"), line
        assert line.endswith("; replaced with v2"), line
    for target in targets:
        now = verified(target.held("chat").body, keys)
        assert (now.order, now.key_id) == ((0, 2), genuine.key_id)

    alerts = list(Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED).order_by("id"))
    assert [(a.subject, a.version, a.details["reason"], a.is_event, a.is_open) for a in alerts] == [
        (name, 2, reason, True, False) for name in names
    ]
    assert [a.message for a in alerts] == lines
    metrics = scrape()
    for name in names:
        assert sample(metrics, REPLACED, {"chain": "chat", "target": name, "reason": reason}) == 1.0

    out = StringIO()
    call_command("publish", "--chain", "chat", stdout=out)  # clean now: no error, no new alert
    assert "already holds it" in out.getvalue()
    assert Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED).count() == 2


@pytest.mark.postgres
def test_without_any_key_only_the_record_counts(
    transactional_db: Any, synced: None, site: Path, publish_to: Any
) -> None:
    """Without a signing key documents go out unsigned, and an unsigned document at the target
    counts as it always did, unless it claims a version the control plane never made: that is
    replaced and reported (reason ``beyond_record``, without a word about keys)."""
    [directory], _ = publish_to(directory=site, bucket=None, endpoint="")
    call_command("publish", "--chain", "chat", stdout=StringIO())
    genuine = directory.held("chat")
    assert genuine.key_id is None
    other_words = json.loads(genuine.body) | {"updated_by": "someone"}
    directory.path("chat").write_bytes(encode_document(other_words))
    out = StringIO()
    call_command("publish", "--chain", "chat", stdout=out)  # the same version, unsigned: as before
    assert "already holds it (unsigned)" in out.getvalue()

    directory.path("chat").write_bytes(encode_document(other_words | {"version": 99999}))
    err = StringIO()
    with pytest.raises(CommandError, match="someone else writes there"):
        call_command("publish", "--chain", "chat", stdout=StringIO(), stderr=err)
    assert err.getvalue() == (
        f"chat: directory {site} held v99999, which the control plane never made (it is at v1); replaced with v1\n"
    )
    assert directory.held("chat").body == genuine.body
    [alert] = Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED)
    assert alert.details["reason"] == publishing.BEYOND_RECORD


@pytest.mark.postgres
def test_a_document_published_before_the_first_key_is_signed_anew_without_a_report(
    transactional_db: Any, synced: None, site: Path, publish_to: Any
) -> None:
    """Published unsigned before the control plane had a key, the same document is no forgery
    once a key exists: the first key's activation signs it anew, and nothing is reported."""
    [directory], _ = publish_to(directory=site, bucket=None, endpoint="")
    call_command("publish", "--chain", "chat", stdout=StringIO())
    assert directory.held("chat").key_id is None
    signing.create_key(actor="test")
    out = StringIO()
    call_command("publish", "--chain", "chat", stdout=out)
    assert out.getvalue() == f"chat v1: published to directory {site}\n"
    assert directory.held("chat").key_id is not None
    assert not Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED).exists()


@pytest.mark.postgres
def test_a_genuine_newer_document_another_publisher_wrote_is_kept_without_a_report(
    keys: dict[str, str], site: Path, publish_to: Any
) -> None:
    """A publisher holding v1 finds v2 there, newer than what it read: the record is read again
    (another publisher published a change made since), v2 is within it, so it counts and stays."""
    [directory], _ = publish_to(directory=site, bucket=None, endpoint="")
    v1 = publishing.current_publication("chat")
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-9")
    assert not publishing.publish_chain(chain="chat")[0].replaced
    [outcome] = publishing.publish_document(v1)
    assert (outcome.written, outcome.replaced, outcome.held and outcome.held.version) == (False, None, 2)
    assert not Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED).exists()


# --- through the worker and the command, to SDKs polling nginx and the bucket ---------------------


@pytest.mark.postgres
def test_services_get_the_genuine_change_after_forged_future_versions_are_replaced(
    keys: dict[str, str],
    nginx: Nginx,
    moto: Moto,
    site: Path,
    bucket_name: str,
    publish_to: Any,
    worker: Any,
    subprocess_env: dict[str, str],
) -> None:
    """Forged v99999s at both targets (refused by the SDKs, which keep v1) no longer hold
    services back: the worker's publish of the next change replaces them (logged at ERROR, the
    task succeeds, an alert each) and the SDKs polling nginx and the bucket get the change. Forged
    again, ``manage.py publish`` replaces them, says so on stderr and exits 1; the metric counts
    all four by reason."""
    bucket_url = moto.bucket(bucket_name)
    targets, env = publish_to(directory=site, bucket=bucket_name, endpoint=moto.url)
    call_command("publish", "--chain", "chat", stdout=StringIO())
    genuine = targets[0].held("chat").body
    log = worker(**env)
    names = [f"directory {site}", f"s3://{bucket_name}/{PREFIX}"]

    with clients(f"{nginx.url}/{site.name}", bucket_url, trusted=keys) as followers:
        assert wait_for(lambda: all(order(c) == (0, 1) for c in followers), 10)
        write_over(targets, moto, forge(genuine, "future_unsigned"))
        assert wait_for(lambda: all(c.health()["rejected"] > 0 for c in followers), 10)
        assert all(order(c) == (0, 1) for c in followers)

        worker.manage("select_preset", "chat", "pin_secondary", "--reason", "INC-9 vendor_a 5xx", env=env)
        assert wait_for(lambda: all(order(c) == (0, 2) for c in followers), 30), _tail(log)
        assert wait_for(lambda: _tasks_done(log) == 1, 10), _tail(log)
        text = log.read_text()
        for name in names:
            assert f"chat: {name} held v99999 (unsigned" in text
        assert wait_for(lambda: Alert.objects.filter(kind=AlertKind.PUBLISH_FORGED).count() == 2, 10)

        write_over(targets, moto, forge(targets[0].held("chat").body, "future_bad_signature"))
        done = subprocess.run(
            [sys.executable, "manage.py", "publish", "--chain", "chat"],
            cwd=settings.BASE_DIR,
            env=subprocess_env | env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        said = [line for line in done.stderr.splitlines() if line.startswith("chat: ")]
        assert [line.split(" held ")[0] for line in said] == [f"chat: {name}" for name in names], done.stderr
        assert all(" held v99999 (its signature does not verify" in line for line in said), said
        assert "someone else writes there" in done.stderr

        services.select_preset(chain="chat", preset="drop_vendor_b", actor="alice", reason="INC-9 vendor_b too")
        call_command("publish", "--chain", "chat", stdout=StringIO())
        assert wait_for(lambda: all(order(c) == (0, 3) for c in followers), 10)
        assert all(c.current().preset == "drop_vendor_b" for c in followers)

    metrics = scrape()
    for name in names:
        labels = {"chain": "chat", "target": name}
        assert sample(metrics, REPLACED, labels | {"reason": "unsigned"}) == 1.0
        assert sample(metrics, REPLACED, labels | {"reason": "bad_signature"}) == 1.0
    assert sample(metrics, "controlplane_alerts_total", {"kind": "publish_forged"}) == 4.0


# --- a publisher killed at any point ---------------------------------------------------------------

# Run as its own process: keep each document given in order (as DirectoryTarget does), killed by
# the test after a random delay, or by itself at one point of ``write_whole``: mid-write (half the
# bytes out), before the link (the file complete, nameless), before the rename (linked under its
# hidden temporary name). ``named`` writes as where O_TMPFILE is missing. Django-free, so it starts
# in a few tens of milliseconds.
WRITER = """
import os, signal, sys
from pathlib import Path
from presets import document_files
from presets.document_files import Publication

directory, point, named = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "named"
bodies = [Path(name).read_bytes() for name in sys.argv[4:]]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if named:
    document_files._unnamed = lambda directory: None
if point == "write":
    real_write = os.write
    def half_then_die(handle, data):
        real_write(handle, bytes(data[: len(data) // 2]))
        die()
    os.write = half_then_die
elif point == "link":
    os.link = die
elif point == "rename":
    os.replace = die
print("ready", flush=True)
for body in bodies:
    document_files.keep(directory, Publication.of(body))
print("done", flush=True)
"""
RANDOM_KILLS = 25
INJECTED = [("write", "unnamed"), ("link", "unnamed"), ("rename", "unnamed"), ("write", "named"), ("rename", "named")]


def documented_nginx(root: Path, run: Path) -> Nginx:
    """nginx with docs/publishing.md's example server block as written (only its port and root
    changed), so what the documentation tells people to deploy is what is checked."""
    section = (Path(settings.BASE_DIR) / "docs" / "publishing.md").read_text()
    block = re.search(r"```nginx\n(.*?)```", section, re.S)
    assert block is not None, "docs/publishing.md has no nginx example"
    server = block.group(1)
    assert "listen 80;" in server and "root /srv/chains;" in server, server
    server = server.replace("{", "{{").replace("}", "}}")
    server = server.replace("listen 80;", "listen 127.0.0.1:{port};").replace("root /srv/chains;", "root {root};")
    return Nginx(root, run, server)


@pytest.mark.postgres
def test_a_publisher_killed_at_any_point_leaves_nothing_served_but_whole_verified_documents(
    keys: dict[str, str], served: Path, site: Path, publish_to: Any, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """A writer is SIGKILLed 25 times after a random delay and once at each point of a write
    (mid-write, before the link, before the rename; also where O_TMPFILE is missing). After
    every kill, nginx with the documented config serves only whole documents that verify, and
    denies every hidden file (the locks, a temporary one left between link and rename, a
    half-written one where there is no O_TMPFILE). With O_TMPFILE a kill before the link leaves
    no file at all; the next publish (a real ``manage.py publish``) removes what is left.

    Its time (about 10 s on a busy 2-core machine): 60 changes made and signed, to have
    versions to write (a few seconds); 30 short-lived Python processes that import no Django
    (tens of milliseconds each to start), each killed within 30 ms of starting a dozen writes;
    one ``manage.py publish`` (Django's start, a second or two). Fewer kills would miss the
    rare moments (between link and rename); more add nothing the injected ones do not."""
    if not Path(NGINX).exists():
        needs("the publishing tests need nginx (apt-get install nginx)")
    publish_to(directory=site, bucket=None, endpoint="")
    bodies: list[Path] = []
    for n in range(60):
        preset = ("pin_secondary", "drop_vendor_b")[n % 2]
        services.select_preset(chain="chat", preset=preset, actor="alice", reason=f"INC-9 change {n}")
        path = tmp_path / f"v{n + 2}.json"
        path.write_bytes(publishing.current_publication("chat").body)
        bodies.append(path)
    run = served / f".nginx-{site.name}"
    run.mkdir()
    server = documented_nginx(site, run)
    chains = site / CHAINS
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def held_version() -> int:
        held = document_files.read_held(chains / "chat")
        return 1 if held is None else held.version

    def kill_once(point: str, mode: str) -> None:
        # A dozen writes of a few milliseconds each: most kills land among them.
        pending = [path for path in bodies if int(path.stem[1:]) > held_version()][:12]
        if not pending:  # every version written: start again from an empty directory
            (chains / "chat").unlink()
            pending = bodies[:12]
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(chains), point, mode, *map(str, pending)],
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        assert writer.stdout.readline() == "ready\n", writer.communicate(timeout=10)
        if point == "random":
            time.sleep(rng.uniform(0, 0.03))  # the kill's moment, not a wait for a condition
            writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        if point != "random":
            assert writer.returncode == -signal.SIGKILL, writer.communicate()

    def check(after: str) -> list[str]:
        """What is served is whole and verified; what is hidden is denied. The hidden temporary names."""
        names = sorted(os.listdir(chains)) if chains.is_dir() else []
        shown = [name for name in names if not name.startswith(".")]
        assert shown in ([], ["chat"]), (after, names)
        for name in shown:
            status, headers, body = fetch(f"{server.url}/{CHAINS}/{name}")
            assert (status, headers["content-type"]) == (200, "application/json"), (after, status)
            assert body == (chains / name).read_bytes()
            verified(body, keys)
        temporary = [name for name in names if name.startswith(".") and name != ".chat.lock"]
        assert all(document_files.is_temporary_of(name, "chat") for name in temporary), (after, names)
        for name in [n for n in names if n.startswith(".")]:
            assert fetch(f"{server.url}/{CHAINS}/{name}")[0] == 403, (after, name)
        return temporary

    try:
        for point, mode in INJECTED:
            kill_once(point, mode)
            left = check(f"killed at {point} ({mode})")
            if mode == "unnamed" and point in ("write", "link"):
                assert left == [], f"a nameless file got a name: {left}"
            if point == "rename" or mode == "named":
                assert len(left) == 1, left  # a hidden name between link and rename (or while written)
        for kill in range(RANDOM_KILLS):
            kill_once("random", "unnamed")
            check(f"random kill {kill} (seed {seed})")
    finally:
        server.stop()

    done = subprocess.run(
        [sys.executable, "manage.py", "publish", "--chain", "chat"],
        cwd=settings.BASE_DIR,
        env=subprocess_env | {"PUBLISH_DIRECTORY": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [name for name in os.listdir(chains) if name.endswith(".tmp")] == []
    assert verified((chains / "chat").read_bytes(), keys).version == 61


# --- leftovers --------------------------------------------------------------------------------------


def test_the_next_keep_removes_leftovers_of_its_chain_and_old_ones_once_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the chain's lock, its temporary files (no writer of it can be between link and
    rename) go; another chain's stay (its writer may be); the nameless ones of older publishers
    (``.xxxxxxxx.tmp``) go once older than ``OLD_TEMPORARY_AGE_S``."""
    document = encode_document({"name": "chat", "epoch": 0, "version": 3})  # type: ignore[typeddict-item]
    mine = document_files.temporary_name("chat")
    others = document_files.temporary_name("chat-eu")
    old = ".k2j4h_1x.tmp"
    for name in (mine, others, old):
        (tmp_path / name).write_bytes(b"{")
    assert document_files.keep(tmp_path, Publication.of(document))[0]
    assert sorted(os.listdir(tmp_path)) == sorted([".chat.lock", "chat", others, old])
    monkeypatch.setattr(document_files, "OLD_TEMPORARY_AGE_S", 0.0)
    assert not document_files.keep(tmp_path, Publication.of(document))[0]
    assert sorted(os.listdir(tmp_path)) == sorted([".chat.lock", "chat", others])


def test_without_o_tmpfile_the_file_is_written_under_its_hidden_name_and_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where O_TMPFILE is missing, the file is written under a hidden temporary name and renamed
    the same: whole, 0644, and nothing left beside it."""
    monkeypatch.setattr(document_files, "_unnamed", lambda directory: None)
    old = os.umask(0o077)
    try:
        document_files.write_whole(tmp_path / "chat", b'{"a": 1}')
    finally:
        os.umask(old)
    assert os.listdir(tmp_path) == ["chat"]
    assert (tmp_path / "chat").read_bytes() == b'{"a": 1}'
    assert (tmp_path / "chat").stat().st_mode & 0o777 == 0o644
