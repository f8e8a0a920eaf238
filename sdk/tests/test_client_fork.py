"""A client survives ``fork()`` (gunicorn --preload, Celery prefork): the child polls and
reports as itself, with threads and connections of its own, and the parent carries on."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from conftest import ControlPlane

from chainclient import ChainClient
from chainclient.drills import DrillRequest
from chainclient.types import Drill

pytestmark = [
    pytest.mark.system,  # each test forks a process
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns about forking a process with threads: forking one is the point.
    pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning"),
]

# Generous bounds: a noisy 2-core machine can stall a process for seconds.
CHILD_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 60.0


def in_child(check: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Fork; the child runs ``check`` and writes its result (or its error) as JSON to a pipe,
    then exits without ever returning into pytest. Returns the child's pid and the pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_fd)
            result = check()
            status = 0
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        try:
            with os.fdopen(write_fd, "w") as pipe:
                json.dump(result, pipe)
        finally:
            os._exit(status)
    os.close(write_fd)
    return pid, read_fd


def child_result(pid: int, read_fd: int) -> dict[str, Any]:
    """What the child wrote, once it has exited; the child is killed if it takes too long."""
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    data = b""
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([pipe], [], [], max(0.0, left))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"the forked child gave no result within {RESULT_TIMEOUT_S}s")
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            data += chunk
    _, status = os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(data) if data else {"error": "no result"}
    assert "error" not in result, result.get("traceback", result["error"])
    assert os.waitstatus_to_exitcode(status) == 0
    return result


def wait_for(condition: Callable[[], object], what: str) -> None:
    """The ``eventually`` fixture's loop, for the child (which reports instead of raising late)."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {CHILD_TIMEOUT_S}s")
        time.sleep(0.01)


def threads_named(name: str) -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == name)


def polled_as(control_plane: ControlPlane, client_id: str) -> int:
    return sum(1 for request in list(control_plane.requests) if request.headers.get("X-Chain-Client") == client_id)


def reported(control_plane: ControlPlane, client_id: str) -> list[dict[str, int]]:
    """Requests per provider in each accepted report from ``client_id``."""
    return [
        {provider: usage["requests"] for provider, usage in body["providers"].items()}
        for body in control_plane.accepted_reports()
        if body["client"] == client_id
    ]


def test_a_forked_child_polls_as_itself_and_applies_what_is_published_after_the_fork(
    make_client, control_plane, eventually, document
):
    control_plane.publish(document(1))
    # The default instance, {hostname}-{pid}; reports a minute apart, so none is due here.
    client = make_client(instance=None, long_poll=True, wait_s=5, usage_interval=60, timeout=5).start()
    eventually(lambda: client.current().version == 1, timeout=RESULT_TIMEOUT_S)
    eventually(lambda: control_plane.count() >= 2, timeout=RESULT_TIMEOUT_S)  # a long poll is held
    for _ in range(5):
        client.record_served("vendor_a")
    assert client.health()["unreported_requests"] == 5
    parents_connections = (client._poller.worker.connection, client._usage.worker.connection)
    hostname, parent = socket.gethostname(), os.getpid()

    def child() -> dict[str, Any]:
        wait_for(lambda: client.health()["running"], "the child's poller running")
        worker, reporter = client._poller.worker, client._usage.worker
        started = {
            "unreported_at_fork": client.health()["unreported_requests"],
            "fresh_connections": worker.connection is not parents_connections[0]
            and reporter.connection is not parents_connections[1],
        }
        client.after_fork()  # already done by the fork hook: nothing more happens
        started["threads"] = [threads_named("chainclient-chat"), threads_named("chainclient-chat-usage")]
        started["same_threads"] = client._poller.worker is worker and client._usage.worker is reporter
        wait_for(lambda: client.current().version == 2, "v2 in the child")
        client.record_served("vendor_b")
        client.record_served("vendor_b")
        client.stop(timeout=10)  # sends the child's last report
        return started

    pid, pipe = in_child(child)
    control_plane.publish(document(2, "pin_secondary"))
    result = child_result(pid, pipe)

    assert result == {
        "unreported_at_fork": 0,
        "fresh_connections": True,
        "threads": [1, 1],
        "same_threads": True,
    }
    assert polled_as(control_plane, f"checkout/{hostname}-{pid}") >= 1
    assert reported(control_plane, f"checkout/{hostname}-{pid}") == [{"vendor_b": 2}]
    # The parent carries on as itself, and reports only what it served itself.
    eventually(lambda: client.current().version == 2, timeout=RESULT_TIMEOUT_S)
    control_plane.publish(document(3))
    eventually(lambda: client.current().version == 3, timeout=RESULT_TIMEOUT_S)
    assert client.health()["running"] is True
    assert client.health()["unreported_requests"] == 5
    client.stop(timeout=10)
    assert reported(control_plane, f"checkout/{hostname}-{parent}") == [{"vendor_a": 5}]


