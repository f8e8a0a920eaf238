"""The audit export: GET /api/v1/history (NDJSON, streamed, resumable) and
manage.py export_history (NDJSON or CSV), both written by presets/history_export.py."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from audit import spend
from presets import services
from read_path.front import ReadFront, answers_itself
from tests.servers import get, require_tools, running_stack, select

pytestmark = pytest.mark.usefixtures("synced")

DAY = datetime(2030, 1, 1, tzinfo=UTC)
LATER = DAY + timedelta(days=1)  # when the exports run: every change of the story has settled
SUMMARY = "incident-summary"
# The story's changes in the export's order; the example presets were synced first (today).
EVERY_CHANGE = [
    "chat:1",
    "incident-summary:1",
    "chat:2",
    "incident-summary:2",
    "chat:3",
    "incident-summary:3",
    "chat:4",
    "chat:5",
    "chat:6",
]


def at(clock: str) -> datetime:
    hours, minutes = clock.split(":")
    return DAY.replace(hour=int(hours), minute=int(minutes))


@pytest.fixture
def story(synced: None) -> None:
    """A night on two chains (v1 of each is the sync, today):

    chat  v2 select pin_secondary by alice 02:00, v3 extend by alice 02:30, v4 revert by
          carol 03:00, v5 restore (of v4) by dave 03:30, v6 expire by system:expiry 08:00
    incident-summary  v2 select local_only by carol 02:15, v3 revert by alice 02:45
    """
    changes = [
        ("02:00", lambda: services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")),
        ("02:15", lambda: services.select_preset(chain=SUMMARY, preset="local_only", actor="carol", reason="r")),
        ("02:30", lambda: services.extend_pin(chain="chat", actor="alice", reason="still down")),
        ("02:45", lambda: services.revert_to_default(chain=SUMMARY, actor="alice", reason="fine")),
        ("03:00", lambda: services.revert_to_default(chain="chat", actor="carol", reason="looked fine")),
        ("03:30", lambda: services.restore(chain="chat", version=4, actor="dave", reason="not fine")),
        ("08:00", lambda: services.expire_pins()),
    ]
    for clock, change in changes:
        with time_machine.travel(at(clock), tick=False):
            change()


def export(client: Client, query: str = "", *, when: datetime | None = LATER) -> list[dict[str, Any]]:
    """The export's entries, read (the stream too: the spend after each change is so far) at ``when``."""
    with time_machine.travel(when, tick=False) if when is not None else contextlib.nullcontext():
        response = client.get("/api/v1/history" + query)
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "application/x-ndjson"
        assert response.streaming
        body = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in body.splitlines()]


