"""manage.py select_preset --guard / --no-guard and manage.py guard (read, --off) on a controlled
clock, attributed to the operating-system user; each refusal one line naming what to fix, with
nothing written."""

from __future__ import annotations

import getpass
import json
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client

from presets import guards, services
from presets.models import GuardState, PinGuard, Selection
from tests.commands import from_a_shell, refusal, run
from tests.health_reports import vendor_a_failing, vendor_a_healthy

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
ME = f"cli:{getpass.getuser()}"
PIN = ["select_preset", "chat", "pin_secondary", "--reason", "INC-1 vendor_a slow"]
GUARD_LINE = (
    "chat v2: guarded until 2026-12-10T02:30:00Z: restores v1 normal if vendor_b/large does clearly worse "
    "than vendor_a/large did"
)


@pytest.fixture(autouse=True)
def clock(settings: Any) -> Iterator[Any]:
    settings.GUARD_BAKE_MINUTES = 30
    settings.GUARD_PINS_BY_DEFAULT = False
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def guarded_pin(**kwargs: Any) -> PinGuard:
    kwargs.setdefault("guard", True)
    selection = services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1", **kwargs)
    return PinGuard.objects.get(pin_version=selection.version)


def written() -> tuple[list[Any], int]:
    return list(PinGuard.objects.order_by("pk").values()), Selection.history.count()


# --- select_preset --guard / --no-guard --------------------------------------------------------


# (id, the options, GUARD_PINS_BY_DEFAULT, guarded)
GUARD_CHOICES = [
    ("guard", ["--guard"], False, True),
    ("no-guard-setting-on", ["--no-guard"], True, False),
    ("no-guard", ["--no-guard"], False, False),
    ("default-setting-on", [], True, True),
    ("default-setting-off", [], False, False),
]


@pytest.mark.parametrize(
    ("options", "by_default", "guarded"), [c[1:] for c in GUARD_CHOICES], ids=[c[0] for c in GUARD_CHOICES]
)
def test_select_preset_guards_the_pin_when_asked_or_as_the_setting_says(
    settings: Any, reader: Client, options: list[str], by_default: bool, guarded: bool
) -> None:
    settings.GUARD_PINS_BY_DEFAULT = by_default
    vendor_a_healthy(reader)  # evidence enough to judge the pin by
    lines = run(*PIN, *options).splitlines()
    assert lines[0].startswith("chat v2: pin_secondary (pinned until ")  # the change's line comes first
    assert lines[0].endswith(f"; was v1 normal; select by {ME}: INC-1 vendor_a slow")
    assert PinGuard.objects.filter(pin_version=2).exists() is guarded
    assert (GUARD_LINE in lines) is guarded
    assert not any(line.startswith("warning: not guarded") for line in lines)


def test_select_preset_says_when_a_guard_asked_for_was_not_made() -> None:
    # drop_vendor_b keeps vendor_a/large at the head: nothing for the fleet to compare.
    lines = run("select_preset", "chat", "drop_vendor_b", "--reason", "INC-2", "--guard").splitlines()
    assert lines[0].startswith("chat v2: drop_vendor_b")
    assert lines[-1] == (
        "warning: Not guarded: the pin keeps the first step vendor_a/large, so the guard would have nothing to compare."
    )
    assert not PinGuard.objects.exists()


def test_select_preset_says_a_guard_will_not_act_where_the_head_it_replaces_is_failing(reader: Client) -> None:
    vendor_a_failing(reader)
    lines = run(*PIN, "--guard").splitlines()
    assert lines[0].startswith("chat v2: pin_secondary")
    assert GUARD_LINE not in lines
    assert lines[-1] == (
        "warning: The guard will not act: vendor_a/large is failing now (50.0 % errors, p95 2500 ms (300 attempts "
        "from 3 instances)): restoring it would not help. Nothing undoes this pin by itself."
    )


def test_select_preset_says_a_guard_will_not_act_on_too_little_evidence() -> None:
    lines = run(*PIN, "--guard").splitlines()
    assert GUARD_LINE not in lines
    too_little = "warning: The guard will not act: there is too little evidence about vendor_a/large now"
    assert lines[-1].startswith(too_little)


def test_select_preset_refuses_a_value_after_guard_as_argparse_does() -> None:
    with pytest.raises(CommandError, match="unrecognized arguments: yes"):
        call_command(*PIN, "--guard", "yes", stdout=StringIO(), stderr=StringIO())
    assert not PinGuard.objects.exists()


# --- guard CHAIN -------------------------------------------------------------------------------


