"""The runbook commands (chain_status, select_preset, revert_to_default, extend_pin,
restore_version, chain_history): real services on the real database, attributed to the
operating-system user, refusing bad input in one line with nothing written."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client

from presets import services
from presets.models import Selection

pytestmark = pytest.mark.usefixtures("synced")

NOON = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PIN = ["select_preset", "chat", "pin_secondary", "--reason", "x"]
ME = f"cli:{getpass.getuser()}"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def chat() -> Selection:
    return Selection.objects.select_related("preset").get(chain__name="chat")


def changes() -> int:
    return Selection.history.count()


# --- reading -----------------------------------------------------------------------------------


def test_chain_status_says_what_each_chain_serves_who_and_why() -> None:
    with time_machine.travel(NOON, tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7 vendor_a 500s")
        out = run("chain_status")
    lines = out.splitlines()
    assert lines[0] == "chat v2: pin_secondary (pinned until 2030-01-01T16:00:00Z, 4 h left)"
    assert lines[1] == "  select by alice at 2030-01-01T12:00:00Z: INC-7 vendor_a 500s"
    assert lines[2] == "incident-summary v1: normal (default)"
    assert run("chain_status", "incident-summary").splitlines()[0] == "incident-summary v1: normal (default)"


def test_chain_status_names_where_an_extended_pin_began() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    services.extend_pin(chain="chat", actor="carol", reason="still broken", expires_at=timedelta(hours=6))
    out = run("chain_status", "chat")
    assert "  extend by carol at " in out
    assert "  pinned since v2 (0 s ago) by alice: INC-7" in out


def test_chain_status_json_is_what_the_api_serves(reader: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    documents = json.loads(run("chain_status", "--json"))
    assert documents == reader.get("/api/v1/chains").json()
    assert json.loads(run("chain_status", "chat", "--json"))["chains"] == [reader.get("/api/v1/chains/chat").json()]


def test_chain_history_lists_the_apis_entries(reader: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    services.revert_to_default(chain="chat", actor="carol", reason="fixed")
    assert json.loads(run("chain_history", "chat", "--json")) == reader.get("/api/v1/chains/chat/history").json()
    api_page = reader.get("/api/v1/chains/chat/history?limit=1&before=3").json()
    assert json.loads(run("chain_history", "chat", "--json", "--limit", "1", "--before", "3")) == api_page
    lines = run("chain_history", "chat").splitlines()
    assert [line.split()[0] for line in lines] == ["v3", "v2", "v1"]
    assert "revert   carol  v2 pin_secondary -> normal  reason: fixed" in lines[0]
    assert "select   alice  v1 normal -> pin_secondary until " in lines[1]


# --- changing ----------------------------------------------------------------------------------


def test_select_preset_pins_for_the_minutes_given_as_the_operating_system_user() -> None:
    with time_machine.travel(NOON, tick=False):
        out = run("select_preset", "chat", "pin_secondary", "--reason", "INC-9", "--minutes", "30")
    assert out.strip() == (
        f"chat v2: pin_secondary (pinned until 2030-01-01T12:30:00Z, 30 min left); was v1 normal; select by {ME}: INC-9"
    )
    live = chat()
    assert (live.version, live.preset.name, live.updated_by) == (2, "pin_secondary", ME)
    assert live.expires_at == NOON + timedelta(minutes=30)


def test_a_change_names_the_actor_given() -> None:
    run("select_preset", "chat", "pin_secondary", "--reason", "INC-9", "--actor", "runbook:failover")
    assert chat().updated_by == "runbook:failover"


def test_revert_extend_and_restore_each_say_what_changed() -> None:
    with time_machine.travel(NOON, tick=False):
        run("select_preset", "chat", "pin_secondary", "--reason", "INC-9", "--expected-version", "1")
        extended = run("extend_pin", "chat", "--minutes", "600", "--reason", "still out", "--expected-version", "2")
        shortened = run("extend_pin", "chat", "--until", "2030-01-01T13:00:00Z", "--shorten", "--reason", "calmer")
        reverted = run("revert_to_default", "chat", "--reason", "vendor_a is back")
        restored = run("restore_version", "chat", "5", "--reason", "undo v5: it is not back")
    assert extended.startswith("chat v3: pin_secondary (pinned until 2030-01-01T22:00:00Z, 10 h left); was v2")
    assert shortened.startswith("chat v4: pin_secondary (pinned until 2030-01-01T13:00:00Z, 1 h left); was v3")
    assert reverted.strip() == f"chat v5: normal (default); was v4 pin_secondary; revert by {ME}: vendor_a is back"
    assert restored.startswith("chat v6: pin_secondary (pinned until 2030-01-01T16:00:00Z, 4 h left); was v5 normal;")
    assert [row.action for row in Selection.history.filter(chain__name="chat").order_by("version")] == [
        "sync",
        "select",
        "extend",
        "extend",
        "revert",
        "restore",
    ]


@pytest.mark.parametrize(
    "args,message",
    [
        (["select_preset", "nope", "pin_secondary", "--reason", "x"], "unknown chain 'nope': manage.py chain_status"),
        (["select_preset", "chat", "nope", "--reason", "x"], "PRESET: 'nope' does not exist on chat: use one of"),
        (["select_preset", "chat", "pin_secondary"], "--reason: is required"),
        (["select_preset", "chat", "pin_secondary", "--reason", "   "], "--reason: is required"),
        (["select_preset", "chat", "pin_secondary", "--reason", "x" * 501], "--reason: is 501 characters"),
        ([*PIN, "--minutes", "soon"], "--minutes: 'soon' is not"),
        ([*PIN, "--minutes", "0"], "--minutes: must be at least 1"),
        ([*PIN, "--minutes", "1441"], "--minutes: 1441 minutes is"),
        ([*PIN, "--minutes", "9" * 30], "--minutes: must be at"),
        ([*PIN, "--until", "tomorrow"], "--until: 'tomorrow' is"),
        ([*PIN, "--until", "2030-01-01T13:00"], "needs a time zone"),
        ([*PIN, "--until", "2029-01-01T13:00Z"], "not in the future"),
        ([*PIN, "--minutes", "5", "--until", "2030-01-01T13:00Z"], "give one of them, not both"),
        (["select_preset", "chat", "normal", "--reason", "x"], "PRESET: 'normal' is already live on chat"),
        ([*PIN, "--expected-version", "v1"], "--expected-version:"),
        ([*PIN, "--actor", " "], "--actor: give a name"),
        (["revert_to_default", "chat", "--reason", "x"], "CHAIN: chat already serves its default preset"),
        (["extend_pin", "chat", "--reason", "x"], "--minutes N or --until ISO"),
        (["extend_pin", "chat", "--reason", "x", "--minutes", "60"], "CHAIN: chat is not pinned"),
        (["restore_version", "chat", "1", "--reason", "x"], "VERSION: v1 created chat; it has no previous value"),
        (["restore_version", "chat", "9", "--reason", "x"], "chat has no version 9"),
        (["restore_version", "chat", "latest", "--reason", "x"], "VERSION: 'latest' is not a whole number"),
        (["chain_status", "nope"], "CHAIN: unknown chain 'nope'; the chains are: chat, incident-summary"),
        (["chain_history", "nope"], "CHAIN: unknown chain 'nope'"),
        (["chain_history", "chat", "--limit", "0"], "--limit: must be at least 1"),
        (["chain_history", "chat", "--limit", "501"], "--limit: at most 500"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:2] + value[5:])[:60],
)
def test_bad_input_is_one_line_naming_what_to_fix_and_changes_nothing(args: list[str], message: str) -> None:
    before = changes()
    with time_machine.travel(NOON, tick=False), pytest.raises(CommandError) as refused:
        call_command(*args)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    assert changes() == before
    assert chat().version == 1


def test_an_expiry_refusal_names_the_option_given() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    with pytest.raises(CommandError, match="^--minutes: 'normal' is the default preset, which never expires"):
        call_command("select_preset", "chat", "normal", "--reason", "x", "--minutes", "30")


def test_a_stale_expected_version_names_who_changed_the_chain_and_when() -> None:
    with time_machine.travel(NOON, tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason="INC-3 vendor_a down")
    with pytest.raises(CommandError) as refused:
        call_command("revert_to_default", "chat", "--reason", "looks fine", "--expected-version", "1")
    message = str(refused.value)
    assert message.startswith("--expected-version: chat changed since v1: it is now v2, select of pin_secondary")
    assert "by carol at 2030-01-01T12:00:00Z (reason: INC-3 vendor_a down)" in message
    assert chat().version == 2  # nothing reverted
    # The negative control: the version the operator saw now is the live one.
    run("revert_to_default", "chat", "--reason", "looks fine", "--expected-version", "2")
    assert chat().version == 3


def test_from_a_shell_a_refusal_is_one_line_on_stderr_and_exit_status_1(subprocess_env: dict[str, str]) -> None:
    refused = subprocess.run(
        [sys.executable, "manage.py", "select_preset", "chat", "pin_secondary", "--minutes", "45"],
        cwd=settings.BASE_DIR,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip() == ("CommandError: --reason: is required: say why (e.g. the incident number)"), (
        refused.stderr
    )
    assert chat().version == 1