def places(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{entry['chain_name']}:{entry['version']}" for entry in entries]


# --- the stream ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("story")
def test_the_export_is_every_change_oldest_first_as_the_per_chain_history_gives_each(reader: Client) -> None:
    lines = export(reader)
    assert places(lines) == EVERY_CHANGE
    per_chain = {
        f"{entry['chain_name']}:{entry['version']}": entry
        for name in ("chat", SUMMARY)
        for entry in reader.get(f"/api/v1/chains/{name}/history?limit=500").json()["entries"]
    }
    # The export adds the chain's spend around each change (audit.spend.around_changes).
    assert [{k: v for k, v in line.items() if k not in spend.EXPORT_COLUMNS} for line in lines] == [
        per_chain[place] for place in EVERY_CHANGE
    ]
    assert len(per_chain) == len(lines)
    assert all(list(line)[-3:] == list(spend.EXPORT_COLUMNS) for line in lines)


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("chain=incident-summary", ["incident-summary:1", "incident-summary:2", "incident-summary:3"]),
        ("actor=alice", ["chat:2", "chat:3", "incident-summary:3"]),
        ("action=revert", ["incident-summary:3", "chat:4"]),
        ("since=2030-01-01T02:30&until=2030-01-01T03:00", ["chat:3", "incident-summary:3", "chat:4"]),
        ("since=2030-01-01T03:30:00Z", ["chat:5", "chat:6"]),
        ("until=2029-12-31", ["chat:1", "incident-summary:1"]),
        ("chain=chat&actor=alice&action=extend", ["chat:3"]),
        ("actor=nobody", []),
        ("chain=&actor=", EVERY_CHANGE),
    ],
    ids=["chain", "actor", "action", "window", "since-instant", "until-day", "all-three", "none-match", "empty"],
)
def test_each_filter_narrows_the_export_as_it_does_the_history_pages(
    reader: Client, query: str, expected: list[str]
) -> None:
    assert places(export(reader, f"?{query}")) == expected


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("since=yesterday", "since", "not a date and time"),
        ("until=2030-13-01", "until", "not a date and time"),
        ("since=2030-01-02&until=2030-01-01", "until", "is before since"),
        ("chain=nope", "chain", "use one of chat, incident-summary"),
        ("action=delete", "action", "no action delete"),
        ("actor=" + "a" * 151, "actor", "at most 150 characters"),
        ("after=chat", "after", "is not CHAIN:VERSION"),
        ("after=chat:x", "after", "is not CHAIN:VERSION"),
        ("after=chat:99", "after", "the history has no chat version 99"),
        ("after=chat:0", "after", "the history has no chat version 0"),
        ("after=nope:1", "after", "the history has no nope version 1"),
        ("chian=chat", "chian", "is not a parameter of the history export"),
        ("chain=chat&chain=incident-summary", "chain", "more than once"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 40 else None,
)
def test_a_bad_parameter_is_a_400_naming_it(reader: Client, query: str, field: str, says: str) -> None:
    response = reader.get(f"/api/v1/history?{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["field"] == field
    assert error["message"].startswith(f"{field}: ") and says in error["message"], error["message"]


def test_a_client_accepting_only_ndjson_gets_its_error_as_one_json_line(reader: Client) -> None:
    response = reader.get("/api/v1/history?since=yesterday", headers={"Accept": "application/x-ndjson"})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/x-ndjson"
    assert json.loads(response.content)["error"]["details"]["field"] == "since"


def test_it_needs_credentials_and_a_viewer_may_read(viewer: Client, settings: Any) -> None:
    response = Client().get("/api/v1/history")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    settings.HISTORY_EXPORT_SETTLE_SECONDS = 0  # the example presets were synced just now
    assert places(export(viewer, when=None)) == ["chat:1", "incident-summary:1"]


def test_the_read_front_leaves_it_to_django() -> None:
    scope = {"type": "http", "method": "GET", "path": "/api/v1/history", "headers": [(b"authorization", b"Bearer x")]}
    assert not answers_itself(scope)
    assert answers_itself({**scope, "path": "/api/v1/chains"})  # the negative control


# --- resuming -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("story")
def test_resuming_after_any_entry_gives_the_rest_and_then_what_was_committed_since(reader: Client) -> None:
    first = export(reader)
    for cut, entry in enumerate(first):
        assert export(reader, f"?after={entry['chain_name']}:{entry['version']}") == first[cut + 1 :]
    resume_from = places(first)[4]
    with time_machine.travel(LATER + timedelta(hours=1), tick=False):
        services.select_preset(chain=SUMMARY, preset="local_only", actor="erin", reason="INC-2")
        services.select_preset(chain="chat", preset="pin_secondary", actor="erin", reason="INC-2")
    rest = export(reader, f"?after={resume_from}", when=LATER + timedelta(hours=2))
    combined = places(first[:5] + rest)
    assert combined == [*EVERY_CHANGE, "incident-summary:4", "chat:7"]
    assert len(set(combined)) == len(combined)
    # Filters go with the resume: the same query, and where it stopped.
    assert places(export(reader, "?chain=chat&after=chat:4", when=LATER + timedelta(hours=2))) == [
        "chat:5",
        "chat:6",
        "chat:7",
    ]


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(("settle", "gap"), [(5, False), (0, True)], ids=["settling", "without-settling"])
def test_a_change_still_committing_when_an_export_ran_comes_with_the_resume(
    reader: Client, settings: Any, settle: int, gap: bool
) -> None:
    """A change is stamped when it is made and seen when it commits. Here one is committed a
    second before the export, and one made two seconds before it commits just after it:
    without the settling time the export ends at the first, and resuming after it skips the
    second (the negative control)."""
    settings.HISTORY_EXPORT_SETTLE_SECONDS = settle
    moment = LATER + timedelta(hours=2)
    with time_machine.travel(moment - timedelta(seconds=1), tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="erin", reason="committed first")
    first = export(reader, when=moment)
    with time_machine.travel(moment - timedelta(seconds=2), tick=False):  # made earlier, committed now
        services.select_preset(chain=SUMMARY, preset="local_only", actor="carol", reason="committed late")
    last = places(first)[-1]
    rest = export(reader, f"?after={last}", when=moment + timedelta(minutes=1))
    seen = places(first + rest)
    assert ("incident-summary:4" not in seen) is gap
    if not gap:
        assert seen == [*EVERY_CHANGE, "incident-summary:4", "chat:7"]


# --- streaming, in the production ASGI application ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_under_asgi_each_batch_is_read_after_the_one_before_was_sent(read_token: str, settings: Any) -> None:
    """Not read whole and then sent: a change committed once the first chunk was sent (and
    made before the export began) is in a later chunk. Django's ASGI handler reads a plain
    iterator whole before sending anything, which would leave it out."""
    settings.HISTORY_EXPORT_SETTLE_SECONDS = 0
    settings.HISTORY_EXPORT_BATCH_ROWS = 1
    with time_machine.travel(LATER - timedelta(seconds=10), tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="before")

    def commit_a_change() -> None:
        try:
            with time_machine.travel(LATER - timedelta(seconds=5), tick=False):
                services.select_preset(chain=SUMMARY, preset="local_only", actor="carol", reason="during")
        finally:
            connection.close()

    messages: list[dict[str, Any]] = []
    requested = False

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not any(m.get("body") for m in messages):
            await sync_to_async(commit_a_change, thread_sensitive=False)()
        messages.append(message)

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        return {}

    async def main() -> None:
        app = ReadFront(get_asgi_application())
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/api/v1/history",
            "query_string": b"",
            "headers": [(b"authorization", f"Bearer {read_token}".encode()), (b"host", b"testserver")],
            "http_version": "1.1",
            "scheme": "http",
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 5000),
            "root_path": "",
        }
        try:
            await app(scope, receive, send)
        finally:
            await app.stop()

    with time_machine.travel(LATER, tick=False):
        asyncio.run(main())
    assert messages[0]["status"] == 200
    chunks = [m["body"] for m in messages[1:] if m.get("body")]
    lines = [json.loads(line) for line in b"".join(chunks).splitlines()]
    assert places(lines) == ["chat:1", "incident-summary:1", "chat:2", "incident-summary:2"]
    assert len(chunks) == 4  # one a batch of one row
    assert lines[-1]["reason"] == "during"


