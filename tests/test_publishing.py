"""Publishing to a static host and to object storage (README, "Publishing to a static host or
object store"), with real processes: a real Celery worker on Redis and the test database,
real nginx serving the published directory, and moto's S3 server.

The promises: a change (made by a runbook command, committed, queued, published by the worker)
reaches an SDK polling nginx and one polling the bucket; so do a key's activation (documents
signed anew) and a raised epoch; a task that runs late publishes what is current, never the
version that queued it; an older document offered to a publisher, or written by a second
publisher at the same moment, never replaces a newer one; a publish is retried until the target
is back; what is written is the exact signed bytes, as application/json.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from chainclient import ChainClient, Provider, Registry, Step
from controlplane.celery import app
from presets import document_files, publishing, services, signing
from presets.documents import encode_document
from presets.models import SigningKey
from presets.registry import PROVIDERS
from tests.conftest import needs
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
    files must be readable by others."""

    def __init__(self, root: Path, run: Path) -> None:
        self.root, self.run, self.port = root, run, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        temp = " ".join(
            f"{kind}_temp_path {run}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (run / "nginx.conf").write_text(
            f"""
            daemon off;
            pid {run}/nginx.pid;
            error_log {run}/error.log warn;
            worker_processes 1;
            events {{ worker_connections 64; }}
            http {{
                access_log {run}/access.log;
                {temp}
                default_type application/json;
                server {{
                    listen 127.0.0.1:{self.port};
                    root {root};
                    add_header Cache-Control no-cache;
                }}
            }}
            """
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
        "task": "presets.tasks.publish_chains",
        "schedule": 60.0,
    }
    app.loader.import_default_modules()
    assert {"presets.tasks.publish_chains", publishing.PUBLISH_TASK} <= set(app.tasks)
