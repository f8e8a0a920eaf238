"""The real chainclient SDK against a real running control plane."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from chainclient import AsyncRouter, ChainClient, Contract, Provider, ProviderError, Registry, Step
from presets.registry import PROVIDERS
from tests.servers import granian

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

# The service's own compiled-in registry: here, the same providers the control plane knows.
REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000), Step("self_hosted", "8b", 10000)]

WEB_WORKERS = 2  # production_server's granian, as make serve runs it


def follow(url: str, token: str, **options: Any) -> ChainClient:
    """A client of the example presets' ``chat`` chain with the services' registry."""
    return ChainClient(url, **{"chain": "chat", "token": token, "registry": REGISTRY, "default": DEFAULT, **options})


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def select(base_url: str, token: str, preset: str, reason: str) -> dict:
    request = urllib.request.Request(
        f"{base_url}/api/v1/chains/chat/select",
        data=json.dumps({"preset": preset, "reason": reason}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_a_select_reaches_a_polling_sdk_within_the_poll_interval(
    live_server, read_token, write_token, tmp_path: Path
) -> None:
    poll_interval = 1.0
    client = follow(
        live_server.url,
        read_token,
        state_dir=tmp_path,
        poll_interval=poll_interval,
        long_poll=False,
        service="integration",
    )
    with client:
        assert wait_for(lambda: client.current().source == "live", 5)
        assert client.current().version == 1
        changed_at = time.monotonic()
        select(live_server.url, write_token, "pin_secondary", "INC-7 vendor_a degraded")
        assert wait_for(lambda: client.current().version == 2, poll_interval + 1.0 + 1.0)
        applied_after = time.monotonic() - changed_at
    document = client.current()
    assert (document.preset, document.updated_by, document.reason) == (
        "pin_secondary",
        "token:deployer",
        "INC-7 vendor_a degraded",
    )
    assert document.chain[0] == Step("vendor_b", "large", 20000)
    assert applied_after <= poll_interval + 1.0 + 1.0  # the bar is interval + 1 s; 1 s of slack for a noisy CI
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert json.dumps(saved).count('"pin_secondary"') >= 1
    assert saved.get("version", saved.get("document", {}).get("version")) == 2


def test_a_restarted_sdk_starts_from_its_last_known_good_file_while_the_server_is_down(
    live_server, read_token, write_token, tmp_path: Path
) -> None:
    select(live_server.url, write_token, "local_only", "both vendors down")
    with follow(
        live_server.url,
        read_token,
        state_dir=tmp_path,
        poll_interval=0.2,
        long_poll=False,
    ) as client:
        assert wait_for(lambda: client.current().version == 2, 5)
    # The control plane is gone: a port where nothing listens.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    restarted = follow(
        dead_url,
        read_token,
        state_dir=tmp_path,
        poll_interval=0.2,
        long_poll=False,
    )
    with restarted:
        document = restarted.current()
        assert (document.source, document.version, document.preset) == ("disk", 2, "local_only")
        assert document.marking["degraded"] is True
        time.sleep(0.5)  # several failed polls: nothing changes
        assert restarted.current() is document


@pytest.fixture
def production_server(write_token) -> Iterator[str]:
    """The production web process (granian, 2 workers) on the test database, once each of its
    workers has started its app.

    One answer to /healthz comes from the first worker up while the other may still be loading
    the app; a granian worker that gets SIGTERM then never stops (it has no handler for it
    yet), so the teardown would time out and leave it holding the test database. A worker
    listens for changes on a channel of its own (``LISTEN listen_check_<pid>_...``) once its
    app has started: those are counted."""
    db = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        [(asked_at,)] = cursor.fetchall()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        granian(port, workers=WEB_WORKERS),
        cwd=settings.BASE_DIR,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _up(url), 30), "the web process did not start"
        assert wait_for(lambda: _listening(asked_at) >= WEB_WORKERS, 30), "not every web worker started"
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def _listening(since: Any) -> int:
    """Web worker processes started since ``since`` (each LISTENs on a channel of its own)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE 'LISTEN listen_check_%%' AND backend_start >= %s",
            [since],
        )
        [(count,)] = cursor.fetchall()
    return int(count)


def _up(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=1).read()
        return True
    except OSError:
        return False


@pytest.mark.system
@pytest.mark.postgres
def test_a_long_polling_sdk_applies_a_change_without_waiting_for_its_poll_interval(
    production_server: str, read_token, write_token, tmp_path: Path
) -> None:
    clients = [
        follow(
            production_server,
            read_token,
            state_dir=None,
            poll_interval=60.0,
            long_poll=True,
            service="integration",
            instance=f"i{n}",
        )
        for n in range(4)  # spread over both web processes
    ]
    for client in clients:
        client.start()
    try:
        assert wait_for(lambda: all(c.current().version == 1 for c in clients), 10)
        time.sleep(0.5)  # every client is now holding a long poll
        select(production_server, write_token, "drop_vendor_b", "vendor_b leaking data")
        # A 60 s poll interval: only the long poll can deliver this within the bound.
        assert wait_for(lambda: all(c.current().version == 2 for c in clients), 10)
        assert all(c.current().preset == "drop_vendor_b" for c in clients)
    finally:
        for client in clients:
            client.stop()


def test_an_async_router_on_a_live_client_routes_by_the_selected_preset_with_a_full_receipt(
    live_server, read_token, write_token
) -> None:
    async def down(step: Step, request: Any, timeout_s: float) -> str:
        raise ProviderError(503, True, "vendor down")

    async def answer(step: Step, request: Any, timeout_s: float) -> str:
        return f"{step.provider} answered"

    transports = {name: answer for name in REGISTRY}
    client = follow(live_server.url, read_token, poll_interval=0.2, long_poll=False, service="integration")
    with client:
        assert wait_for(lambda: client.current().source == "live", 5)
        router = AsyncRouter(client, transports={**transports, "vendor_b": down})  # the client's registry
        select(live_server.url, write_token, "pin_secondary", "INC-8 vendor_a degraded")
        assert wait_for(lambda: client.current().version == 2, 5)
        contract = Contract(requires={"text"}, name="chat-data")

        # A loop of its own on a thread of its own: the browser tests' Playwright keeps an
        # event loop running in the main thread while their session lasts.
        with ThreadPoolExecutor(1) as thread:
            result = thread.submit(asyncio.run, router.complete("hello", contract=contract, task_id="t")).result()

    head = client.current().chain[0]
    assert head.provider == "vendor_b"  # pin_secondary leads with vendor_b, which is down
    assert result.attempts[0].provider == "vendor_b"
    assert result.provider == result.attempts[1].provider != "vendor_b"
    assert [(a.destination, a.version, a.contract) for a in result.attempts] == [
        (PROVIDERS[a.provider].destination, 2, "'chat-data' (requires [text])") for a in result.attempts
    ]
    assert "contract 'chat-data'" in str(result)