# --- the command --------------------------------------------------------------------------------


def run_export(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with time_machine.travel(LATER, tick=False):
        call_command("export_history", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.usefixtures("story")
def test_the_command_writes_the_api_s_lines_and_says_how_to_continue(reader: Client) -> None:
    out, err = run_export()
    with time_machine.travel(LATER, tick=False):  # read at the same moment: the spend after each change is so far
        streamed = b"".join(reader.get("/api/v1/history").streaming_content).decode()
    assert out == streamed  # the same lines, byte for byte
    assert [json.loads(line) for line in out.splitlines()] == export(reader)
    assert "exported 9 entries" in err and err.strip().endswith("to continue later: --after chat:6")
    rest, _ = run_export("--chain", "chat", "--after", "chat:3", "--since", "2030-01-01", "--until", "2030-01-01")
    assert places([json.loads(line) for line in rest.splitlines()]) == ["chat:4", "chat:5", "chat:6"]


JSON_COLUMNS = {"chain", "marking", "previous_chain"}


@pytest.mark.usefixtures("story")
def test_the_command_writes_csv_that_reads_back_as_the_entries(reader: Client, tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    _, err = run_export("--format", "csv", "--output", str(path), "--actor", "alice")
    assert f"exported 3 entries to {path}" in err
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    entries = export(reader, "?actor=alice")
    assert list(rows[0]) == list(entries[0])  # the header: the entry's fields, in order, then the spend's
    read_back = [
        {name: (json.loads(cell) if cell and name in JSON_COLUMNS else cell or None) for name, cell in row.items()}
        for row in rows
    ]
    expected = [
        {name: str(value) if isinstance(value, (int, float)) else value for name, value in entry.items()}
        for entry in entries
    ]
    assert read_back == expected
    assert [p.name for p in tmp_path.iterdir()] == ["history.csv"]  # no partial file left behind


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "xml"], "--format: 'xml' is not a format: use ndjson or csv"),
        (["--since", "yesterday"], "--since: not a date and time"),
        (["--chain", "nope"], "--chain: no chain named nope: use one of chat, incident-summary"),
        (["--action", "delete"], "--action: no action delete"),
        (["--after", "chat:99"], "--after: the history has no chat version 99"),
        (["--output", "/nonexistent/history.ndjson"], "--output: there is no directory /nonexistent"),
        (["--output", "/"], "--output: / is a directory"),
    ],
    ids=["format", "since", "chain", "action", "after", "output-directory", "output-is-directory"],
)
def test_bad_arguments_are_one_line_naming_the_option(args: list[str], says: str) -> None:
    with pytest.raises(CommandError) as refused:
        run_export(*args)
    assert str(refused.value).startswith(says), str(refused.value)
    assert "\n" not in str(refused.value)


