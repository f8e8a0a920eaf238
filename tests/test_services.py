"""The invariants of DESIGN §5, proven on the service functions themselves."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import override_settings
from django.utils import timezone

from presets import selectors, services
from presets.documents import to_millisecond
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.models import Preset, Selection

pytestmark = pytest.mark.usefixtures("synced")


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def history(chain: str = "chat") -> list:
    return list(Selection.history.filter(chain__name=chain).order_by("version"))


def pin(preset: str = "pin_secondary", **kwargs) -> Selection:
    kwargs.setdefault("reason", "INC-1 vendor_a returns garbage")
    return services.select_preset(chain="chat", preset=preset, actor="alice", **kwargs)


# --- reason -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason",
    ["", "   ", "\n\t", "x" * 501, None, 42],
    ids=["empty", "spaces", "whitespace", "501-chars", "none", "number"],
)
def test_every_operation_rejects_a_missing_or_oversized_reason(reason) -> None:
    pin()
    calls = [
        lambda: services.select_preset(chain="chat", preset="local_only", actor="a", reason=reason),
        lambda: services.revert_to_default(chain="chat", actor="a", reason=reason),
        lambda: services.extend_pin(chain="chat", actor="a", reason=reason),
        lambda: services.restore(chain="chat", version=2, actor="a", reason=reason),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.field == "reason"
    assert live().version == 2
    assert len(history()) == 2


def test_the_reason_is_stored_stripped_and_500_chars_is_allowed() -> None:
    selection = pin(reason="  " + "r" * 500 + " \n")
    assert selection.reason == "r" * 500


# --- expiry -----------------------------------------------------------------------------


def test_a_pin_expires_after_the_default_four_hours() -> None:
    before = to_millisecond(timezone.now())
    selection = pin()
    assert before + timedelta(hours=4) <= selection.expires_at <= timezone.now() + timedelta(hours=4)


@override_settings(PIN_DEFAULT_MINUTES=30, PIN_MAX_MINUTES=60)
def test_default_and_maximum_durations_are_configurable() -> None:
    selection = pin()
    assert selection.expires_at - selection.updated_at == timedelta(minutes=30)
    with pytest.raises(InvalidInput, match="maximum pin of 60"):
        services.extend_pin(chain="chat", actor="a", reason="r", expires_at=timedelta(minutes=61))


@pytest.mark.parametrize(
    "expires_at",
    [timedelta(minutes=-5), timedelta(0), timedelta(hours=24, minutes=1)],
    ids=["past-duration", "zero", "beyond-24h"],
)
def test_a_pin_must_end_in_the_future_and_within_24_hours(expires_at) -> None:
    with pytest.raises(InvalidInput):
        pin(expires_at=expires_at)
    with pytest.raises(InvalidInput):
        pin(expires_at=timezone.now() + expires_at)
    assert live().version == 1


def test_a_pin_may_last_exactly_the_maximum() -> None:
    assert pin(expires_at=timedelta(hours=24)).expires_at is not None


def test_the_default_preset_never_has_an_expiry() -> None:
    pin()
    selection = services.select_preset(chain="chat", preset="normal", actor="a", reason="back")
    assert selection.expires_at is None
    assert selection.to_document()["is_default"] is True
    with pytest.raises(InvalidInput, match="never expires"):
        services.select_preset(chain="chat", preset="pin_secondary", actor="a", reason="r")
        services.select_preset(chain="chat", preset="normal", actor="a", reason="r", expires_at=timedelta(hours=1))


def test_revert_clears_the_expiry() -> None:
    pin()
    selection = services.revert_to_default(chain="chat", actor="alice", reason="vendor_a fixed")
    assert (selection.preset.name, selection.expires_at, selection.action) == ("normal", None, "revert")


def test_extend_moves_the_expiry_and_keeps_the_preset() -> None:
    first = pin(expires_at=timedelta(minutes=30))
    old_expiry = first.expires_at
    selection = services.extend_pin(chain="chat", actor="bob", reason="still broken", expires_at=timedelta(hours=2))
    assert selection.preset.name == "pin_secondary"
    assert selection.expires_at > old_expiry
    assert (selection.action, selection.previous_expires_at) == ("extend", old_expiry)


def test_extending_a_chain_that_is_not_pinned_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not pinned"):
        services.extend_pin(chain="chat", actor="a", reason="r")


# --- expected_version -------------------------------------------------------------------


def test_a_stale_expected_version_is_a_conflict_naming_who_changed_what_and_why() -> None:
    pin(expected_version=1)
    with pytest.raises(Conflict) as err:
        services.select_preset(chain="chat", preset="local_only", actor="bob", reason="mine", expected_version=1)
    message = err.value.message
    for fact in ("v2", "pin_secondary", "alice", "INC-1 vendor_a returns garbage"):
        assert fact in message
    assert err.value.details["current"]["version"] == 2
    assert live().preset.name == "pin_secondary"
    assert len(history()) == 2


@pytest.mark.parametrize("operation", ["revert", "extend", "restore"])
def test_every_change_checks_the_expected_version(operation) -> None:
    pin()
    call = {
        "revert": lambda: services.revert_to_default(chain="chat", actor="a", reason="r", expected_version=1),
        "extend": lambda: services.extend_pin(chain="chat", actor="a", reason="r", expected_version=1),
        "restore": lambda: services.restore(chain="chat", version=2, actor="a", reason="r", expected_version=1),
    }[operation]
    with pytest.raises(Conflict):
        call()
    assert live().version == 2


# --- what can be selected ---------------------------------------------------------------


def test_only_active_presets_of_that_chain_can_be_selected() -> None:
    Preset.objects.filter(name="local_only", chain__name="chat").update(retired_at=timezone.now())
    with pytest.raises(InvalidInput, match="retired"):
        pin("local_only")
    with pytest.raises(InvalidInput, match="does not exist") as err:
        pin("no_such_preset")
    assert "pin_secondary" in err.value.message  # the message lists what can be chosen
    with pytest.raises(InvalidInput, match="does not exist"):
        # a preset of another chain is not selectable here
        services.select_preset(chain="incident-summary", preset="pin_secondary", actor="a", reason="r")
    assert live().version == 1


def test_an_unknown_chain_is_not_found() -> None:
    with pytest.raises(NotFound):
        services.select_preset(chain="nope", preset="normal", actor="a", reason="r")
    with pytest.raises(NotFound):
        services.revert_expired_and_read(chain="nope")


def test_selecting_what_is_already_live_is_refused() -> None:
    pin()
    with pytest.raises(InvalidInput, match="extend"):
        pin()
    with pytest.raises(InvalidInput, match="nothing to revert"):
        services.revert_to_default(chain="incident-summary", actor="a", reason="r")


# --- versions and history -------------------------------------------------------------


def test_each_change_is_one_version_and_one_self_contained_history_row() -> None:
    pin()
    services.extend_pin(chain="chat", actor="bob", reason="longer", expires_at=timedelta(hours=6))
    services.select_preset(chain="chat", preset="local_only", actor="carol", reason="both down")
    services.revert_to_default(chain="chat", actor="alice", reason="recovered")
    rows = history()
    assert [r.version for r in rows] == [1, 2, 3, 4, 5]
    assert [r.action for r in rows] == ["sync", "select", "extend", "select", "revert"]
    assert [r.updated_by for r in rows] == ["system:sync", "alice", "bob", "carol", "alice"]
    for before, row in zip(rows, rows[1:], strict=False):
        assert row.previous_version == before.version
        assert row.previous_preset_id == before.preset_id
        assert row.previous_steps == before.steps
        assert row.previous_expires_at == before.expires_at
        assert row.reason and row.updated_at


def test_restore_makes_the_previous_value_live_again_as_a_new_version() -> None:
    pin()  # v2
    services.select_preset(chain="chat", preset="local_only", actor="bob", reason="worse")  # v3
    selection = services.restore(chain="chat", version=3, actor="alice", reason="undo v3")
    assert (selection.version, selection.action, selection.preset.name) == (4, "restore", "pin_secondary")
    assert selection.expires_at is not None  # a restored pin gets a fresh expiry
    assert selection.expires_at - selection.updated_at == timedelta(minutes=240)
    selection = services.restore(chain="chat", version=2, actor="alice", reason="undo v2")
    assert (selection.preset.name, selection.expires_at) == ("normal", None)


def test_restore_refuses_what_it_cannot_undo() -> None:
    with pytest.raises(InvalidInput, match="no previous value"):
        services.restore(chain="chat", version=1, actor="a", reason="r")
    with pytest.raises(NotFound):
        services.restore(chain="chat", version=99, actor="a", reason="r")
    pin("local_only")
    services.select_preset(chain="chat", preset="pin_secondary", actor="a", reason="r")  # v3
    Preset.objects.filter(name="local_only", chain__name="chat").update(retired_at=timezone.now())
    with pytest.raises(InvalidInput, match="retired"):
        services.restore(chain="chat", version=3, actor="a", reason="undo v3")
    assert live().version == 3


# --- expiry sweeps and the read path ----------------------------------------------------


def test_expire_pins_reverts_due_pins_once_with_a_reason_naming_the_pin() -> None:
    pin(expires_at=timedelta(minutes=10))
    with time_machine.travel(timezone.now() + timedelta(minutes=9)):
        assert services.expire_pins() == 0
    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        assert services.expire_pins() == 1
        assert services.expire_pins() == 0
    selection = live()
    assert (selection.preset.name, selection.action, selection.updated_by) == ("normal", "expire", "system:expiry")
    for fact in ("pin_secondary", "v2", "alice", "INC-1"):
        assert fact in selection.reason
    assert len(history()) == 3


def test_the_read_path_never_serves_an_expired_pin_even_without_a_worker() -> None:
    pin(expires_at=timedelta(minutes=10))
    with time_machine.travel(timezone.now() + timedelta(minutes=10, seconds=1)):
        document = services.revert_expired_and_read(chain="chat").to_document()
        assert (document["preset"], document["version"], document["expires_at"]) == ("normal", 3, None)
        assert [s.chain.name for s in services.revert_expired_and_read_all()] == ["chat", "incident-summary"]
    assert history()[-1].action == "expire"
    assert len(history()) == 3


# --- where pins began, for every chain at once ------------------------------------------------


def test_every_chains_pin_start_read_at_once_is_each_ones_own() -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1 vendor_a slow")
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="carol", reason="INC-1 still slow")
    services.select_preset(chain="incident-summary", preset="local_only", actor="dave", reason="INC-2")
    services.revert_to_default(chain="incident-summary", actor="dave", reason="INC-2 over")
    services.restore(chain="incident-summary", version=3, actor="erin", reason="INC-2 again")
    read = list(selectors.selections())
    starts = selectors.live_pin_starts(read)
    assert starts == {s.chain_id: selectors.live_pin_start(s) for s in read}
    chat, summary = (starts[s.chain_id] for s in read)
    assert chat is not None and (chat.version, chat.actor, chat.action) == (2, "alice", "select")  # not the extend
    assert summary is not None and (summary.version, summary.actor, summary.action) == (4, "erin", "restore")
    assert selectors.live_pin_starts([]) == {}

    # A chain changed since it was read: the start is still the one of the version read.
    services.revert_to_default(chain="chat", actor="carol", reason="over")
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="frank", reason="INC-3")
    again = selectors.live_pin_starts(read)
    assert again == starts
    services.revert_to_default(chain="chat", actor="frank", reason="INC-3 over")
    assert selectors.live_pin_starts(selectors.selections())[read[0].chain_id] is None
