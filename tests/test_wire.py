"""What the control plane and chainclient agree on is written once, in the SDK
(``sdk/chainclient/wire.py``); the server's copy (``presets/wire.py``, from ``make wire``)
never drifts from it, and the server reads every such rule from its copy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from audit.models import LATENCY_FIELDS
from chainclient import health as sdk_health
from chainclient import types as sdk_types
from chainclient import wire as sdk_wire
from presets import wire
from presets.presets_file import PresetsFileError, parse_presets
from presets.providers import get_registry

ROOT = Path(settings.BASE_DIR)
HEADER = "# Generated from sdk/chainclient/wire.py by `make wire`: edit that file, then run `make wire`.\n"


def test_the_servers_copy_is_the_sdks_file_with_its_header() -> None:
    source = (ROOT / "sdk" / "chainclient" / "wire.py").read_text()
    copy = (ROOT / "presets" / "wire.py").read_text()
    assert copy == HEADER + source, "presets/wire.py differs from sdk/chainclient/wire.py: run `make wire`"


@pytest.mark.system
def test_make_wire_writes_the_copy(tmp_path: Path) -> None:
    (tmp_path / "sdk" / "chainclient").mkdir(parents=True)
    (tmp_path / "presets").mkdir()
    (tmp_path / "sdk" / "chainclient" / "wire.py").write_text('CHAIN_MAX_STEPS = 5\n"""Changed in the SDK."""\n')
    result = subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(tmp_path), "wire"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "presets" / "wire.py").read_text() == HEADER + 'CHAIN_MAX_STEPS = 5\n"""Changed in the SDK."""\n'


def test_both_sides_hold_the_same_values() -> None:
    names = [name for name in vars(sdk_wire) if name.isupper()]
    assert names, "the SDK's wire module defines no constants"
    assert {name: getattr(wire, name) for name in names} == {name: getattr(sdk_wire, name) for name in names}


def test_the_rules_are_read_from_the_wire_on_both_sides() -> None:
    # The SDK's health tally and the server's histogram fields follow the one histogram.
    assert sdk_health.OUTCOME_CLASSES is sdk_wire.OUTCOME_CLASSES
    assert sdk_health.LATENCY_BOUNDS_MS is sdk_wire.LATENCY_BOUNDS_MS
    assert len(LATENCY_FIELDS) == len(wire.LATENCY_BOUNDS_MS) + 1


def _refusal(steps: list[dict[str, object]]) -> list[str]:
    text = json.dumps({"chains": {"chat": {"default": "p", "presets": {"p": {"chain": steps}}}}})
    with pytest.raises(PresetsFileError) as refused:
        parse_presets(text, registry=get_registry())
    return [problem.message for problem in refused.value.problems]


def test_the_step_rules_are_the_wires_in_the_presets_file_and_the_sdk() -> None:
    step = {"provider": "vendor_a", "model": "m", "timeout_ms": wire.STEP_MAX_TIMEOUT_MS + 1}
    assert _refusal([step]) == [
        f"timeout_ms {wire.STEP_MAX_TIMEOUT_MS + 1} is out of bounds: use "
        f"{wire.STEP_MIN_TIMEOUT_MS}..{wire.STEP_MAX_TIMEOUT_MS} milliseconds"
    ]
    too_many = [
        {**step, "model": f"m{i}", "timeout_ms": wire.STEP_MIN_TIMEOUT_MS} for i in range(wire.CHAIN_MAX_STEPS + 1)
    ]
    assert _refusal(too_many) == [
        f"a preset has {wire.CHAIN_MIN_STEPS} to {wire.CHAIN_MAX_STEPS} steps, this one has "
        f"{wire.CHAIN_MAX_STEPS + 1}: split it or drop steps"
    ]
    # The SDK refuses the same chain with the same numbers.
    steps = [sdk_types.Step("vendor_a", f"m{i}", wire.STEP_MIN_TIMEOUT_MS) for i in range(wire.CHAIN_MAX_STEPS + 1)]
    with pytest.raises(sdk_types.DocumentInvalid, match=f"{wire.CHAIN_MIN_STEPS}..{wire.CHAIN_MAX_STEPS} steps"):
        sdk_types.check_steps(steps)
    with pytest.raises(
        sdk_types.DocumentInvalid, match=f"outside {wire.STEP_MIN_TIMEOUT_MS}..{wire.STEP_MAX_TIMEOUT_MS}"
    ):
        sdk_types.check_steps([sdk_types.Step("vendor_a", "m", wire.STEP_MAX_TIMEOUT_MS + 1)])
