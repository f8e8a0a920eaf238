"""GET /metrics: chain facts from the database, reads and long polls from every web process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.core.asgi import get_asgi_application
from django.test import Client
from django.utils import timezone

from audit.alerts import sweep_stale_pins
from presets import services
from read_path import counters
from read_path.counters import prepare_multiprocess_dir
from read_path.front import ReadFront
from read_path.request_context import CHAIN_ROUTE
from tests.metrics_text import value

REASON = "INC-4411 vendor_a returns 200s with garbage"


def scrape(client: Client | None = None, **headers: str) -> str:
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def reads(text: str, status: int) -> float:
    return value(text, "controlplane_chain_read_requests_total", {"status": str(status)}) or 0.0


@pytest.mark.usefixtures("synced")
def test_each_chain_shows_its_version_whether_pinned_and_the_pin_age() -> None:
    text = scrape()
    assert value(text, "controlplane_chain_version", {"chain": "chat"}) == 1
    assert value(text, "controlplane_chain_pinned", {"chain": "chat"}) == 0
    assert value(text, "controlplane_chain_pin_age_seconds", {"chain": "chat"}) == 0

    with time_machine.travel(timezone.now().replace(microsecond=0), tick=False) as clock:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON)
        clock.shift(timedelta(minutes=10))
        services.extend_pin(chain="chat", actor="alice", reason="still broken", expires_at=timedelta(hours=6))
        clock.shift(timedelta(minutes=5))
        text = scrape()
    assert value(text, "controlplane_chain_version", {"chain": "chat"}) == 3
    assert value(text, "controlplane_chain_pinned", {"chain": "chat"}) == 1
    # The age counts from the select that started the pin, not from the extension.
    assert value(text, "controlplane_chain_pin_age_seconds", {"chain": "chat"}) == 15 * 60
    assert value(text, "controlplane_chain_version", {"chain": "incident-summary"}) == 1


@pytest.mark.usefixtures("synced")
def test_changes_expiries_and_alerts_are_counted_from_the_database(settings: Any) -> None:
    settings.PIN_ALERT_AFTER_MINUTES = 60
    with time_machine.travel(timezone.now(), tick=False) as clock:
        services.select_preset(
            chain="chat", preset="pin_secondary", actor="alice", reason=REASON, expires_at=timedelta(hours=2)
        )
        clock.shift(timedelta(minutes=90))
        assert sweep_stale_pins().raised == 1
        clock.shift(timedelta(minutes=31))
        assert services.expire_pins() == 1
        text = scrape()
    assert value(text, "controlplane_selection_changes_total", {"chain": "chat", "action": "select"}) == 1
    assert value(text, "controlplane_selection_changes_total", {"chain": "chat", "action": "expire"}) == 1
    assert (
        value(text, "controlplane_selection_changes_total", {"chain": "chat", "action": "sync"}) == 1
    )  # v1, from the presets file
    assert value(text, "controlplane_pin_expiries_total", {"chain": "chat"}) == 1
    assert value(text, "controlplane_alerts_total", {"kind": "stale_pin"}) == 1
    assert value(text, "controlplane_alerts_total", {"kind": "pin_expired"}) == 1
    assert value(text, "controlplane_alerts_open", {"kind": "stale_pin"}) is None  # resolved
    assert value(text, "controlplane_chain_pinned", {"chain": "chat"}) == 0


@pytest.mark.usefixtures("synced")
def test_reads_answered_by_django_are_counted_by_status(client: Client, bob: User) -> None:
    before = scrape()
    client.force_login(bob)
    assert client.get("/api/v1/chains/chat").status_code == 200
    assert client.get("/api/v1/chains").status_code == 200
    assert client.get("/api/v1/chains/nope").status_code == 404
    assert Client().get("/api/v1/chains/chat").status_code == 401
    after = scrape()
    assert reads(after, 200) - reads(before, 200) == 2
    assert reads(after, 404) - reads(before, 404) == 1
    assert reads(after, 401) - reads(before, 401) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("synced")
def test_reads_answered_by_the_read_front_are_counted_once_flushed(read_token: str) -> None:
    from tests.test_read_front import call

    async def main() -> None:
        app = ReadFront(get_asgi_application())
        try:
            auth = {"Authorization": f"Bearer {read_token}"}
            # The first read of a token takes the front's full path, the next ones its
            # plain reads (ReadFront.__call__): both are counted.
            assert (await call(app, "/api/v1/chains/chat", auth))[0] == 200
            assert (await call(app, "/api/v1/chains/chat", auth))[0] == 200
            assert (await call(app, "/api/v1/chains/chat", {**auth, "If-None-Match": '"1"'}))[0] == 304
            assert (await call(app, "/api/v1/chains/chat", {"Authorization": "Bearer nope"}))[0] == 401
        finally:
            await app.stop()

    def pending(status: int) -> float:
        return sum(counters.front_durations.row((CHAIN_ROUTE, "GET", status))[1:])

    counters.flush_front(waiters=0)  # what earlier tests left
    before = scrape()
    asyncio.run(main())
    assert (pending(200), pending(304), pending(401)) == (2, 1, 1)  # counted in memory on the hot path ...
    counters.flush_front(waiters=0)  # ... handed over once a second
    assert (pending(200), pending(304), pending(401)) == (0, 0, 0)
    after = scrape()
    assert reads(after, 200) - reads(before, 200) == 2
    assert reads(after, 304) - reads(before, 304) == 1
    assert reads(after, 401) - reads(before, 401) == 1


@pytest.mark.django_db
def test_long_poll_waiters_of_this_process_are_in_the_sum() -> None:
    counters.flush_front(waiters=3)
    three = value(scrape(), "controlplane_long_poll_waiters")
    counters.flush_front(waiters=5)
    five = value(scrape(), "controlplane_long_poll_waiters")
    counters.flush_front(waiters=0)
    assert three is not None and five is not None and five - three == 2


@pytest.mark.system
@pytest.mark.django_db
def test_counts_of_another_web_process_are_summed_into_the_scrape() -> None:
    """Another process writing into the same directory (as a second granian worker does)."""
    before = reads(scrape(), 418)
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'controlplane.settings'; "
        "django.setup(); from read_path import counters; "
        "[counters.front_durations.observe(('/api/v1/chains/<slug:name>', 'GET', 418), 0.001) for _ in range(4)]; "
        "counters.flush_front(waiters=0)"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": settings.PROMETHEUS_MULTIPROC_DIR}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=settings.BASE_DIR)
    assert reads(scrape(), 418) - before == 4


@pytest.mark.django_db
def test_with_a_metrics_token_a_scrape_needs_it(settings: Any) -> None:
    settings.METRICS_TOKEN = "scrape-secret"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "controlplane_chain_read_requests" in scrape(Authorization="Bearer scrape-secret")


@pytest.mark.system
def test_a_new_server_cleans_the_directory_but_siblings_and_respawns_keep_it(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / ".server").write_text("1")  # files of an earlier server run
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (directory / f"counter_{dead.pid}.db").write_bytes(b"old")
    (directory / f"counter_{os.getpid()}.db").write_bytes(b"a live process of another server")
    prepare_multiprocess_dir(str(directory))
    assert not (directory / f"counter_{dead.pid}.db").exists()
    assert (directory / f"counter_{os.getpid()}.db").exists()

    # Same server (same parent): a dead sibling's counters stay, its live gauge goes.
    (directory / f"counter_{dead.pid}.db").write_bytes(b"sibling")
    (directory / f"gauge_livesum_{dead.pid}.db").write_bytes(b"dead")
    (directory / f"gauge_livesum_{os.getpid()}.db").write_bytes(b"alive")
    prepare_multiprocess_dir(str(directory))
    assert (directory / f"counter_{dead.pid}.db").exists()
    assert not (directory / f"gauge_livesum_{dead.pid}.db").exists()
    assert (directory / f"gauge_livesum_{os.getpid()}.db").exists()
