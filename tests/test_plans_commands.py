"""manage.py plans: list, add, change, cancel and start a suspended plan anyway, on a controlled
clock, attributed to the operating-system user; each refusal one line naming the option to fix,
with nothing written."""

from __future__ import annotations

import getpass
import json
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from presets import plans, services
from presets.models import PlanEvent, PlannedPin, Selection
from tests.commands import from_a_shell, refusal, run

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 0, 0, tzinfo=UTC)
START = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
END = datetime(2026, 12, 10, 4, 0, tzinfo=UTC)
ME = f"cli:{getpass.getuser()}"
ADD = [
    "plans",
    "add",
    "chat",
    "--preset",
    "pin_secondary",
    "--start",
    "2026-12-10T02:00Z",
    "--end",
    "2026-12-10T04:00Z",
]
SUMMARY = "at 02:00 UTC Thu 2026-12-10: pin_secondary until 04:00 UTC, planned by {by} because {why}"


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def plan(preset: str = "pin_secondary", *, starts_at: datetime = START, ends_at: datetime = END, **kw: Any) -> int:
    return plans.plan_pin(
        chain=kw.pop("chain", "chat"),
        preset=preset,
        starts_at=starts_at,
        ends_at=ends_at,
        actor=kw.pop("actor", "alice"),
        reason=kw.pop("reason", "vendor_a maintenance"),
    ).pk


def written() -> tuple[int, int, int]:
    return PlannedPin.objects.count(), PlanEvent.objects.count(), Selection.history.count()


# --- add, list ----------------------------------------------------------------------------------


def test_add_plans_a_pin_as_the_operating_system_user_and_says_so_in_one_line() -> None:
    out = run(*ADD, "--reason", "vendor_a maintenance")
    added = PlannedPin.objects.get()
    assert out == f"planned: #{added.pk} chat planned: " + SUMMARY.format(by=ME, why="vendor_a maintenance") + "\n"
    assert (added.planned_by, added.starts_at, added.ends_at) == (ME, START, END)
    assert Selection.objects.get(chain__name="chat").version == 1  # planning serves nothing


def test_add_names_the_actor_given() -> None:
    run(*ADD, "--reason", "CHG-12", "--actor", "runbook:maintenance")
    assert PlannedPin.objects.get().planned_by == "runbook:maintenance"


def test_list_says_each_plan_holding_its_time_soonest_first_with_its_id_and_state(clock: Any) -> None:
    assert run("plans", "list") == "no plans to come\n"
    later = plan(starts_at=END + timedelta(hours=1), ends_at=END + timedelta(hours=2), reason="later")
    sooner = plan(reason="sooner")
    other = plan("local_only", chain="incident-summary", reason="other")
    gone = plan(starts_at=END + timedelta(hours=3), ends_at=END + timedelta(hours=4), reason="gone")
    plans.cancel_plan(chain="chat", plan=gone, actor="bob", reason="not needed")
    lines = run("plans", "list").splitlines()
    assert lines == [
        f"#{sooner} chat planned: " + SUMMARY.format(by="alice", why="sooner"),
        f"#{other} incident-summary planned: at 02:00 UTC Thu 2026-12-10: local_only until 04:00 UTC, "
        "planned by alice because other",
        f"#{later} chat planned: at 05:00 UTC Thu 2026-12-10: pin_secondary until 06:00 UTC, "
        "planned by alice because later",
    ]
    assert run("plans", "list", "--chain", "incident-summary").splitlines() == [lines[1]]
    listed = json.loads(run("plans", "list", "--chain", "chat", "--json"))
    assert [(p["id"], p["state"], p["reason"]) for p in listed["plans"]] == [
        (sooner, "planned", "sooner"),
        (later, "planned", "later"),
    ]
    assert listed["plans"][0] == plans.plan_entry(PlannedPin.objects.get(pk=sooner))
    assert run("plans", "list", "--chain", "incident-summary", "--json") != run("plans", "list", "--json")


def test_list_json_is_what_the_api_answers(reader: Client) -> None:
    plan()
    plan("local_only", chain="incident-summary")
    assert json.loads(run("plans", "list", "--json")) == reader.get("/api/v1/plans").json()


def test_list_says_why_a_plan_is_suspended(clock: Any) -> None:
    planned = plan()
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=5)
    )
    clock.move_to(START + timedelta(seconds=2))
    assert plans.run_plans().suspended == [planned]
    [line] = run("plans", "list").splitlines()
    assert line.startswith(f"#{planned} chat suspended: " + SUMMARY.format(by="alice", why="vendor_a maintenance"))
    assert "; suspended because chat was changed by bob at 2026-12-10T00:00:00Z after it was planned" in line


# --- change, cancel, start ----------------------------------------------------------------------


def test_change_moves_a_plan_and_prints_its_new_line() -> None:
    planned = plan()
    out = run(
        "plans", "change", "chat", str(planned), "--start", "2026-12-10T02:30Z", "--preset", "drop_vendor_b",
        "--reason", "window moved",
    )  # fmt: skip
    assert out == (
        f"changed: #{planned} chat planned: at 02:30 UTC Thu 2026-12-10: drop_vendor_b until 04:00 UTC, "
        "planned by alice because vendor_a maintenance\n"
    )
    event = PlannedPin.objects.get(pk=planned).events.last()
    assert (event.kind, event.actor, event.reason) == ("changed", ME, "window moved")