def test_locks_held_by_the_parent_at_the_fork_do_not_block_the_child(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    client = make_client(long_poll=True, wait_s=5, timeout=5).start()
    eventually(lambda: client.current().version == 1, timeout=RESULT_TIMEOUT_S)
    # As if the parent's threads were saving the state file (under the applier's lock),
    # counting a poll, recording a request and starting up at the instant of the fork.
    held = [client._poller._applier._lock, client._stats._lock, client._usage._lock, client._lifecycle_lock]

    def child() -> dict[str, Any]:
        wait_for(lambda: client.current().version == 2, "v2 in the child")
        client.record_served("vendor_a")
        health = client.health()
        client.stop(timeout=10)
        return {"unreported": health["unreported_requests"], "changes": health["changes"]}

    with contextlib.ExitStack() as stack:
        for lock in held:
            stack.enter_context(lock)
        pid, pipe = in_child(child)
    control_plane.publish(document(2))
    result = child_result(pid, pipe)

    assert result == {"unreported": 1, "changes": 2}
    eventually(lambda: client.current().version == 2, timeout=RESULT_TIMEOUT_S)


def test_an_explicit_instance_keeps_its_name_and_an_unstarted_client_stays_unstarted_in_the_child(
    make_client, control_plane, document
):
    control_plane.publish(document(4))
    client = make_client(instance="web-1")  # never started in the parent

    def child() -> dict[str, Any]:
        running_at_fork = client.health()["running"]
        client.start()
        wait_for(lambda: client.current().version == 4, "v4 in the child")
        client.stop(timeout=10)
        return {"running_at_fork": running_at_fork}

    pid, pipe = in_child(child)
    result = child_result(pid, pipe)

    assert result == {"running_at_fork": False}
    assert control_plane.count() >= 1
    assert polled_as(control_plane, "checkout/web-1") == control_plane.count()  # only the child polled
    assert client.health()["running"] is False


def test_a_forked_child_reports_no_drill_counts_of_its_parent(make_client, control_plane, document):
    control_plane.publish(document(1))
    client = make_client(usage_interval=60)  # never started: nothing is sent in either process
    drill = Drill(7, 1, "server_error", 1000, (), "2026-12-06T07:00:00Z", "2026-12-06T07:15:00Z")
    client.record_drill(drill, DrillRequest(True, 2, None, 1, 0, 0.05))

    def child() -> dict[str, Any]:
        pending = client._usage.drills.pending()
        client.record_drill(drill, DrillRequest(False, None, None, 0, 0, 0.05))
        return {"pending": pending, "counted": client._usage.drills.take(7).requests}

    pid, pipe = in_child(child)
    result = child_result(pid, pipe)

    assert result == {"pending": [], "counted": 1}
    assert client._usage.drills.take(7).drilled == 1  # the parent's own, still to report


def test_after_fork_does_nothing_in_the_process_that_built_the_client(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    client = make_client(instance=None, usage_interval=60).start()
    eventually(lambda: client.current().version == 1)
    client.record_served("vendor_a")
    worker = client._poller.worker

    client.after_fork()

    assert client._poller.worker is worker
    assert client.health()["running"] is True
    assert client.health()["unreported_requests"] == 1
    polls = control_plane.count()
    eventually(lambda: control_plane.count() > polls)
    assert control_plane.requests[-1].headers["X-Chain-Client"] == f"checkout/{socket.gethostname()}-{os.getpid()}"


def test_the_fork_hook_does_not_keep_a_client_alive(control_plane, registry, default_steps):
    client = ChainClient(control_plane.url, chain="chat", token="t", registry=registry, default=default_steps)
    collected = weakref.ref(client)

    del client
    gc.collect()

    assert collected() is None
