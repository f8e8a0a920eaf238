"""The ASGI read front: chain documents from the snapshot, long polls, and the Django hand-off."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import logging
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.db import connection
from django.test import Client
from django.utils import timezone

from presets import services
from presets.models import Chain, ServiceToken
from read_path.front import ReadFront

CHAT = "/api/v1/chains/chat"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]


async def call(
    app: ReadFront,
    path: str,
    headers: dict[str, str] | None = None,
    query: str = "",
    more: Sequence[tuple[bytes, bytes]] = (),
) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()] + list(more),
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }
    messages: list[dict[str, Any]] = []
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        return {}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start = messages[0]
    body = b"".join(m.get("body", b"") for m in messages[1:])
    return start["status"], dict(start["headers"]), body


def run(coro_factory) -> Any:
    """Run an async test body against a fresh front, stopping its snapshot afterwards."""

    async def main() -> Any:
        app = ReadFront(get_asgi_application())
        try:
            return await coro_factory(app)
        finally:
            await app.stop()

    return asyncio.run(main())


def auth(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def test_the_front_serves_the_same_document_as_the_django_view(read_token) -> None:
    async def body(app):
        return await call(app, "/api/v1/chains/chat", auth(read_token))

    status, headers, content = run(body)
    django = Client(headers=auth(read_token)).get("/api/v1/chains/chat")
    assert status == 200
    assert json.loads(content) == django.json()
    assert headers[b"etag"] == b'"1"'
    assert headers[b"cache-control"] == b"no-cache"
    assert headers[b"content-type"] == b"application/json"


def test_the_front_answers_304_and_the_list(read_token) -> None:
    async def body(app):
        not_modified = await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'}))
        listing = await call(app, "/api/v1/chains", auth(read_token))
        missing = await call(app, "/api/v1/chains/nope", auth(read_token))
        return not_modified, listing, missing

    not_modified, listing, missing = run(body)
    assert not_modified[0] == 304 and not_modified[2] == b""
    assert [c["name"] for c in json.loads(listing[2])["chains"]] == ["chat", "incident-summary"]
    assert missing[0] == 404
    assert json.loads(missing[2])["error"]["code"] == "not_found"


def test_a_plain_read_answers_as_the_full_path_does(read_token) -> None:
    """A token's first read takes the full path, which lets the front know its header; the
    next ones are plain reads (``ReadFront.__call__``). Both answer the same bytes."""
    tagged = auth(read_token, **{"If-None-Match": '"1"'})

    async def body(app):
        first = [await call(app, CHAT, auth(read_token)), await call(app, CHAT, tagged)]
        held = f"Bearer {read_token}".encode() in app.snapshot.tokens.by_header
        plain = [await call(app, CHAT, auth(read_token)), await call(app, CHAT, tagged)]
        weak = await call(app, CHAT, auth(read_token, **{"If-None-Match": 'W/"0", W/"1"'}))
        other = await call(app, CHAT, auth(read_token, **{"If-None-Match": '"0"'}))
        ids = [
            await call(app, CHAT, auth(read_token, **{"X-Request-ID": "trace-7f3a"})),
            await call(app, CHAT, auth(read_token, **{"X-Request-ID": "not an id"})),
        ]
        return first, held, plain, weak, other, ids

    first, held, plain, weak, other, ids = run(body)
    assert held
    for full, fast in zip(first, plain, strict=True):
        assert (fast[0], fast[2]) == (full[0], full[2])
        assert {k: v for k, v in fast[1].items() if k != b"x-request-id"} == {
            k: v for k, v in full[1].items() if k != b"x-request-id"
        }
        assert len(fast[1][b"x-request-id"]) == 32 and fast[1][b"x-request-id"] != full[1][b"x-request-id"]
    assert [answer[0] for answer in first] == [200, 304]
    assert (weak[0], other[0], other[2]) == (304, 200, first[0][2])
    assert ids[0][1][b"x-request-id"] == b"trace-7f3a"
    assert len(ids[1][1][b"x-request-id"]) == 32 and b" " not in ids[1][1][b"x-request-id"]


def test_a_token_expiring_stops_at_its_expiry_on_plain_reads() -> None:
    from tests.conftest import make_token

    token = make_token("short-lived", "read")
    ServiceToken.objects.filter(name="short-lived").update(expires_at=timezone.now() + timedelta(hours=1))

    async def body(app):
        before = [(await call(app, CHAT, auth(token)))[0] for _ in range(3)]
        with time_machine.travel(timezone.now() + timedelta(hours=2), tick=False):
            after = [(await call(app, CHAT, auth(token)))[0] for _ in range(2)]
        return before, after

    before, after = run(body)
    assert before == [200, 200, 200]
    assert after == [401, 401]


def test_with_the_reads_access_line_on_every_read_is_logged(read_token) -> None:
    reads = logging.getLogger("controlplane.access.reads")
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]

    async def body(app):
        # Set once Django has configured logging, before the front starts (it reads the
        # level then), as ACCESS_LOG_READS does.
        reads.setLevel(logging.INFO)
        reads.addHandler(handler)
        return [(await call(app, CHAT, auth(read_token)))[0] for _ in range(3)]

    try:
        statuses = run(body)
    finally:
        reads.removeHandler(handler)
        reads.setLevel(logging.WARNING)
    assert statuses == [200, 200, 200]
    assert [(line.status_code, line.path) for line in lines] == [(200, CHAT)] * 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "header,status",
    [(None, 401), ("Bearer wrong", 401), ("Basic abc", 401)],
    ids=["no-token", "unknown-token", "not-bearer"],
)
def test_reads_without_a_valid_token_are_refused_as_json(header, status) -> None:
    async def body(app):
        return await call(app, "/api/v1/chains/chat", {"Authorization": header} if header else {})

    code, headers, content = run(body)
    assert code == status
    assert json.loads(content)["error"]["code"] == "unauthorized"


def test_other_requests_are_handed_to_django(read_token) -> None:
    async def body(app):
        history = await call(app, "/api/v1/chains/chat/history", auth(read_token))
        health = await call(app, "/healthz")
        return history, health

    history, health = run(body)
    assert history[0] == 200 and json.loads(history[2])["entries"][0]["version"] == 1
    assert json.loads(health[2]) == {"status": "ok"}


def test_warm_200_and_304_run_no_sql_query(read_token, count_queries) -> None:
    async def body(app):
        await call(app, "/api/v1/chains/chat", auth(read_token))  # warms snapshot and token
        await asyncio.sleep(0)
        count_queries.clear()
        results = []
        for _ in range(20):
            results.append((await call(app, "/api/v1/chains/chat", auth(read_token)))[0])
            results.append((await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'})))[0])
        return results

    assert run(body) == [200, 304] * 20
    background = [sql for sql in count_queries if "presets_selection" in sql and "version" in sql]
    assert [sql for sql in count_queries if sql not in background] == []


@pytest.mark.parametrize("wait", ["-1", "61", "abc", ""], ids=["negative", "too-long", "text", "empty"])
def test_a_wait_out_of_range_is_a_400(read_token, wait) -> None:
    async def body(app):
        return await call(app, "/api/v1/chains/chat", auth(read_token), query=f"wait={wait}")

    status, _, content = run(body)
    assert status == 400
    error = json.loads(content)["error"]
    assert error["code"] == "validation_error" and "wait" in error["message"]


@pytest.mark.parametrize(
    ("query", "seconds"),
    [("wait=0.4", 0.4), ("wait=%30.4", 0.4), ("wait=9&wait=0.4", 0.4), ("x=1&wait=0.4", 0.4)],
    ids=["plain", "percent-encoded", "repeated: the last counts", "with another parameter"],
)
def test_the_wait_is_read_as_parse_qs_reads_it(read_token, query, seconds) -> None:
    async def body(app):
        started = time.monotonic()
        result = await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'}), query=query)
        return result[0], time.monotonic() - started

    status, elapsed = run(body)
    assert status == 304
    assert seconds - 0.05 <= elapsed < seconds + 3


def leaving_client(kind: str) -> tuple[Any, asyncio.Event]:
    """An ASGI ``receive`` that gives the GET's empty body, then ``http.disconnect`` once the
    event is set: as a coroutine (most servers) or as futures (granian)."""
    leave = asyncio.Event()
    messages = iter([{"type": "http.request", "body": b"", "more_body": False}])

    async def next_message() -> dict[str, Any]:
        for message in messages:
            return message
        await leave.wait()
        return {"type": "http.disconnect"}

    if kind == "coroutine":
        return next_message, leave
    return (lambda: asyncio.ensure_future(next_message())), leave


async def long_poll(app: ReadFront, scope: dict[str, Any], kind: str) -> int:
    """One long poll through ``app`` whose client stays (``leaving_client`` of ``kind``): the
    status it is answered."""
    receive, _ = leaving_client(kind)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.parametrize("kind", ["coroutine", "future"])
def test_a_held_long_poll_ends_when_its_client_leaves(read_token, kind) -> None:
    async def body(app):
        await call(app, CHAT, auth(read_token))  # loaded
        receive, leave = leaving_client(kind)
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "GET",
            "path": CHAT,
            "query_string": b"wait=30",
            "headers": [(b"authorization", f"Bearer {read_token}".encode()), (b"if-none-match", b'"1"')],
        }
        poll = asyncio.ensure_future(app(scope, receive, send))
        while app.snapshot.waiters < 1:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        leave.set()
        await asyncio.wait_for(poll, 5)
        return time.monotonic() - started, app.snapshot.waiters, sent

    left_in, waiters, sent = run(body)
    assert left_in < 5  # freed when the client left, not at the end of its 30 s
    assert waiters == 0
    assert sent == []  # nobody to answer


@pytest.mark.parametrize("kind", ["coroutine", "future"])
def test_answered_long_polls_leave_no_cycles_for_the_garbage_collector(read_token, kind) -> None:
    """The web process collects garbage rarely (controlplane/asgi.py: thousands of held polls):
    what a poll allocates must be freed by reference counting when it is answered. A cycle a
    poll leaves several objects a poll (a watcher built on self-referencing callbacks left 15);
    the change itself and what the process does meanwhile (its once-a-second flush, a token's
    use written in a worker thread with a connection of its own) leave up to ~150 in all, more
    on a loaded machine: hence 400 polls, and fewer objects than polls."""
    polls = 400

    async def body(app):
        await call(app, CHAT, auth(read_token))  # loaded
        scope = {
            "type": "http",
            "method": "GET",
            "path": CHAT,
            "query_string": b"wait=30",
            "headers": [
                (b"authorization", f"Bearer {read_token}".encode()),
                (b"if-none-match", b'"1"'),
                (b"x-chain-client", b"cycles/pod"),
            ],
        }

        gc.collect()
        held = [asyncio.ensure_future(long_poll(app, scope, kind)) for _ in range(polls)]
        while app.snapshot.waiters < polls:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(
            services.select_preset, chain="chat", preset="pin_secondary", actor="alice", reason="INC-1"
        )
        statuses = await asyncio.gather(*held)
        del held
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            garbage = len(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        return statuses, garbage

    statuses, garbage = run(body)
    assert statuses == [200] * polls
    assert garbage < polls  # the change itself leaves a few dozen objects; a cycle a poll would be more


def test_a_long_poll_answers_304_when_the_wait_elapses(read_token) -> None:
    async def body(app):
        started = time.monotonic()
        result = await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'}), query="wait=1")
        return result, time.monotonic() - started

    (status, _, _), elapsed = run(body)
    assert status == 304
    assert elapsed >= 0.9


def test_a_long_poll_without_if_none_match_answers_at_once(read_token) -> None:
    async def body(app):
        return await asyncio.wait_for(call(app, "/api/v1/chains/chat", auth(read_token), query="wait=30"), 5)

    assert run(body)[0] == 200


def test_an_expired_pin_is_never_served_by_the_front(read_token) -> None:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="INC-1", expires_at=timedelta(minutes=5)
    )

    async def body(app):
        first = await call(app, "/api/v1/chains/chat", auth(read_token))
        with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=True):
            later = await call(app, "/api/v1/chains/chat", auth(read_token))
        return first, later

    first, later = run(body)
    assert json.loads(first[2])["preset"] == "pin_secondary"
    document = json.loads(later[2])
    assert (document["preset"], document["version"]) == ("normal", 3)


def change_in_another_process(preset: str, delay: float) -> subprocess.Popen:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    code = (
        "import time, django; django.setup(); from presets import services; "
        f"time.sleep({delay}); "
        f"services.select_preset(chain='chat', preset={preset!r}, actor='carol', reason='from afar')"
    )
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR)


@pytest.mark.system
@pytest.mark.postgres
def test_a_waiting_request_wakes_on_a_change_made_by_another_process(read_token) -> None:
    async def body(app):
        await call(app, "/api/v1/chains/chat", auth(read_token))  # warm: LISTEN is running
        process = change_in_another_process("pin_secondary", delay=1.0)
        started = time.monotonic()
        result = await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'}), query="wait=30")
        elapsed = time.monotonic() - started
        await asyncio.get_running_loop().run_in_executor(None, process.wait)
        return result, elapsed

    (status, headers, content), elapsed = run(body)
    assert status == 200
    document = json.loads(content)
    assert (document["version"], document["preset"], document["updated_by"]) == (2, "pin_secondary", "carol")
    assert headers[b"etag"] == b'"2"'
    assert elapsed < 25  # woken by the change, not by the 30 s timeout


def test_a_repeated_header_counts_by_its_last_value_on_both_paths(read_token) -> None:
    """The plain read picks its headers out in one pass, the full path from a dict: a header
    sent twice counts by its last value on both (If-None-Match here, X-Request-ID too)."""
    stale_then_current = [(b"if-none-match", b'"0"'), (b"if-none-match", b'"1"')]
    current_then_stale = [(b"if-none-match", b'"1"'), (b"if-none-match", b'"0"')]
    ids = [(b"x-request-id", b"first-id"), (b"x-request-id", b"second-id")]

    async def body(app):
        answers = []
        for plain in (False, True):
            round_ = []
            for more in (stale_then_current, current_then_stale, ids):
                if not plain:  # unknown to the process: this read takes the full path
                    app.snapshot.tokens.by_header.clear()
                round_.append(await call(app, CHAT, auth(read_token), more=more))
                assert f"Bearer {read_token}".encode() in app.snapshot.tokens.by_header
            answers.append(round_)
        return answers

    for tagged, untagged, named in run(body):
        assert (tagged[0], untagged[0]) == (304, 200)
        assert named[1][b"x-request-id"] == b"second-id"


def test_the_front_notes_the_identity_headers_for_fleet_status(read_token) -> None:
    from audit.models import FleetInstance

    async def body(app):
        # The first read takes the full path, the second is a plain read: both note it.
        for client in ("checkout/pod-1", "checkout/pod-2"):
            identity = {"X-Chain-Client": client, "X-Chain-Applied-Version": "1"}
            await call(app, "/api/v1/chains/chat", auth(read_token, **identity))
        await app.flush_fleet()

    run(body)
    for client in ("checkout/pod-1", "checkout/pod-2"):
        instance = FleetInstance.objects.get(client=client)
        assert (instance.chain.name, instance.applied_version) == ("chat", 1)


def test_the_front_checks_the_identity_at_the_flush_and_keeps_each_versions_first_read(read_token) -> None:
    """The front notes identity headers as they come; at the flush what is not a valid
    identity is dropped, and an instance that moved to a new version between two flushes is
    recorded on it from its first read of it."""
    from audit.models import FleetInstance

    async def body(app):
        for client, version in (("no-slash", "1"), ("checkout/pod-3", "x1"), ("checkout/pod\x01", "1")):
            await call(
                app,
                "/api/v1/chains/chat",
                auth(read_token, **{"X-Chain-Client": client, "X-Chain-Applied-Version": version}),
            )
        identity = {"X-Chain-Client": "checkout/pod-4"}
        await call(app, "/api/v1/chains/chat", auth(read_token, **identity, **{"X-Chain-Applied-Version": "1"}))
        before_two = time.time()
        for _ in range(3):
            await call(app, "/api/v1/chains/chat", auth(read_token, **identity, **{"X-Chain-Applied-Version": "2"}))
        await app.flush_fleet()
        return before_two

    before_two = run(body)
    (instance,) = FleetInstance.objects.all()
    assert (instance.client, instance.applied_version) == ("checkout/pod-4", 2)
    assert before_two <= instance.version_seen_at.timestamp() < before_two + 1


def test_the_front_holds_no_note_that_can_never_be_an_identity(read_token) -> None:
    """What a read's headers could never make an identity of (no applied version, a client
    name or a version longer than the columns take) is not kept until the flush."""

    async def body(app):
        for client, version in (("checkout/pod-1", None), ("checkout/" + "x" * 300, "1"), ("checkout/p", "1" * 11)):
            identity = {"X-Chain-Client": client} | ({"X-Chain-Applied-Version": version} if version else {})
            await call(app, "/api/v1/chains/chat", auth(read_token, **identity))
        return app.fleet.take_noted()

    assert run(body) == {}


def test_a_usage_report_right_after_a_read_through_the_front_is_from_a_known_instance(read_token) -> None:
    """A usage report is evidence only from an instance fleet status knows: one that read the
    chain through the front a moment ago counts, before the front's once-a-second flush."""
    from audit.usage import known_instance

    async def body(app):
        identity = {"X-Chain-Client": "checkout/pod-5", "X-Chain-Applied-Version": "1"}
        await call(app, "/api/v1/chains/chat", auth(read_token, **identity))

    run(body)  # no flush: the front's notes are still only in memory
    chat = Chain.objects.get(name="chat")
    assert known_instance(chain=chat, client="checkout/pod-5", now=timezone.now()) is not None
    assert known_instance(chain=chat, client="checkout/pod-6", now=timezone.now()) is None