def test_cancel_frees_the_plans_time() -> None:
    planned = plan()
    out = run("plans", "cancel", "chat", str(planned), "--reason", "vendor moved the window")
    assert (
        out == f"cancelled: #{planned} chat cancelled: " + SUMMARY.format(by="alice", why="vendor_a maintenance") + "\n"
    )
    assert PlannedPin.objects.get(pk=planned).state == "cancelled"
    assert run("plans", "list") == "no plans to come\n"
    run(*ADD, "--reason", "again")  # its time is free


def test_start_serves_a_suspended_plan_until_its_end(clock: Any) -> None:
    planned = plan()
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=5)
    )
    clock.move_to(START + timedelta(seconds=2))
    plans.run_plans()
    out = run("plans", "start", "chat", str(planned), "--reason", "checked with bob")
    assert out == (
        f"started as chat v3: #{planned} chat started: " + SUMMARY.format(by="alice", why="vendor_a maintenance") + "\n"
    )
    live = Selection.objects.select_related("preset").get(chain__name="chat")
    assert (live.version, live.preset.name, live.updated_by, live.expires_at) == (3, "pin_secondary", ME, END)


# --- refusals -------------------------------------------------------------------------------------

# (id, the command's arguments after "plans", what the refusal says); "--reason r" is added
# unless the refusal is about the reason. {id} is a plan of chat from 02:00 to 04:00.
WINDOW = "--start 2026-12-10T02:00Z --end 2026-12-10T04:00Z"
BAD = [
    ("add-no-preset", f"add chat {WINDOW}", "--preset: say which"),
    ("add-no-start", "add chat --preset pin_secondary --end 2026-12-10T04:00Z", "--start: say when"),
    ("add-no-end", "add chat --preset pin_secondary --start 2026-12-10T02:00Z", "--end: say when"),
    (
        "add-naive-start",
        "add chat --preset pin_secondary --start 2026-12-10T02:00 --end 2026-12-10T04:00Z",
        "--start: '2026-12-10T02:00' needs a time zone, e.g. 2026-12-01T09:00:00Z",
    ),
    (
        "add-bad-end",
        "add chat --preset pin_secondary --start 2026-12-10T02:00Z --end 4am",
        "--end: '4am' is not an ISO 8601 time",
    ),
    ("add-no-reason", f"add chat --preset pin_secondary {WINDOW}", "--reason: is required: say why"),
    (
        "add-past-start",
        "add chat --preset pin_secondary --start 2026-12-09T23:00Z --end 2026-12-10T04:00Z",
        "--start: Wed 09 Dec 23:00 UTC (1 h ago) is not in the future",
    ),
    (
        "add-end-before-start",
        "add chat --preset pin_secondary --start 2026-12-10T02:00Z --end 2026-12-10T01:00Z",
        "--end: 01:00 UTC (in 1 h) is not after the start 02:00 UTC (in 2 h)",
    ),
    (
        "add-too-long",
        "add chat --preset pin_secondary --start 2026-12-10T02:00Z --end 2026-12-11T03:00Z",
        "--end: the plan lasts 1500 minutes, longer than the longest pin of 1440",
    ),
    ("add-default", f"add chat --preset normal {WINDOW}", "--preset: 'normal' is chat's default"),
    ("add-unknown-preset", f"add chat --preset nope {WINDOW}", "--preset: 'nope' does not exist on chat: use one of"),
    (
        "add-unknown-chain",
        f"add nope --preset pin_secondary {WINDOW}",
        "unknown chain 'nope': manage.py chain_status lists the chains",
    ),
    (
        "add-overlapping",
        "add chat --preset drop_vendor_b --start 2026-12-10T03:00Z --end 2026-12-10T05:00Z",
        "--start: overlaps plan #{id} (planned: pin_secondary from 02:00 UTC (in 2 h) to 04:00 UTC (in 4 h), "
        "planned by alice)",
    ),
    ("change-nothing", "change chat {id}", "--preset, --start or --end: say what to change"),
    ("change-naive", "change chat {id} --end 2026-12-10T05:00", "--end: '2026-12-10T05:00' needs a time zone"),
    ("change-unknown", "change chat {missing} --end 2026-12-10T05:00Z", "ID: chat has no plan #{missing}"),
    ("change-id-not-a-number", "change chat x --end 2026-12-10T05:00Z", "ID: 'x' is not a whole number"),
    ("change-default", "change chat {id} --preset normal", "--preset: 'normal' is chat's default"),
    ("cancel-other-chain", "cancel incident-summary {id}", "ID: incident-summary has no plan #{id}"),
    ("cancel-no-reason", "cancel chat {id}", "--reason: is required"),
    ("start-not-suspended", "start chat {id}", "ID: plan #{id} is planned: only a suspended plan is started by hand"),
    ("list-unknown-chain", "list --chain nope", "--chain: unknown chain 'nope'"),
    ("actor-blank", f"add chat --preset pin_secondary {WINDOW} --actor ' '", "--actor: give a name of 1..150"),
]


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_refusal_is_one_line_naming_the_option_and_writes_nothing(args: str, words: str) -> None:
    existing = plan()
    ids = {"id": existing, "missing": existing + 1000}
    argv = ["plans", *shlex.split(args.format(**ids))]
    if argv[1] != "list" and not words.startswith("--reason"):
        argv += ["--reason", "r"]
    before = written()
    message = refusal(*argv)
    assert words.format(**ids) in message, message
    assert "\n" not in message
    assert written() == before


def test_from_a_shell_a_refusal_is_one_line_on_stderr_and_exit_status_1(subprocess_env: dict[str, str]) -> None:
    refused = from_a_shell(subprocess_env, "plans", "cancel", "chat", "999999", "--reason", "not needed")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip() == (
        "CommandError: ID: chat has no plan #999999: manage.py plans list --chain chat lists the plans to come"
    ), refused.stderr
