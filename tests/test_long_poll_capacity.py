"""Held long polls under the production web process (granian): writes are answered while they
are held, and a client that leaves frees its poll at once, not at the end of its wait.

bench/long_polls.py measures the same at 1,000-10,000 polls; this holds a few hundred."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from tests import servers
from tests.servers import Stack, get, held_polls, running_stack, select, wait_for

HELD = 200


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    servers.require_tools("the held long polls test")
    with running_stack("capacity") as stack:
        yield stack


def hold(stack: Stack, count: int, etag: str) -> list[socket.socket]:
    """``count`` clients, each on its own connection, long-polling chat for 50 s."""
    host, port = stack.url.removeprefix("http://").split(":")
    clients = []
    for n in range(count):
        client = socket.create_connection((host, int(port)))
        client.sendall(
            (
                f"GET /api/v1/chains/chat?wait=50 HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {stack.read_token}\r\nIf-None-Match: {etag}\r\n"
                f"X-Chain-Client: capacity/pod-{n}\r\nX-Chain-Applied-Version: 1\r\n\r\n"
            ).encode()
        )
        clients.append(client)
    return clients


def test_writes_are_answered_while_polls_are_held_and_a_client_that_leaves_frees_its_poll(stack: Stack) -> None:
    status, headers, body = get(stack, "/api/v1/chains/chat", token=stack.read_token)
    assert status == 200, body
    clients = hold(stack, HELD, headers["etag"])
    try:
        assert wait_for(lambda: held_polls(stack) == HELD, 30), held_polls(stack)
        # A change to another chain is made and answered while they are held...
        status, _, body = select(stack, "incident-summary", "local_only")
        assert status == 200, body
        assert json.loads(body)["preset"] == "local_only"
        # ... and does not wake them (they wait on chat).
        assert wait_for(lambda: held_polls(stack) == HELD, 5)
    finally:
        for client in clients:
            client.close()
    # The clients left: their polls end now, not in 50 s (the gauge is written once a second).
    assert wait_for(lambda: held_polls(stack) == 0, 15), held_polls(stack)