@pytest.mark.slow
def test_a_long_poll_held_on_a_pin_answers_with_the_revert_at_its_expiry(read_token) -> None:
    """Slow on purpose: the poll is held on the real clock until the pin's expiry (1.5 s), as
    what is tested is that the held poll itself wakes at the expiry, with no worker running."""
    pinned = services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="INC-1", expires_at=timedelta(minutes=5)
    )
    # No worker runs: the held poll itself must revert the pin at its expiry, and answer then
    # with the revert, not wait for a version after it.
    selection = type(pinned).objects.get(pk=pinned.pk)
    selection.expires_at = timezone.now() + timedelta(seconds=1.5)
    selection.save(update_fields=["expires_at"])

    async def body(app):
        warm = await call(app, "/api/v1/chains/chat", auth(read_token))
        etag = dict(warm[1])[b"etag"].decode()
        started = time.monotonic()
        result = await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": etag}), query="wait=30")
        return result, time.monotonic() - started

    (status, _, content), elapsed = run(body)
    assert status == 200
    document = json.loads(content)
    assert (document["preset"], document["version"], document["is_default"]) == ("normal", 3, True)
    assert 1.0 <= elapsed < 5  # at the expiry (1.5 s), not after the 30 s wait


def test_the_front_records_a_held_long_poll_as_it_arrives(read_token) -> None:
    from audit.models import FleetInstance
    from read_path.snapshot import in_worker_thread

    async def body(app):
        held = asyncio.ensure_future(
            call(
                app,
                "/api/v1/chains/chat",
                auth(
                    read_token,
                    **{"If-None-Match": '"1"', "X-Chain-Client": "checkout/pod-2", "X-Chain-Applied-Version": "1"},
                ),
                query="wait=30",
            )
        )
        await asyncio.sleep(0.3)
        await app.flush_fleet()
        recorded = await in_worker_thread(
            lambda: list(FleetInstance.objects.values_list("client", "applied_version"))
        )()
        held.cancel()
        return recorded

    assert run(body) == [("checkout/pod-2", 1)]


