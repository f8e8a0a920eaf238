"""check_presets and sync_presets: bad files are rejected whole, with the JSON path and the fix."""

from __future__ import annotations

import copy
import json
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from presets.models import Chain, Preset, Selection


@pytest.fixture
def example(example_file: Path) -> dict[str, Any]:
    return json.loads(example_file.read_text())


def write(tmp_path: Path, data: Any, name: str = "presets.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def chat_step(data: dict, preset: str = "normal", index: int = 0) -> dict:
    return data["chains"]["chat"]["presets"][preset]["chain"][index]


def _unknown_provider(d):
    chat_step(d)["provider"] = "vendor_x"


def _unknown_model(d):
    chat_step(d)["model"] = "huge"


def _duplicate_step(d):
    d["chains"]["chat"]["presets"]["normal"]["chain"].append(dict(chat_step(d)))


def _no_steps(d):
    d["chains"]["chat"]["presets"]["normal"]["chain"] = []


def _five_steps(d):
    d["chains"]["chat"]["presets"]["normal"]["chain"] = [
        {"provider": p, "model": m, "timeout_ms": 1000}
        for p, m in [
            ("vendor_a", "large"),
            ("vendor_a", "small"),
            ("vendor_b", "large"),
            ("vendor_b", "small"),
            ("self_hosted", "8b"),
        ]
    ]


def _timeout(value):
    def mutate(d):
        chat_step(d)["timeout_ms"] = value

    return mutate


def _missing_default(d):
    del d["chains"]["chat"]["default"]


def _default_not_defined(d):
    d["chains"]["chat"]["default"] = "nonexistent"


def _contract_capability(d):
    d["chains"]["incident-summary"]["presets"]["local_only"]["chain"] = [
        {"provider": "self_hosted", "model": "8b", "timeout_ms": 1000}
    ]


def _contract_destination(d):
    d["chains"]["incident-summary"]["presets"]["local_only"]["chain"] = [
        {"provider": "vendor_b", "model": "large", "timeout_ms": 1000}
    ]


def _policy(policy: Any, preset: str | None = "normal"):
    def mutate(d):
        chain = d["chains"]["chat"]
        (chain["presets"][preset] if preset else chain)["failure_policy"] = policy

    return mutate


BAD_FILES = [
    ("invalid-json", "{not json", "$", "not valid JSON"),
    (
        "policy-commit",
        _policy({"commit": "later"}),
        "$.chains.chat.presets.normal.failure_policy.commit",
        "commit 'later' is not one of first_chunk, complete",
    ),
    (
        "policy-first-chunk-bound",
        _policy({"first_chunk_ms": 100}, preset=None),
        "$.chains.chat.failure_policy.first_chunk_ms",
        "first_chunk_ms 100 is out of bounds: use 500..120000 milliseconds",
    ),
    (
        "policy-retry-wait",
        _policy({"retry_same_step": {"max_wait_ms": 20000}}),
        "$.chains.chat.presets.normal.failure_policy.retry_same_step.max_wait_ms",
        "max_wait_ms 20000 is out of bounds: use 0..10000 milliseconds",
    ),
    (
        "policy-unknown-key",
        _policy({"idle": 2000}),
        "$.chains.chat.presets.normal.failure_policy",
        "'idle' was unexpected); remove it or check its spelling",
    ),
    ("policy-chain-null", _policy(None, preset=None), "$.chains.chat.failure_policy", "fix the value's type"),
    (
        "unknown-provider",
        _unknown_provider,
        "$.chains.chat.presets.normal.chain[0].provider",
        "unknown provider 'vendor_x': use one of self_hosted, vendor_a, vendor_b",
    ),
    (
        "unknown-model",
        _unknown_model,
        "$.chains.chat.presets.normal.chain[0].model",
        "unknown model 'huge' for vendor_a: use one of large, small",
    ),
    ("duplicate-step", _duplicate_step, "$.chains.chat.presets.normal.chain[3]", "duplicate step vendor_a/large"),
    ("zero-steps", _no_steps, "$.chains.chat.presets.normal.chain", "1 to 4 steps"),
    ("five-steps", _five_steps, "$.chains.chat.presets.normal.chain", "1 to 4 steps, this one has 5"),
    (
        "timeout-499",
        _timeout(499),
        "$.chains.chat.presets.normal.chain[0].timeout_ms",
        "timeout_ms 499 is out of bounds: use 500..120000",
    ),
    (
        "timeout-120001",
        _timeout(120001),
        "$.chains.chat.presets.normal.chain[0].timeout_ms",
        "timeout_ms 120001 is out of bounds",
    ),
    (
        "timeout-not-integer",
        _timeout("20s"),
        "$.chains.chat.presets.normal.chain[0].timeout_ms",
        "fix the value's type",
    ),
    ("missing-default", _missing_default, "$.chains.chat", "missing 'default': name the preset"),
    (
        "default-not-defined",
        _default_not_defined,
        "$.chains.chat.default",
        "default preset 'nonexistent' is not defined",
    ),
    (
        "contract-capability",
        _contract_capability,
        "$.chains.incident-summary.presets.local_only.chain[0]",
        "lacks images",
    ),
    (
        "contract-destination",
        _contract_destination,
        "$.chains.incident-summary.presets.local_only.chain[0]",
        "destination 'vendor_b-eu' is not allowed",
    ),
]


def bad_file(tmp_path: Path, example: dict, mutate: Any) -> Path:
    if isinstance(mutate, str):
        return write(tmp_path, mutate)
    data = copy.deepcopy(example)
    mutate(data)
    return write(tmp_path, data)


def test_check_presets_accepts_the_example_file(example_file: Path, capsys) -> None:
    call_command("check_presets", str(example_file))
    assert "OK (2 chains, 6 presets" in capsys.readouterr().out


@pytest.mark.parametrize("mutate,path,message", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_check_presets_names_the_path_and_the_fix(tmp_path, example, mutate, path, message, capsys) -> None:
    with pytest.raises(CommandError, match="problem"):
        call_command("check_presets", str(bad_file(tmp_path, example, mutate)))
    err = capsys.readouterr().err
    assert f"{path}: " in err
    assert message in err


def test_check_presets_needs_no_database(example_file: Path) -> None:
    # no `db` fixture: pytest-django blocks database access, so any query would fail here
    call_command("check_presets", str(example_file))


def state() -> tuple:
    return (
        list(Chain.objects.values_list("name", "default_preset_id", "contract")),
        list(Preset.objects.values_list("chain__name", "name", "steps", "retired_at")),
        list(Selection.objects.values_list("chain__name", "version", "preset_id", "steps")),
        Selection.history.count(),
    )


@pytest.mark.parametrize("mutate,path,message", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_sync_presets_rejects_a_bad_file_whole(synced, tmp_path, example, mutate, path, message, capsys) -> None:
    before = state()
    # a valid change elsewhere in the same file must not be applied either
    if not isinstance(mutate, str):
        original = mutate

        def mutate(d):
            original(d)
            d["chains"]["chat"]["presets"]["new_one"] = {
                "chain": [{"provider": "vendor_b", "model": "small", "timeout_ms": 1000}]
            }

    with pytest.raises(CommandError, match="rejected, nothing changed"):
        call_command("sync_presets", "--file", str(bad_file(tmp_path, example, mutate)))
    err = capsys.readouterr().err
    assert f"{path}: " in err and message in err
    assert state() == before


def test_sync_presets_refuses_to_retire_the_live_preset(synced, tmp_path, example, capsys) -> None:
    from presets import services

    services.select_preset(chain="chat", preset="local_only", actor="alice", reason="INC-2")
    before = state()
    del example["chains"]["chat"]["presets"]["local_only"]
    del example["chains"]["chat"]["presets"]["drop_vendor_b"]
    with pytest.raises(CommandError):
        call_command("sync_presets", "--file", str(write(tmp_path, example)))
    err = capsys.readouterr().err
    assert "'local_only' is live on chat (v2) and cannot be retired" in err
    assert state() == before  # drop_vendor_b was not retired either


def test_sync_presets_retires_removed_presets(synced, tmp_path, example, capsys) -> None:
    del example["chains"]["chat"]["presets"]["drop_vendor_b"]
    call_command("sync_presets", "--file", str(write(tmp_path, example)))
    assert "- preset chat/drop_vendor_b retired" in capsys.readouterr().out
    assert Preset.objects.get(name="drop_vendor_b").retired_at is not None
    assert Selection.history.count() == 2  # retiring a preset nobody serves is not a new version


def test_sync_presets_twice_changes_nothing_the_second_time(db, example_file, capsys) -> None:
    call_command("sync_presets", "--file", str(example_file))
    before = state()
    capsys.readouterr()
    call_command("sync_presets", "--file", str(example_file))
    assert "already in sync, nothing to change" in capsys.readouterr().out
    assert state() == before
    assert [s.version for s in Selection.objects.all()] == [1, 1]


def test_sync_presets_dry_run_prints_the_diff_and_writes_nothing(db, example_file, capsys) -> None:
    call_command("sync_presets", "--file", str(example_file), "--dry-run")
    out = capsys.readouterr().out
    assert "+ chain chat" in out and "dry run, nothing written" in out
    assert Chain.objects.count() == 0


def test_a_changed_live_definition_is_applied_as_a_sync_version(synced, tmp_path, example) -> None:
    chat_step(example)["timeout_ms"] = 15000
    call_command("sync_presets", "--file", str(write(tmp_path, example)))
    selection = Selection.objects.get(chain__name="chat")
    assert (selection.version, selection.action, selection.updated_by) == (2, "sync", "system:sync")
    assert selection.steps[0]["timeout_ms"] == 15000
    assert "sha256" in selection.reason
    assert selection.previous_steps[0]["timeout_ms"] == 20000


def test_a_changed_pinned_definition_keeps_the_pin_and_its_expiry(synced, tmp_path, example) -> None:
    from presets import services

    pinned = services.select_preset(chain="chat", preset="pin_secondary", actor="a", reason="r")
    chat_step(example, "pin_secondary")["timeout_ms"] = 9000
    call_command("sync_presets", "--file", str(write(tmp_path, example)))
    selection = Selection.objects.get(chain__name="chat")
    assert (selection.version, selection.preset.name) == (3, "pin_secondary")
    assert selection.expires_at == pinned.expires_at
    assert selection.steps[0]["timeout_ms"] == 9000


def test_a_new_default_goes_live_where_the_old_default_was_served(synced, tmp_path, example) -> None:
    example["chains"]["chat"]["default"] = "drop_vendor_b"
    call_command("sync_presets", "--file", str(write(tmp_path, example)))
    selection = Selection.objects.get(chain__name="chat")
    assert (selection.version, selection.preset.name, selection.expires_at) == (2, "drop_vendor_b", None)
    assert selection.to_document()["is_default"] is True


def test_removing_a_chain_from_the_file_is_refused(synced, tmp_path, example, capsys) -> None:
    del example["chains"]["incident-summary"]
    with pytest.raises(CommandError):
        call_command("sync_presets", "--file", str(write(tmp_path, example)))
    assert "chains are never deleted" in capsys.readouterr().err


def test_raise_epoch_raises_it_past_the_current_time_and_says_so(synced) -> None:
    from presets.models import Epoch, current_epoch

    out = StringIO()
    call_command("raise_epoch", "--reason", "restored from the nightly backup", "--actor", "ops", stdout=out)
    epoch = current_epoch()
    assert epoch >= int(time.time()) - 5
    assert f"epoch raised from 0 to {epoch}" in out.getvalue()
    row = Epoch.objects.get()
    assert (row.raised_by, row.reason) == ("ops", "restored from the nightly backup")
    call_command("raise_epoch", stdout=StringIO())
    assert current_epoch() > epoch  # always forward, even within the same second
    document = Selection.objects.get(chain__name="chat").to_document()
    assert document["epoch"] == current_epoch()


def test_raise_epoch_refuses_a_blank_reason_and_changes_nothing(synced) -> None:
    from presets.models import current_epoch

    with pytest.raises(CommandError, match="reason"):
        call_command("raise_epoch", "--reason", "  ", stdout=StringIO())
    assert current_epoch() == 0


# --- failure policies ----------------------------------------------------------------------

COMPLETE = {"commit": "complete", "retry_same_step": {"max_wait_ms": 2000}}
COMPLETE_DOCUMENT = {
    "commit": "complete",
    "first_chunk_ms": None,
    "idle_ms": None,
    "retry_same_step": {"max_wait_ms": 2000},
}


def test_a_file_without_failure_policies_serves_documents_without_one(synced) -> None:
    document = Selection.objects.get(chain__name="chat").to_document()
    assert "failure_policy" not in document and "failure_policy" not in document["default"]


def test_a_chains_failure_policy_is_every_presets_unless_one_sets_its_own_or_none(synced, tmp_path, example) -> None:
    chat = example["chains"]["chat"]
    chat["failure_policy"] = COMPLETE
    chat["presets"]["pin_secondary"]["failure_policy"] = {"first_chunk_ms": 5000, "idle_ms": 2000}
    chat["presets"]["local_only"]["failure_policy"] = None
    call_command("sync_presets", "--file", str(write(tmp_path, example)))

    policies = {p.name: p.failure_policy for p in Preset.objects.filter(chain__name="chat")}
    assert policies == {
        "normal": COMPLETE_DOCUMENT,
        "drop_vendor_b": COMPLETE_DOCUMENT,
        "pin_secondary": {"commit": "first_chunk", "first_chunk_ms": 5000, "idle_ms": 2000, "retry_same_step": None},
        "local_only": None,
    }


def test_a_changed_policy_of_the_live_preset_is_a_new_version_its_document_and_default_carry(
    synced, tmp_path, example
) -> None:
    from presets import services

    example["chains"]["chat"]["presets"]["normal"]["failure_policy"] = COMPLETE
    call_command("sync_presets", "--file", str(write(tmp_path, example)))
    selection = Selection.objects.get(chain__name="chat")
    assert (selection.version, selection.action) == (2, "sync")
    document = selection.to_document()
    assert document["failure_policy"] == COMPLETE_DOCUMENT
    assert document["default"]["failure_policy"] == COMPLETE_DOCUMENT

    pinned = services.select_preset(chain="chat", preset="pin_secondary", actor="a", reason="r")
    document = pinned.to_document()
    assert "failure_policy" not in document  # pin_secondary has none
    assert document["default"]["failure_policy"] == COMPLETE_DOCUMENT  # what it falls back to has
    extended = services.extend_pin(
        chain="chat", actor="a", reason="longer", expires_at=pinned.expires_at + timedelta(hours=2)
    )
    assert extended.failure_policy is None

    call_command("sync_presets", "--file", str(write(tmp_path, example)))  # the same file again
    assert Selection.objects.get(chain__name="chat").version == extended.version