def test_guard_prints_the_live_guard_as_the_card_says_it() -> None:
    guarded_pin()
    assert run("guard", "chat") == GUARD_LINE + "\n"


def test_guard_says_why_a_guard_passed_and_what_it_weighed(reader: Client) -> None:
    guard = guarded_pin()
    guards.note(
        guard.pk, baseline={"attempts": 320, "errors": 3, "error_rate": 0.009375, "p95_ms": 500, "instances": 4}
    )
    guards.settle(
        guard.pk, state=GuardState.PASSED, why="its bake window ended at 2026-12-10T02:30:00Z without cause to act"
    )
    assert run("guard", "chat").splitlines() == [
        "chat v2: guard passed: its bake window ended at 2026-12-10T02:30:00Z without cause to act",
        "  vendor_a/large before the pin: 0.9 % errors, p95 500 ms (320 attempts from 4 instances)",
    ]
    assert json.loads(run("guard", "chat", "--json")) == reader.get("/api/v1/chains/chat/guard").json()


def test_guard_without_one_on_the_live_pin_says_why_and_what_the_last_one_did() -> None:
    assert refusal("guard", "chat") == (
        "chat's live selection has no guard: v1 serves its default preset normal; only a pin is guarded"
    )
    guard = guarded_pin()
    guards.restore(guard=guard.pk, reason="guard: vendor_b/large did worse than vendor_a/large did", evidence={})
    message = refusal("guard", "chat")
    assert message == (
        "chat's live selection has no guard: v3 serves its default preset normal; only a pin is guarded; the last "
        "guard (on v2) acted: restored normal as v3: guard: vendor_b/large did worse than vendor_a/large did"
    )


# --- guard CHAIN --off -------------------------------------------------------------------------


def test_guard_off_switches_the_guard_off_as_the_operating_system_user() -> None:
    guarded_pin()
    out = run("guard", "chat", "--off", "--reason", "vendor_b is expected to be slow")
    assert out == f"switched off: chat v2: guard off: switched off by {ME}: vendor_b is expected to be slow\n"
    assert PinGuard.objects.get().state == GuardState.OFF
    assert run("guard", "chat") == f"chat v2: guard off: switched off by {ME}: vendor_b is expected to be slow\n"
    assert Selection.objects.get(chain__name="chat").version == 2


def test_guard_off_names_the_actor_given() -> None:
    guarded_pin()
    run("guard", "chat", "--off", "--reason", "CHG-12", "--actor", "runbook:maintenance")
    assert PinGuard.objects.get().state_reason == "switched off by runbook:maintenance: CHG-12"


# (id, the command's arguments after "guard", what the refusal says); chat serves a guarded pin.
BAD = [
    ("off-no-reason", "chat --off", "--reason: is required: say why"),
    ("off-blank-reason", "chat --off --reason ' '", "--reason: is required: say why"),
    ("off-blank-actor", "chat --off --reason r --actor ' '", "--actor: give a name of 1..150"),
    ("reason-without-off", "chat --reason r", "--reason: only with --off"),
    ("actor-without-off", "chat --actor bob", "--actor: only with --off"),
    ("unknown-chain", "nope", "unknown chain 'nope': manage.py chain_status lists the chains"),
    ("off-unknown-chain", "nope --off --reason r", "unknown chain 'nope': manage.py chain_status lists the chains"),
    (
        "off-no-pin",
        "incident-summary --off --reason r",
        "CHAIN: incident-summary serves its default (v1): no pin, no guard",
    ),
]


@pytest.mark.parametrize("args,words", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_refusal_is_one_line_naming_what_to_fix_and_writes_nothing(args: str, words: str) -> None:
    guarded_pin()
    before = written()
    message = refusal("guard", *shlex.split(args))
    assert message.startswith(words), message
    assert "\n" not in message
    assert written() == before


def test_guard_off_twice_is_refused() -> None:
    guarded_pin()
    run("guard", "chat", "--off", "--reason", "first")
    before = written()
    assert refusal("guard", "chat", "--off", "--reason", "again") == (
        "CHAIN: chat's live pin (v2) has no guard on to switch off"
    )
    assert written() == before
    assert PinGuard.objects.get().state_reason == f"switched off by {ME}: first"


def test_from_a_shell_no_guard_is_one_line_on_stderr_and_exit_status_1(subprocess_env: dict[str, str]) -> None:
    refused = from_a_shell(subprocess_env, "guard", "chat")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip() == (
        "CommandError: chat's live selection has no guard: v1 serves its default preset normal; only a pin is guarded"
    ), refused.stderr