def test_documents_carry_the_epoch_and_their_etag_changes_when_it_is_raised(read_token) -> None:
    async def body(app):
        return await call(app, "/api/v1/chains/chat", auth(read_token))

    status, headers, content = run(body)
    assert (status, headers[b"etag"], json.loads(content)["epoch"]) == (200, b'"1"', 0)
    epoch = services.raise_epoch(actor="ops", reason="restored from last night's backup")

    async def after(app):
        return (
            await call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'})),
            await call(app, "/api/v1/chains", auth(read_token)),
        )

    (status, headers, content), listing = run(after)
    assert status == 200  # a client holding v1 of epoch 0 gets the document again
    assert headers[b"etag"] == f'"{epoch}.1"'.encode()
    assert (json.loads(content)["epoch"], json.loads(content)["version"]) == (epoch, 1)
    assert {c["epoch"] for c in json.loads(listing[2])["chains"]} == {epoch}


def test_long_polls_past_the_bound_are_answered_at_once_and_counted(read_token) -> None:
    """LONG_POLL_MAX_HELD: held polls never take the capacity writes and pages need."""
    from read_path import counters
    from tests.metrics_text import value
    from tests.test_metrics import scrape

    def not_held_total() -> float:
        return value(scrape(), "controlplane_long_polls_not_held_total") or 0.0

    async def body(app):
        app.max_held = 2
        poll = auth(read_token, **{"If-None-Match": '"1"'})
        held = [asyncio.ensure_future(call(app, "/api/v1/chains/chat", poll, query="wait=30")) for _ in range(2)]
        while app.snapshot.waiters < 2:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        over = await call(app, "/api/v1/chains/chat", poll, query="wait=30")
        answered_in = time.monotonic() - started
        not_held = app._not_held
        for task in held:
            task.cancel()
        return over[0], answered_in, not_held, [task.done() for task in held]

    counters.flush_front(waiters=0)
    before = not_held_total()
    status, answered_in, not_held, _ = run(body)
    assert status == 304 and answered_in < 25  # answered, not held for its 30 s
    assert not_held == 1
    counters.flush_front(waiters=0, not_held=not_held)
    assert not_held_total() - before == 1


