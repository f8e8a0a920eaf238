"""Read-your-writes: a read with ``?min_version=N`` never answers older than N, whichever web
process answers it.

The production web process with two workers (as ``make serve`` runs it) on a disposable
PostgreSQL cluster. Each web process keeps its own snapshot of the chains, brought up to date
by the change's notification a few milliseconds after the commit; a read sent right after a
change's 2xx, to the other process, could answer the previous version (seen 3 times in 200).
With ``min_version`` the read waits for that version (or reads the database), so a runbook
that changes and then reads acts on what it changed.

Slow by nature: 1,000 changes, each followed by a read on a new connection (so the kernel
spreads them over both processes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import Stack, get, request, require_tools, running_stack

PAIRS = 1000


@pytest.fixture(scope="module", autouse=True)
def _needs_the_tools() -> None:
    require_tools("read-your-writes tests")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("ryw", workers=2) as stack:
        yield stack


def _change(stack: Stack, n: int) -> dict[str, Any]:
    if n % 2 == 0:
        path, body = "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": f"pair {n}"}
    else:
        path, body = "/api/v1/chains/chat/revert", {"reason": f"pair {n}"}
    status, headers, answer = request(stack, "POST", path, token=stack.write_token, body=body)
    assert status == 200, answer
    document: dict[str, Any] = json.loads(answer)
    assert headers["etag"] == f'"{document["version"]}"'
    return document


def test_a_read_with_min_version_never_answers_older_than_the_change_across_workers(stack: Stack) -> None:
    stale = []
    for n in range(PAIRS):
        changed = _change(stack, n)
        status, _, body = get(stack, f"/api/v1/chains/chat?min_version={changed['version']}", token=stack.read_token)
        assert status == 200, body
        read = json.loads(body)
        if read["version"] < changed["version"]:
            stale.append((changed["version"], read["version"]))
        else:
            assert read["version"] == changed["version"]  # nobody else changes chat here
            assert read["preset"] == changed["preset"]
    assert stale == [], f"{len(stale)} of {PAIRS} reads answered older than the change they followed"


def test_the_etag_form_and_a_session_read_keep_the_same_promise(stack: Stack) -> None:
    changed = _change(stack, 0)
    status, headers, body = get(
        stack, "/api/v1/chains/chat?min_version=%220.{}%22".format(changed["version"]), token=stack.read_token
    )
    assert status == 200 and json.loads(body)["version"] == changed["version"], body
    status, _, body = get(stack, f"/api/v1/chains/chat?min_version={changed['version']}", session=True)
    assert status == 200 and json.loads(body)["version"] == changed["version"], body
    # A long poll may carry it too: the version it needs is already there, so it answers at once.
    status, _, body = get(stack, f"/api/v1/chains/chat?min_version={changed['version']}&wait=0", token=stack.read_token)
    assert status == 200, body


@pytest.mark.parametrize("reader", ["token", "session"], ids=["read_front", "django"])
def test_a_version_no_change_made_is_refused_with_409_saying_where_the_chain_is(stack: Stack, reader: str) -> None:
    current = json.loads(get(stack, "/api/v1/chains/chat", token=stack.read_token)[2])["version"]
    auth: dict[str, Any] = {"token": stack.read_token} if reader == "token" else {"session": True}
    status, _, body = get(stack, f"/api/v1/chains/chat?min_version={current + 50}", **auth)
    assert status == 409, body
    error = json.loads(body)["error"]
    assert error["code"] == "conflict"
    assert f"at v{current}" in error["message"] and f"no v{current + 50}" in error["message"]
    assert error["details"]["version"] == current


@pytest.mark.parametrize(
    "raw", ["abc", "-3", "1.2.3", "", "v8"], ids=["word", "negative", "two_dots", "empty", "prefixed"]
)
def test_a_malformed_min_version_is_a_400_that_says_what_to_send(stack: Stack, raw: str) -> None:
    for auth in ({"token": stack.read_token}, {"session": True}):
        status, _, body = get(stack, f"/api/v1/chains/chat?min_version={raw}", **auth)
        assert status == 400, (auth, body)
        error = json.loads(body)["error"]
        assert "min_version" in error["message"] and "e.g. 8" in error["message"], error
