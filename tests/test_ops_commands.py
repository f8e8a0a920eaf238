"""The runbook commands (chain_status, select_preset, revert_to_default, extend_pin,
restore_version, chain_history): real services on the real database, attributed to the
operating-system user, refusing bad input in one line with nothing written."""

from __future__ import annotations

import getpass
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.test import Client

from presets import services
from presets.models import Selection
from tests.commands import from_a_shell, run
from tests.health_reports import vendor_a_failing

pytestmark = pytest.mark.usefixtures("synced")

NOON = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PIN = ["select_preset", "chat", "pin_secondary", "--reason", "x"]
ME = f"cli:{getpass.getuser()}"


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
    assert lines[2:5] == [
        "  step 1 vendor_b/large: no reports in the last hour",
        "  step 2 vendor_a/large: no reports in the last hour",
        "  step 3 self_hosted/8b: no reports in the last hour",
    ]
    assert lines[5] == "incident-summary v1: normal (default)"
    assert run("chain_status", "incident-summary").splitlines()[0] == "incident-summary v1: normal (default)"


def test_chain_status_names_where_an_extended_pin_began() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    services.extend_pin(chain="chat", actor="carol", reason="still broken", expires_at=timedelta(hours=6))
    out = run("chain_status", "chat")
    assert "  extend by carol at " in out
    assert "  pinned since v2 (0 s ago) by alice: INC-7" in out


def test_chain_status_reads_each_live_steps_health_as_the_dashboard_does(reader: Client) -> None:
    with time_machine.travel(NOON, tick=False):
        vendor_a_failing(reader)
        lines = run("chain_status", "chat").splitlines()
    assert lines[0] == "chat v1: normal (default)"
    assert lines[2:] == [
        "  step 1 vendor_a/large: failing now: vendor_a: 50.0 % errors (mostly 5xx), p95 2.5 s, 3 instances",
        "  step 2 vendor_b/large: vendor_b: 0.0 % errors, p95 1 s, 3 instances",
        "  step 3 self_hosted/8b: no reports in the last hour",
    ]


def test_chain_status_says_no_reports_for_a_step_nobody_reported_on_in_the_last_hour(reader: Client) -> None:
    with time_machine.travel(NOON, tick=False):
        vendor_a_failing(reader)
    with time_machine.travel(NOON + timedelta(minutes=61), tick=False):
        lines = run("chain_status", "chat").splitlines()
    assert lines[2:] == [
        "  step 1 vendor_a/large: no reports in the last hour",
        "  step 2 vendor_b/large: no reports in the last hour",
        "  step 3 self_hosted/8b: no reports in the last hour",
    ]


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


def test_select_preset_pins_for_the_hours_given_fractions_too() -> None:
    with time_machine.travel(NOON, tick=False):
        out = run("select_preset", "chat", "pin_secondary", "--reason", "INC-9", "--hours", "1.5")
    assert out.startswith("chat v2: pin_secondary (pinned until 2030-01-01T13:30:00Z, 1 h 30 min left); was v1")
    assert chat().expires_at == NOON + timedelta(hours=1, minutes=30)


def test_extend_pin_moves_the_expiry_to_the_hours_given() -> None:
    with time_machine.travel(NOON, tick=False):
        run("select_preset", "chat", "pin_secondary", "--reason", "INC-9", "--minutes", "30")
        out = run("extend_pin", "chat", "--hours", "6", "--reason", "still out")
    assert out.startswith("chat v3: pin_secondary (pinned until 2030-01-01T18:00:00Z, 6 h left); was v2")


def test_every_command_that_takes_minutes_takes_hours_too_and_its_help_says_so() -> None:
    helps = {}
    for name, app in get_commands().items():
        if app.startswith("commands"):
            helps[name] = load_command_class(app, name).create_parser("manage.py", name).format_help()
    with_minutes = sorted(name for name, text in helps.items() if "--minutes" in text)
    assert with_minutes == ["extend_pin", "select_preset"]
    for name in with_minutes:
        assert "--hours H" in helps[name], name
        assert "fractions allowed, e.g. 1.5" in " ".join(helps[name].split()), name


