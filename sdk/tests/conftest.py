"""Shared fixtures: a scripted local control plane, a registry, documents and fast clients."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import drill_vectors
import pytest
import router_fixtures

from chainclient import ChainClient, Provider, Registry, Step

REGISTRY = Registry(
    {
        "vendor_a": Provider(destination="vendor_a-us", models={"large": {"text", "images"}, "small": {"text"}}),
        "vendor_b": Provider(destination="vendor_b-eu", models={"large": {"text"}, "small": {"text"}}),
        "self_hosted": Provider(destination="self-hosted", models={"8b": {"text"}, "70b": {"text"}}),
    }
)

DEFAULT_STEPS = [
    Step("vendor_a", "large", 20000),
    Step("vendor_b", "large", 20000),
    Step("self_hosted", "8b", 10000),
]


def _make_document(version: int, preset: str = "normal", **overrides: Any) -> dict[str, Any]:
    """A valid chain document as the control plane serves it."""
    document: dict[str, Any] = {
        "name": "chat",
        "version": version,
        "preset": preset,
        "is_default": preset == "normal",
        "chain": [
            {"provider": "vendor_b", "model": "large", "timeout_ms": 20000},
            {"provider": "self_hosted", "model": "8b", "timeout_ms": 10000},
        ],
        "marking": {"degraded": False, "note": ""},
        "updated_by": "alice",
        "reason": f"change number {version}",
        "updated_at": "2026-11-29T02:03:04Z",
        "expires_at": None,
    }
    document.update(overrides)
    return document


def instant(epoch_s: float) -> str:
    """``epoch_s`` as a document writes an instant (RFC 3339, milliseconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s * 1000) % 1000:03d}Z"


def drill_json(**changes: Any) -> dict[str, Any]:
    """A document's drill: active from a minute ago for an hour (on the wall clock), of every
    service, hop 1, a server error for a quarter of the requests; ``changes`` replace fields."""
    now = time.time()
    return drill_vectors.drill(**{"starts_at": instant(now - 60), "ends_at": instant(now + 3600), **changes})


def entity_tag(document: dict[str, Any]) -> str:
    """The ETag the real API sends: the version, prefixed by the epoch once one was raised."""
    epoch = document.get("epoch", 0)
    return f'"{document["version"]}"' if epoch == 0 else f'"{epoch}.{document["version"]}"'


@dataclass
class Reply:
    """One scripted answer: a status, a body (dict/list as JSON, str/bytes raw), a delay.

    ``hang`` accepts the request and never answers (until the test ends); ``drop`` answers
    and then closes the connection without saying so, like an idle-timeout on a balancer;
    ``hang_up`` closes the connection without answering at all.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False
    drop: bool = False
    hang_up: bool = False

    @classmethod
    def document(cls, document: dict[str, Any], **kwargs: Any) -> Reply:
        headers = {"ETag": entity_tag(document), "Content-Type": "application/json"}
        return cls(200, document, headers=headers, **kwargs)

    @classmethod
    def not_modified(cls, **kwargs: Any) -> Reply:
        return cls(304, **kwargs)


@dataclass
class Recorded:
    path: str
    query: dict[str, str]
    headers: Message
    at: float


@dataclass
class Report:
    """A usage report the control plane received: its headers and its parsed JSON body."""

    path: str
    headers: Message
    body: Any
    at: float
    accepted: bool = False


class ControlPlane(ThreadingHTTPServer):
    """A local server answering ``GET /api/v1/chains/chat`` from a script.

    Answers come from, in order: the queue (``reply``), a sticky reply (``always``), or
    the published document (``publish``), served like the real API: ETag, 304 on a
    matching If-None-Match, and ``?wait=`` held until the version changes when
    ``honour_wait`` is true.

    ``POST /api/v1/chains/chat/usage`` is recorded in ``reports`` (every attempt, accepted
    or not) and answered from its own queue (``reply_usage``), else ``202 {"accepted": true}``.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.requests: list[Recorded] = []
        self.honour_wait = True
        self.released = threading.Event()
        self._lock = threading.Condition()
        self._queue: list[Reply] = []
        self._always: Reply | None = None
        self._document: dict[str, Any] | None = None
        self._script: Callable[[Recorded], Reply] | None = None
        self.reports: list[Report] = []
        self._usage_queue: list[Reply] = []

    def reply(self, status: int = 200, body: Any = None, *, times: int = 1, **kwargs: Any) -> None:
        """Queue ``times`` identical answers, consumed one per request."""
        with self._lock:
            self._queue.extend(Reply(status, body, **kwargs) for _ in range(times))

    def reply_document(self, document: dict[str, Any], *, times: int = 1, **kwargs: Any) -> None:
        with self._lock:
            self._queue.extend(Reply.document(document, **kwargs) for _ in range(times))

    def always(self, status: int = 200, body: Any = None, **kwargs: Any) -> None:
        """Answer every request that finds the queue empty like this."""
        with self._lock:
            self._always = Reply(status, body, **kwargs)

    def always_document(self, document: dict[str, Any], **kwargs: Any) -> None:
        with self._lock:
            self._always = Reply.document(document, **kwargs)

    def script(self, answer: Callable[[Recorded], Reply]) -> None:
        """Answer every request that finds the queue empty with ``answer(request)``."""
        with self._lock:
            self._script = answer

    def publish(self, document: dict[str, Any]) -> None:
        with self._lock:
            self._document = document
            self._lock.notify_all()

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def reply_usage(self, status: int = 202, body: Any = None, *, times: int = 1, **kwargs: Any) -> None:
        """Queue ``times`` answers to usage reports (``hang=True``, ``drop=True`` work too)."""
        with self._lock:
            self._usage_queue.extend(Reply(status, body, **kwargs) for _ in range(times))

    def report_count(self) -> int:
        with self._lock:
            return len(self.reports)

    def accepted_reports(self) -> list[Any]:
        """Bodies of the reports answered with a 2xx, in arrival order."""
        with self._lock:
            return [report.body for report in self.reports if report.accepted]

    def _record_report(self, report: Report) -> Reply:
        with self._lock:
            self.reports.append(report)
            reply = (
                self._usage_queue.pop(0)
                if self._usage_queue
                else Reply(202, {"accepted": True}, headers={"Content-Type": "application/json"})
            )
            report.accepted = 200 <= reply.status < 300 and not (reply.hang or reply.hang_up)
            return reply

    def release(self) -> None:
        self.released.set()
        with self._lock:
            self._lock.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up on slow answers is what these tests do on purpose

    def _record(self, request: Recorded) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.pop(0)
            if self._script is not None:
                return self._script(request)
            return self._always

    def _answer_from_document(self, request: Recorded) -> Reply:
        wait = float(request.query["wait"]) if "wait" in request.query else 0.0
        deadline = time.monotonic() + wait
        with self._lock:
            while True:
                document = self._document
                if document is None:
                    return Reply(404, {"error": {"code": "not_found", "message": "no chain"}})
                etag = entity_tag(document)
                if request.headers.get("If-None-Match") != etag:
                    return Reply.document(document)
                left = deadline - time.monotonic()
                if not self.honour_wait or left <= 0 or self.released.is_set():
                    return Reply.not_modified(headers={"ETag": etag})
                self._lock.wait(left)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    # Headers and body go out in two writes: without this, Nagle's algorithm and delayed
    # ACKs add ~40 ms to every keep-alive answer, which slows every polling test.
    disable_nagle_algorithm = True
    server: ControlPlane

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        request = Recorded(parts.path, dict(parse_qsl(parts.query)), self.headers, time.monotonic())
        reply = self.server._record(request)
        if reply is None:
            reply = self.server._answer_from_document(request)
        self._send(reply)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if urlsplit(self.path).path != "/api/v1/chains/chat/usage":
            self._send(Reply(404, {"error": {"code": "not_found", "message": "no such path"}}))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        self._send(self.server._record_report(Report(self.path, self.headers, body, time.monotonic())))

    def _send(self, reply: Reply) -> None:
        if reply.hang_up:
            self.close_connection = True
            return
        if reply.hang:
            self.server.released.wait(30)
            self.close_connection = True
            return
        if reply.delay and self.server.released.wait(reply.delay):
            self.close_connection = True
            return
        if reply.body is None:
            body = b""
        elif isinstance(reply.body, bytes):
            body = reply.body
        elif isinstance(reply.body, str):
            body = reply.body.encode()
        else:
            body = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.status != 304:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if reply.status != 304:
            self.wfile.write(body)
        self.wfile.flush()
        if reply.drop:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    server = ControlPlane()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.daemon = True
    thread.start()
    yield server
    server.release()
    server.shutdown()
    server.server_close()