def test_a_held_long_poll_keeps_little_of_its_own(read_token) -> None:
    """Memory per held poll is the fleet issue's bar (<= 20 KB at the peak, granian's share
    included, bench/long_polls.py): what the front's own code keeps for each poll it holds is
    measured here, allocations by read_path's lines only. A held poll keeps no copy of its
    request's headers and nothing of the plain-read attempt: 3.7 KB a poll, where it was 4.4 KB
    when it kept both."""
    polls = 1000

    async def body(app):
        await call(app, CHAT, auth(read_token))  # loaded

        def scope() -> dict[str, Any]:  # one of its own a poll, as a server makes it
            return {
                "type": "http",
                "method": "GET",
                "path": CHAT,
                "query_string": b"wait=30",
                "headers": [
                    (b"host", b"127.0.0.1:8000"),
                    (b"accept-encoding", b"identity"),
                    (b"authorization", f"Bearer {read_token}".encode()),
                    (b"if-none-match", b'"1"'),
                    (b"x-chain-client", b"memory/pod-1"),
                    (b"x-chain-applied-version", b"1"),
                ],
            }

        gc.collect()
        tracemalloc.start(8)
        try:
            before = tracemalloc.take_snapshot()
            # Each poll starts from an empty context, as a server's request task starts from
            # the server's: a context the suite's earlier tests filled makes the front's one
            # ContextVar.set (its request id) copy theirs, some 300 bytes a poll more in CI.
            loop = asyncio.get_running_loop()
            held = [
                loop.create_task(long_poll(app, scope(), "future"), context=contextvars.Context()) for _ in range(polls)
            ]
            while app.snapshot.waiters < polls:
                await asyncio.sleep(0.01)
            during = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        ours = [
            stat.size_diff
            for stat in during.compare_to(before, "traceback")
            if any(os.sep + "read_path" + os.sep in frame.filename for frame in stat.traceback)
        ]
        for poll_task in held:
            poll_task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        return sum(ours) / polls

    per_poll = run(body)
    assert 1000 < per_poll <= 4000, per_poll  # bytes a held poll; above 1000: something was measured