def test_selecting_a_degraded_preset_that_drops_providers_says_so_and_still_pins() -> None:
    with time_machine.travel(NOON, tick=False):
        out = run("select_preset", "chat", "local_only", "--reason", "INC-9 both vendors down", "--minutes", "30")
    assert out.splitlines() == [
        f"chat v2: local_only (pinned until 2030-01-01T12:30:00Z, 30 min left); was v1 normal; select by {ME}: "
        "INC-9 both vendors down",
        "warning: local_only is marked degraded: Self-hosted 8b only: shorter, weaker answers.",
        "warning: vendor_a, vendor_b will get no chat traffic",
    ]
    assert chat().preset.name == "local_only"  # the on-call chose it: it is live


def test_selecting_a_preset_whose_new_head_is_failing_says_so(reader: Client) -> None:
    with time_machine.travel(NOON, tick=False):
        vendor_a_failing(reader)
        # The negative control: vendor_b heads pin_secondary and is healthy; nothing dropped.
        safe = run("select_preset", "chat", "pin_secondary", "--reason", "INC-9")
        risky = run("select_preset", "chat", "drop_vendor_b", "--reason", "INC-9 vendor_b quota")
    # No warning; what the pin costs, as the review page says it (these reports carry no tokens).
    assert safe.splitlines()[1:] == ["cost: cost unknown: the fleet reports no token counts for these requests"]
    assert risky.splitlines()[1:] == [
        "warning: vendor_b will get no chat traffic",
        "warning: its head is failing now: vendor_a: 50.0 % errors (mostly 5xx), p95 2.5 s, 3 instances",
        "cost: cost unknown: the fleet reports no token counts for these requests",
    ]
    assert chat().preset.name == "drop_vendor_b"


def test_restoring_a_degraded_preset_says_so() -> None:
    services.select_preset(chain="chat", preset="local_only", actor="alice", reason="INC-7")
    services.revert_to_default(chain="chat", actor="carol", reason="vendors back")
    lines = run("restore_version", "chat", "3", "--reason", "undo v3: they are not back").splitlines()
    assert lines[0].startswith("chat v4: local_only (pinned until ")
    assert lines[1:] == [
        "warning: local_only is marked degraded: Self-hosted 8b only: shorter, weaker answers.",
        "warning: vendor_a, vendor_b will get no chat traffic",
    ]


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
        ([*PIN, "--minutes", "1441"], "--minutes: 24 h 1 min is longer than the longest pin, 24 h; pin for less"),
        ([*PIN, "--minutes", "9" * 30], "--minutes: must be at"),
        ([*PIN, "--until", "tomorrow"], "--until: 'tomorrow' is"),
        ([*PIN, "--until", "2030-01-01T13:00"], "needs a time zone"),
        ([*PIN, "--until", "2029-01-01T13:00Z"], "not in the future"),
        ([*PIN, "--minutes", "5", "--until", "2030-01-01T13:00Z"], "give one of them, not both"),
        ([*PIN, "--minutes", "5", "--hours", "1"], "--minutes and --hours: give one of them, not both"),
        ([*PIN, "--hours", "1", "--until", "2030-01-01T13:00Z"], "--hours and --until: give one of them, not both"),
        ([*PIN, "--hours", "soon"], "--hours: 'soon' is not a number of hours, e.g. 1.5"),
        ([*PIN, "--hours", "nan"], "--hours: 'nan' is not a number of hours"),
        ([*PIN, "--hours", "0"], "--hours: must be more than 0, not 0"),
        ([*PIN, "--hours", "0.01"], "--hours: 0.01 h is less than a minute"),
        ([*PIN, "--hours", "24.5"], "--hours: 24 h 30 min is longer than the longest pin, 24 h; pin for less"),
        ([*PIN, "--hours", "1e300"], "--hours: 1e300 hours is far longer than any pin"),
        (
            [*PIN, "--until", "2030-01-03T00:00Z"],
            "--until: Thu 03 Jan 00:00 UTC (in 36 h) is more than 24 h ahead; "
            "pick a time before Wed 02 Jan 12:00 UTC (in 24 h) and extend later if needed",
        ),
        ([*PIN, "--until", "2030-01-01T11:00Z"], "--until: 11:00 UTC (1 h ago) is not in the future"),
        (["select_preset", "chat", "normal", "--reason", "x"], "PRESET: 'normal' is already live on chat"),
        ([*PIN, "--expected-version", "v1"], "--expected-version:"),
        ([*PIN, "--actor", " "], "--actor: give a name"),
        (["revert_to_default", "chat", "--reason", "x"], "CHAIN: chat already serves its default preset"),
        (["extend_pin", "chat", "--reason", "x"], "--minutes N, --hours H or --until ISO: say when"),
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