def test_from_the_command_line_a_bad_argument_is_one_line_and_a_failure(subprocess_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "export_history", "--until", "tomorrow"],
        cwd=settings.BASE_DIR,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "CommandError: --until: not a date and time: use YYYY-MM-DDTHH:MM in UTC, e.g. 2026-11-30T02:00"
    ]


# --- the production web process -----------------------------------------------------------------


def read_chunked(url: str, path: str, token: str) -> tuple[str, list[bytes]]:
    """GET over a plain socket, HTTP/1.1: the head as text and the body's chunks as sent."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        sock.sendall(request.encode())
        stream = sock.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += stream.readline()
        chunks = []
        while size := int(stream.readline().split(b";")[0], 16):
            chunks.append(stream.read(size))
            assert stream.readline() == b"\r\n"
        return head.decode(), chunks


@pytest.mark.system
def test_the_production_web_process_streams_the_export_in_chunks() -> None:
    require_tools("the export's system test")
    env = {"HISTORY_EXPORT_SETTLE_SECONDS": "0", "HISTORY_EXPORT_BATCH_ROWS": "1"}
    with running_stack("export", env=env) as stack:
        assert select(stack, "chat", "pin_secondary")[0] == 200
        status, headers, body = get(stack, "/api/v1/history", token=stack.read_token)
        assert status == 200
        assert headers["content-type"] == "application/x-ndjson"
        assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
        assert headers["x-request-id"]
        lines = [json.loads(line) for line in body.decode().splitlines()]
        assert places(lines) == ["chat:1", "incident-summary:1", "chat:2"]
        assert lines[-1]["actor"] == "token:export-writer"

        head, chunks = read_chunked(stack.url, "/api/v1/history?after=chat:1", stack.read_token)
        assert head.startswith("HTTP/1.1 200")
        assert [json.loads(chunk) for chunk in chunks] == lines[1:]  # one chunk a batch, as read

        assert get(stack, "/api/v1/history")[0] == 401
        assert get(stack, "/api/v1/history?since=yesterday", token=stack.read_token)[0] == 400