@pytest.fixture
def refused_url() -> str:
    """A local URL where nothing listens, so connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def make_client(control_plane: ControlPlane, state_dir: Path) -> Iterator[Callable[..., ChainClient]]:
    """Build clients tuned for tests (fast polls, short timeouts); all stopped at teardown."""
    clients: list[ChainClient] = []

    def build(**overrides: Any) -> ChainClient:
        options: dict[str, Any] = {
            "chain": "chat",
            "token": "s3cret",
            "registry": REGISTRY,
            "default": DEFAULT_STEPS,
            "state_dir": state_dir,
            "poll_interval": 0.05,
            "long_poll": False,
            "service": "checkout",
            "instance": "test-1",
            "timeout": 0.5,
            "max_backoff": 0.2,
            "wait_s": 5,
        }
        options.update(overrides)
        base_url = options.pop("base_url", control_plane.url)
        client = ChainClient(base_url, **options)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.stop()


@pytest.fixture
def eventually() -> Callable[..., None]:
    """Wait for a condition with a generous timeout instead of sleeping a fixed time."""

    def wait(condition: Callable[[], object], timeout: float = 5.0, message: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s {message}".strip())
            time.sleep(0.005)

    return wait


def state_file_digest(payload: dict[str, Any]) -> str:
    """The digest a state file carries: SHA-256 over the rest of it as canonical JSON."""
    rest = {key: value for key, value in payload.items() if key != "digest"}
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


@pytest.fixture
def write_state_file(state_dir: Path) -> Callable[..., Path]:
    """Write a last-known-good file as a previous run of the client would have."""

    def write(document: dict[str, Any], chain: str = "chat") -> Path:
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / "chat.json"
        payload: dict[str, Any] = {"format": "chainclient-state/2", "chain": chain, "document": document}
        payload["digest"] = state_file_digest(payload)
        path.write_text(json.dumps(payload))
        return path

    return write


@pytest.fixture
def saved_version(state_dir: Path) -> Callable[[], int | None]:
    """The version in the state file right now, or None without a readable file."""

    def read() -> int | None:
        try:
            return int(json.loads((state_dir / "chat.json").read_text())["document"]["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    return read


@pytest.fixture
def document() -> Callable[..., dict[str, Any]]:
    """``document(4, "pin_secondary", reason=...)``: a valid chain document."""
    return _make_document


@pytest.fixture
def registry() -> Registry:
    return REGISTRY


@pytest.fixture
def default_steps() -> list[Step]:
    return list(DEFAULT_STEPS)


@pytest.fixture(params=router_fixtures.ROUTER_KINDS)
def router_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a router test against ``Router`` and again against ``AsyncRouter``."""
    router_fixtures.kind = request.param
    yield request.param
    router_fixtures.kind = "sync"
