"""A change answers its caller first, then the fleet long-polling the chain it changed.

The production web process (granian, one worker) holds 1,500 long polls on ``chat``; then
``chat`` itself is changed through the API. The web process that made the change also answers
its held polls, each a task on its event loop: woken all at once they queued ahead of the
change's own answer, so the on-call's confirm (or a runbook's POST) waited for the whole fleet
(1.1-2.5 s with 10,000 polls). Now the polls are woken a batch per turn of the loop, and the
change's answer goes out between two batches.

The test compares orders, not durations: one event loop here receives every answer, and the
change's must arrive before most of the polls' answers. bench/long_polls.py measures the
times at 10,000 polls (bench/README.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from tests import servers
from tests.servers import Stack, get, held_polls, running_stack, wait_for

HELD = 1500


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    servers.require_tools("the change-answers-first test")
    with running_stack("answersfirst") as stack:
        yield stack


async def _exchange(host: str, port: int, request: bytes, opened: asyncio.Event | None = None) -> tuple[int, float]:
    """Send one HTTP/1.1 request on a connection of its own; its status and when its answer's
    head arrived (this loop's clock)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        if opened is not None:
            opened.set()
        head = await reader.readuntil(b"\r\n\r\n")
        arrived = time.monotonic()
        return int(head.split(b" ", 2)[1]), arrived
    finally:
        writer.close()


def test_the_change_is_answered_before_most_of_the_fleet_it_wakes(stack: Stack) -> None:
    status, headers, body = get(stack, "/api/v1/chains/chat", token=stack.read_token)
    assert status == 200, body
    host, port_text = stack.url.removeprefix("http://").split(":")
    port = int(port_text)
    poll = (
        f"GET /api/v1/chains/chat?wait=55 HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {stack.read_token}\r\nIf-None-Match: {headers['etag']}\r\n"
        "X-Chain-Client: answers-first/pod-{n}\r\nX-Chain-Applied-Version: 1\r\n\r\n"
    )
    change_body = json.dumps({"preset": "pin_secondary", "reason": "answers first"}).encode()
    change = (
        f"POST /api/v1/chains/chat/select HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {stack.write_token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(change_body)}\r\nConnection: close\r\n\r\n"
    ).encode() + change_body

    async def run() -> tuple[list[tuple[int, float]], tuple[int, float]]:
        polls = []
        for n in range(HELD):
            polls.append(asyncio.ensure_future(_exchange(host, port, poll.format(n=n).encode())))
            if n % 100 == 99:
                await asyncio.sleep(0)  # let the connections open as they go
        held = await asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_for(lambda: held_polls(stack) == HELD, 60)
        )
        assert held, f"{held_polls(stack)} of {HELD} long polls held"
        answered = await _exchange(host, port, change)
        return list(await asyncio.gather(*polls)), answered

    polls, (change_status, change_arrived) = asyncio.run(run())
    assert change_status == 200
    assert all(status == 200 for status, _ in polls), {status for status, _ in polls}
    before = sum(1 for _, arrived in polls if arrived < change_arrived)
    # Woken all at once, every poll of the worker was answered before the change (1,500 of
    # 1,500); a batch at a time, the change goes out within the first few batches.
    assert before < HELD // 2, f"{before} of {HELD} polls were answered before the change itself"
