"""manage.py drill: start (or plan), list, report and abort failover drills on a controlled clock,
attributed to the operating-system user; each refusal one line naming the option to fix, with
nothing written."""

from __future__ import annotations

import getpass
import json
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from audit import drills as fleet_drills
from presets import drills, services
from presets.models import Drill, Selection
from tests.commands import from_a_shell, refusal, run
from tests.conftest import make_token

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 1, 0, tzinfo=UTC)
ME = f"cli:{getpass.getuser()}"
START = ["drill", "start", "chat", "--hop", "1", "--fault", "server_error", "--share", "10"]
WHAT = "hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests of every service"


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def live() -> Selection:
    return Selection.objects.select_related("drill").get(chain__name="chat")


def written() -> tuple[list[Any], int]:
    return list(Drill.objects.order_by("pk").values()), Selection.history.count()


def drill(**kw: Any) -> Drill:
    values: dict[str, Any] = {
        "chain": "chat",
        "hop": 1,
        "fault": "server_error",
        "share": 10,
        "reason": "quarterly drill",
        "actor": "alice",
    }
    return fleet_drills.start_drill(**{**values, **kw})


# --- start --------------------------------------------------------------------------------------


def test_start_starts_a_drill_as_the_operating_system_user_and_says_so_in_one_line() -> None:
    out = run(*START, "--reason", "quarterly drill")
    started = Drill.objects.get()
    assert out == (
        f"started: #{started.pk} chat running: {WHAT}; 2026-12-10T01:00:00Z to 2026-12-10T01:15:00Z (15 min) "
        f"from v2, by {ME}: quarterly drill\n"
    )
    assert started.created_by == ME
    assert live().version == 2 and live().to_document()["drill"]["id"] == started.pk
    assert live().updated_by == ME


def test_start_takes_every_option_the_api_takes() -> None:
    make_token("checkout", "read")
    make_token("search", "read")
    out = run(
        *START,
        "--services",
        "search, checkout",
        "--start",
        "2026-12-10T03:00+01:00",
        "--minutes",
        "30",
        "--repeat-days",
        "7",
        "--max-failed",
        "2",
        "--max-fallback-error-pct",
        "5.5",
        "--reason",
        "CHG-7",
        "--actor",
        "runbook:drills",
    )
    planned = Drill.objects.get()
    assert out.startswith(f"planned: #{planned.pk} chat planned: ")
    assert "of requests of checkout, search; 2026-12-10T02:00:00Z to 2026-12-10T02:30:00Z (30 min), by " in out
    assert out.endswith("runbook:drills: CHG-7; every 7 days\n")
    assert (planned.services, planned.repeat_days, planned.max_failed, planned.max_fallback_error_bp) == (
        ["checkout", "search"],
        7,
        2,
        550,
    )
    assert live().version == 1  # planned: nothing served yet


# (id, arguments after "drill", words the one line holds)
BAD = [
    ("no-hop", "start chat --fault server_error --share 10", "--hop: say it, e.g. --hop 1"),
    ("no-fault", "start chat --hop 1 --share 10", "--fault: say it, e.g. --fault server_error"),
    ("no-share", "start chat --hop 1 --fault timeout", "--share: say it, e.g. --share 10"),
    ("last-hop", "start chat --hop 3 --fault timeout --share 10", "--hop: hop 3 would leave chat nothing to fall back"),
    ("hop-not-a-number", "start chat --hop one --fault timeout --share 10", "--hop: 'one' is not a whole number"),
    ("unknown-fault", "start chat --hop 1 --fault meteor --share 10", "--fault: 'meteor' is not a fault a drill knows"),
    ("share-too-large", "start chat --hop 1 --fault timeout --share 30", "--share: 30 % is out of range"),
    ("minutes-too-long", "start chat --hop 1 --fault timeout --share 10 --minutes 90", "--minutes: 90 is out of range"),
    (
        "unknown-service",
        "start chat --hop 1 --fault timeout --share 10 --services nobody",
        "--services: no live token named nobody",
    ),
    (
        "naive-start",
        "start chat --hop 1 --fault timeout --share 10 --start 2026-12-10T02:00",
        "--start: '2026-12-10T02:00' needs a time zone",
    ),
    (
        "passed-start",
        "start chat --hop 1 --fault timeout --share 10 --start 2026-12-09T02:00Z",
        "--start: Wed 09 Dec 02:00 UTC (23 h ago) has passed; leave it out to start now",
    ),
    (
        "repeat-too-rare",
        "start chat --hop 1 --fault timeout --share 10 --repeat-days 100",
        "--repeat-days: 100 is out of range",
    ),
    (
        "fallback-pct",
        "start chat --hop 1 --fault timeout --share 10 --max-fallback-error-pct 120",
        "--max-fallback-error-pct: 120 is not a percentage",
    ),
    ("no-reason", "start chat --hop 1 --fault timeout --share 10", "--reason: is required"),
    (
        "unknown-chain",
        "start nope --hop 1 --fault timeout --share 10",
        "unknown chain 'nope': manage.py chain_status lists the chains",
    ),
    ("list-unknown-chain", "list nope", "CHAIN: unknown chain 'nope': manage.py chain_status lists the chains"),
    ("list-bad-limit", "list chat --limit 0", "--limit: must be at least 1"),
    ("report-not-a-number", "report x", "ID: 'x' is not a whole number"),
    ("report-unknown", "report {missing}", "ID: unknown drill {missing}: manage.py drill list CHAIN lists"),
    ("abort-unknown", "abort {missing}", "ID: unknown drill {missing}: manage.py drill list CHAIN lists"),
    ("abort-no-reason", "abort {id}", "--reason: is required"),
]


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_refusal_is_one_line_naming_the_option_and_writes_nothing(args: str, words: str) -> None:
    existing = drill(chain="incident-summary").pk
    ids = {"id": existing, "missing": existing + 1000}
    argv = ["drill", *shlex.split(args.format(**ids))]
    if argv[1] in ("start", "abort") and not words.startswith("--reason"):
        argv += ["--reason", "r"]
    before = written()
    message = refusal(*argv)
    assert words.format(**ids) in message, message
    assert "\n" not in message
    assert written() == before


