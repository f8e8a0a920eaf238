"""The production web process's Django handler (controlplane/asgi_handler.py): the synchronous
middleware chain and the view in one thread per request, a thread kept for the next one."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from django.core.signals import request_finished, request_started

from controlplane import asgi_handler
from controlplane.asgi_handler import OneHopASGIHandler
from presets import events, services
from presets.models import Selection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]


def scope(path: str, token: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }


async def post(
    app: OneHopASGIHandler, path: str, token: str, payload: dict[str, Any], *, leave: asyncio.Event | None = None
) -> tuple[int, Any]:
    """POST ``payload``; with ``leave``, the client disconnects when it is set."""
    body = json.dumps(payload).encode()
    sent_body = False
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await (leave or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope(path, token, body), receive, send)
    if not messages:
        return 0, None
    return messages[0]["status"], json.loads(b"".join(m.get("body", b"") for m in messages[1:]))


def test_a_select_runs_in_one_thread_and_the_next_request_reuses_it(write_token) -> None:
    threads: list[tuple[str, int]] = []

    def seen(step: str):
        def receiver(**kwargs: Any) -> None:
            threads.append((step, threading.get_ident()))

        return receiver

    receivers = {name: seen(name) for name in ("started", "changed", "finished")}
    request_started.connect(receivers["started"])
    events.selection_changed.connect(receivers["changed"])
    request_finished.connect(receivers["finished"])
    try:

        async def main() -> list[tuple[int, Any]]:
            app = OneHopASGIHandler()
            select = await post(
                app, "/api/v1/chains/chat/select", write_token, {"preset": "pin_secondary", "reason": "a"}
            )
            revert = await post(app, "/api/v1/chains/chat/revert", write_token, {"reason": "b"})
            return [select, revert]

        (select_status, document), (revert_status, reverted) = asyncio.run(main())
    finally:
        request_started.disconnect(receivers["started"])
        events.selection_changed.disconnect(receivers["changed"])
        request_finished.disconnect(receivers["finished"])

    assert (select_status, document["preset"], document["version"]) == (200, "pin_secondary", 2)
    assert (revert_status, reverted["preset"], reverted["version"]) == (200, "normal", 3)
    assert Selection.history.filter(chain__name="chat").count() == 3
    steps = [step for step, _ in threads]
    assert steps == ["started", "changed", "finished"] * 2
    # One thread did both requests' work (started, the view's change, the closing), and it is
    # not the event loop's.
    assert len({ident for _, ident in threads}) == 1
    assert threads[0][1] != threading.get_ident()


def test_a_client_that_leaves_during_a_change_gets_nothing_and_the_change_stands(write_token, monkeypatch) -> None:
    entered, release = threading.Event(), threading.Event()
    select_preset = services.select_preset

    def slow_select(**kwargs: Any) -> Selection:
        entered.set()
        release.wait(10)
        return select_preset(**kwargs)

    monkeypatch.setattr(services, "select_preset", slow_select)

    async def main() -> tuple[int, bool, int, int]:
        app = OneHopASGIHandler()
        leave = asyncio.Event()
        request = asyncio.ensure_future(
            post(
                app, "/api/v1/chains/chat/select", write_token, {"preset": "pin_secondary", "reason": "a"}, leave=leave
            )
        )
        await asyncio.to_thread(entered.wait, 10)
        leave.set()  # the client goes while the view runs
        await asyncio.sleep(0.1)
        answered_while_running = request.done()  # the thread is not handed on while it runs
        release.set()
        status, _ = await request
        kept = len(app._idle)
        after = await post(app, "/api/v1/chains/chat/revert", write_token, {"reason": "b"})
        return status, answered_while_running, kept, after[0]

    status, answered_while_running, kept, revert_status = asyncio.run(main())
    assert status == 0  # nothing was sent to a client that left
    assert not answered_while_running
    assert kept == 1
    assert revert_status == 200  # the kept thread serves the next request
    assert [e.action for e in Selection.history.filter(chain__name="chat").order_by("version")] == [
        "sync",
        "select",
        "revert",
    ]


def test_idle_threads_are_capped(write_token, monkeypatch) -> None:
    monkeypatch.setattr(asgi_handler, "IDLE_THREADS_MAX", 1)

    async def main() -> int:
        app = OneHopASGIHandler()
        await asyncio.gather(
            post(app, "/api/v1/chains/chat/select", write_token, {"preset": "pin_secondary", "reason": "a"}),
            post(app, "/api/v1/chains/incident-summary/select", write_token, {"preset": "local_only", "reason": "b"}),
        )
        await asyncio.sleep(0.2)
        return len(app._idle)

    assert asyncio.run(main()) == 1