def test_refusing_to_shorten_names_the_option_given_and_reads_its_times_as_clock_and_distance() -> None:
    with time_machine.travel(NOON, tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        messages = []
        for option, value in [("--minutes", "30"), ("--hours", "0.5"), ("--until", "2030-01-01T12:30:00Z")]:
            with pytest.raises(CommandError) as refused:
                call_command("extend_pin", "chat", option, value, "--reason", "x")
            messages.append(str(refused.value))
    assert messages[0] == (
        "--minutes: that would end the pin at 12:30 UTC (in 30 min), before its current expiry 16:00 UTC (in 4 h): "
        "extending never shortens a pin. To end it earlier on purpose, shorten it (--shorten), or revert to the "
        "default now"
    )
    assert messages[1] == messages[0].replace("--minutes", "--hours", 1)
    assert messages[2] == messages[0].replace("--minutes", "--until", 1)


@pytest.mark.parametrize(
    "args",
    [
        ["extend_pin", "chat", "--minutes", "30", "--reason", "x"],
        ["extend_pin", "chat", "--hours", "9", "--shorten", "--reason", "x"],
        ["extend_pin", "chat", "--until", "2030-01-02T13:00Z", "--reason", "x"],
        ["select_preset", "chat", "local_only", "--hours", "30", "--reason", "x"],
        ["select_preset", "chat", "normal", "--hours", "1", "--reason", "x"],
        ["revert_to_default", "chat", "--reason", "x", "--expected-version", "1"],
    ],
    ids=["extend-shortens", "shorten-lengthens", "until-too-far", "hours-too-long", "default-with-hours", "stale"],
)
def test_no_refusal_names_a_form_field_or_an_iso_time(args: list[str]) -> None:
    with time_machine.travel(NOON, tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        with pytest.raises(CommandError) as refused:
            call_command(*args)
    message = str(refused.value)
    assert message.startswith("--")
    for field in ("duration_minutes", "expires_at", '"shorten"', "leave the duration out", "minutes ahead"):
        assert field not in message
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", message), message


def test_an_expiry_refusal_names_the_option_given() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    with pytest.raises(CommandError, match="^--minutes: 'normal' is the default preset, which never expires"):
        call_command("select_preset", "chat", "normal", "--reason", "x", "--minutes", "30")


def test_a_stale_expected_version_names_who_changed_the_chain_and_when() -> None:
    with time_machine.travel(NOON, tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason="INC-3 vendor_a down")
    with time_machine.travel(NOON + timedelta(minutes=20), tick=False), pytest.raises(CommandError) as refused:
        call_command("revert_to_default", "chat", "--reason", "looks fine", "--expected-version", "1")
    message = str(refused.value)
    assert message.startswith("--expected-version: chat changed since v1: it is now v2, select of pin_secondary")
    assert "by carol at 12:00 UTC (20 min ago) (reason: INC-3 vendor_a down)" in message
    assert chat().version == 2  # nothing reverted
    # The negative control: the version the operator saw now is the live one.
    run("revert_to_default", "chat", "--reason", "looks fine", "--expected-version", "2")
    assert chat().version == 3


def test_from_a_shell_a_refusal_is_one_line_on_stderr_and_exit_status_1(subprocess_env: dict[str, str]) -> None:
    refused = from_a_shell(subprocess_env, "select_preset", "chat", "pin_secondary", "--minutes", "45")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip() == ("CommandError: --reason: is required: say why (e.g. the incident number)"), (
        refused.stderr
    )
    assert chat().version == 1
