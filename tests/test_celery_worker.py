"""A real Celery worker with beat, on the real Redis and PostgreSQL, does the background work:
it reverts a pin when it expires and delivers the pin_expired alert to the webhook; a delivery
lost with its worker is delivered by another within 30 s of the death, once."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from audit.models import Alert
from presets import services
from presets.models import Selection

pytestmark = pytest.mark.postgres


class Workers:
    """Starts `celery -A controlplane worker --beat` on the test database and a Redis database
    of its own, each with a log file of its own; calling it starts one (the environment on
    top of the test's) and returns its log's path."""

    def __init__(self, env: dict[str, str], log_dir: Path, *, concurrency: int = 2) -> None:
        self.env = env
        self.log_dir = log_dir
        self.concurrency = concurrency
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(self, **env: str) -> Path:
        log_path = self.log_dir / f"worker-{len(self.started)}.log"
        with log_path.open("wb") as log:
            self.started.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "controlplane",
                        "worker",
                        "--beat",
                        "--loglevel=info",
                        f"--concurrency={self.concurrency}",
                    ],
                    env=self.env | env,
                    cwd=settings.BASE_DIR,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log_path

    def kill(self, index: int) -> None:
        """SIGKILL one worker and every process of its session, as a host that dies would."""
        worker = self.started[index]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    def stop(self) -> None:
        for worker in self.started:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
                try:
                    worker.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait()


def wait_for(condition: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    return condition()


def test_the_worker_reverts_an_expiring_pin_within_20_s_and_delivers_the_alert(synced, start_worker, webhook) -> None:
    log = start_worker(EXPIRE_PINS_EVERY_SECONDS="1", ALERT_WEBHOOK_URL=webhook.url)
    services.select_preset(
        chain="chat",
        preset="pin_secondary",
        actor="alice",
        reason="INC-7 vendor_a returns garbage",
        expires_at=timedelta(seconds=3),
    )
    started = time.monotonic()

    def expired() -> Any:
        # Reads the table directly: the read path's own expiry must not do the worker's job.
        return Selection.history.filter(chain__name="chat", action="expire").first()

    entry = wait_for(expired, 20)
    assert entry is not None, "no expiry within 20 s; worker log:\n" + log.read_text()[-4000:]
    assert time.monotonic() - started < 20
    assert (entry.version, entry.updated_by, entry.preset.name) == (3, "system:expiry", "normal")
    assert "pin_secondary" in entry.reason and "alice" in entry.reason

    assert webhook.received.wait(15), "no webhook; worker log:\n" + log.read_text()[-4000:]
    [body] = webhook.bodies
    assert (body["kind"], body["chain"], body["version"], body["preset"]) == ("pin_expired", "chat", 3, "pin_secondary")

    def delivered() -> bool:
        alert = Alert.objects.get(kind="pin_expired")
        return alert.deliveries["webhook"]["state"] == "delivered"

    assert wait_for(delivered, 10)


class HoldingTarget:
    """A local webhook target that holds the first request it gets (it never answers it) and
    answers every later one 200 at once; records each request's event id, and when it came."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, float]] = []  # (event id, time.monotonic() it came)
        self.answered = 0
        self.first = threading.Event()
        self.done = threading.Event()
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target.requests.append((self.headers.get("X-Controlplane-Event-Id", ""), time.monotonic()))
                if len(target.requests) == 1:
                    target.first.set()
                    target.done.wait(120)
                    return  # its worker is gone by now: nobody to answer
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                target.answered += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the held connection's peer was killed

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/alerts"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def holding_target() -> Any:
    target = HoldingTarget()
    yield target
    target.close()


def test_a_delivery_lost_with_its_worker_is_delivered_by_another_within_30_s_and_once(
    synced: None, start_worker: Workers, holding_target: HoldingTarget
) -> None:
    first_log = start_worker(
        EXPIRE_PINS_EVERY_SECONDS="1",
        # Its beat sweeps for lost deliveries every second while it holds the attempt: none
        # may take the attempt over while the worker lives.
        PROVIDER_ALERTS_EVERY_SECONDS="1",
        # The attempt outlives its first lease many times over: only renewing keeps it.
        ALERT_WEBHOOK_TIMEOUT_SECONDS="60",
        ALERT_WEBHOOK_URL=holding_target.url,
    )
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="INC-7", expires_at=timedelta(seconds=2)
    )
    assert holding_target.first.wait(60), "no delivery attempt; worker log:\n" + first_log.read_text()[-4000:]
    alert = Alert.objects.get(kind="pin_expired")
    first_lease = alert.delivery_due_at
    assert first_lease is not None

    # Past the lease the attempt started with, the worker still holds it: renewed, and no
    # sweep queued the delivery again.
    assert wait_for(lambda: timezone.now() > first_lease + timedelta(seconds=3), 30)
    alert.refresh_from_db()
    assert alert.delivery_due_at is not None and alert.delivery_due_at > first_lease
    assert len(holding_target.requests) == 1, "delivered twice while the first worker lived"

    start_worker.kill(0)
    killed = time.monotonic()
    second_log = start_worker(ALERT_WEBHOOK_URL=holding_target.url)

    def arrived_again() -> bool:
        return len(holding_target.requests) >= 2

    assert wait_for(arrived_again, 40), "not delivered again; new worker's log:\n" + second_log.read_text()[-4000:]
    (first_id, _), (second_id, came) = holding_target.requests[:2]
    assert came - killed <= 30, f"delivered {came - killed:.1f} s after the worker died"
    assert first_id == second_id == alert.raised_event_id

    def delivered() -> bool:
        return Alert.objects.get(pk=alert.pk).deliveries["webhook"]["state"] == "delivered"

    assert wait_for(delivered, 10)
    alert.refresh_from_db()
    assert alert.deliveries["webhook"]["attempts"] == 1  # the lost attempt recorded nothing
    assert alert.delivery_due_at is None  # nothing left for a sweep to queue again
    assert (len(holding_target.requests), holding_target.answered) == (2, 1)
