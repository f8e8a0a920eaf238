"""A real Celery worker with beat, on the real Redis and PostgreSQL, does the background work:
it reverts a pin when it expires and delivers the pin_expired alert to the webhook."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from audit.models import Alert
from presets import services
from presets.models import Selection

pytestmark = pytest.mark.postgres


@pytest.fixture
def start_worker(subprocess_env: dict[str, str], redis_url: str, tmp_path: Path) -> Any:
    """Start `celery -A controlplane worker --beat` on the test database and a Redis database
    of its own; stop it (its whole process group) after the test."""
    started: list[subprocess.Popen[bytes]] = []
    log_path = tmp_path / "worker.log"

    def start(**env: str) -> Path:
        with log_path.open("wb") as log:
            started.append(
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
                        "--concurrency=2",
                    ],
                    env=subprocess_env | {"CELERY_BROKER_URL": redis_url} | env,
                    cwd=settings.BASE_DIR,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log_path

    yield start
    for worker in started:
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