def test_a_pinned_chain_refuses_a_drill_in_one_line_with_its_times_as_people_read_them() -> None:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="bob", reason="INC-1", expires_at=timedelta(hours=2)
    )
    before = written()
    message = refusal(*START, "--reason", "drill")
    assert message == (
        "chat: the drill cannot start now: it serves the pin pin_secondary (v2 by bob) until 03:00 UTC (in 2 h), "
        "and a drill never runs while the chain is pinned: revert the pin first, or plan the drill after it"
    )
    assert written() == before


def test_one_drill_at_a_time_names_the_other() -> None:
    other = drill()
    message = refusal(*START, "--reason", "again")
    assert message.startswith(f"chat: drill {other.pk} is running from 01:00 UTC (now) to 01:15 UTC (in 15 min)")


# --- list ---------------------------------------------------------------------------------------


def test_list_gives_the_chains_drills_latest_start_first_one_line_each() -> None:
    assert run("drill", "list", "chat") == "no drills on chat\n"
    first = drill(minutes=5)
    drills.abort_drill(drill=first.pk, actor="alice", reason="done early")
    later = drill(start=T0 + timedelta(days=1), reason="next week's")
    drill(chain="incident-summary")
    assert run("drill", "list", "chat").splitlines() == [
        f"#{later.pk} chat planned: {WHAT}; 2026-12-11T01:00:00Z to 2026-12-11T01:15:00Z (15 min), by alice: "
        "next week's",
        f"#{first.pk} chat aborted: {WHAT}; 2026-12-10T01:00:00Z to 2026-12-10T01:05:00Z (5 min) from v2, by alice: "
        "quarterly drill; aborted by alice: done early",
    ]
    assert run("drill", "list", "chat", "--limit", "1").splitlines()[0].startswith(f"#{later.pk} ")


# --- report -------------------------------------------------------------------------------------


def test_report_prints_the_report_as_the_terminal_reads_it_or_as_the_api_answers() -> None:
    running = drill()
    out = run("drill", "report", str(running.pk))
    assert out == fleet_drills.report_text(fleet_drills.report(running)) + "\n"
    assert out.startswith(f"drill {running.pk} on chat: {WHAT}\n")
    assert "verdict: running" in out
    document = json.loads(run("drill", "report", str(running.pk), "--json"))
    assert document == json.loads(json.dumps(fleet_drills.report(running)))
    assert document["verdict"] == "running" and document["version"] == 2


# --- abort --------------------------------------------------------------------------------------


def test_abort_takes_the_drill_out_of_the_document_as_the_operating_system_user() -> None:
    running = drill()
    out = run("drill", "abort", str(running.pk), "--reason", "customer demo now")
    assert out.startswith(f"aborted: #{running.pk} chat aborted: {WHAT}; ")
    assert out.endswith(f"; aborted by {ME}: customer demo now\n")
    assert "drill" not in live().to_document() and live().updated_by == ME
    again = refusal("drill", "abort", str(running.pk), "--reason", "again")
    assert again == f"ID: drill {running.pk} has already ended (aborted); nothing to abort"


def test_abort_cancels_a_planned_drill() -> None:
    planned = drill(start=T0 + timedelta(hours=2))
    out = run("drill", "abort", str(planned.pk), "--reason", "not today", "--actor", "runbook:drills")
    assert out.startswith(f"cancelled: #{planned.pk} chat aborted: ")
    assert out.endswith("; cancelled before its start by runbook:drills: not today\n")
    assert live().version == 1


def test_from_a_shell_a_refusal_is_one_line_on_stderr_and_exit_status_1(subprocess_env: dict[str, str]) -> None:
    refused = from_a_shell(subprocess_env, "drill", "abort", "999999", "--reason", "not needed")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip() == (
        "CommandError: ID: unknown drill 999999: manage.py drill list CHAIN lists a chain's drills"
    ), refused.stderr
