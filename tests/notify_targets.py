"""Local receivers for the notifiers (the webhook, Slack, PagerDuty): a threaded HTTP server
per target recording every POST exactly, and the fixtures that point the settings at them.
Registered for every test module by tests/conftest.py."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

SECRET = "test-secret-for-signing-webhooks-0123456789"
ROUTING_KEY = "R0UT1NGK3Y0123456789abcdefABCDEF"
BASE = "https://cp.example.com/"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Capture:
    """A threaded HTTP server on 127.0.0.1 recording every POST exactly (path, headers, body)
    and answering with the next status in ``answers`` (200 once they run out)."""

    def __init__(self, *, port: int = 0, answers: list[int] | None = None) -> None:
        self.requests: list[Received] = []
        self.answers = list(answers or [])
        capture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                capture.requests.append(Received(self.path, dict(self.headers.items()), body))
                status = capture.answers.pop(0) if capture.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return self.base + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def capture() -> Iterator[Callable[..., Capture]]:
    """Start local receivers as the test asks; all are stopped after it."""
    started: list[Capture] = []

    def start(**kwargs: Any) -> Capture:
        started.append(Capture(**kwargs))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture
def pagerduty(settings: Any, capture: Callable[..., Capture]) -> Capture:
    server = capture()
    settings.PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.PAGERDUTY_EVENTS_URL = server.url("/v2/enqueue")
    settings.PAGERDUTY_CHANGE_EVENTS_URL = server.url("/v2/change/enqueue")
    settings.PUBLIC_BASE_URL = BASE
    return server


@pytest.fixture
def webhook_target(settings: Any, capture: Callable[..., Capture]) -> Capture:
    server = capture()
    settings.NOTIFY_WEBHOOK_URL = server.url()
    settings.NOTIFY_WEBHOOK_SECRET = SECRET
    settings.PUBLIC_BASE_URL = BASE
    return server
