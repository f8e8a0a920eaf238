"""One state directory, Python and TypeScript clients saving to it at once: the file never goes back.

Processes of both SDKs (tests/state_writer.py, tests/ts_client/state_writer.mjs) save
documents of one chain to one ``state_dir``, round after round, each its own mix of older
and newer ``(epoch, version)``, all at once. After every round the file must hold exactly the
newest document any of them saved (or found already there): a save that let an older
document replace a newer one, because the two SDKs' locks did not exclude each other, shows
as a file holding less. The file must also always read back (its digest matching). The
directory starts with the empty ``{chain}.lock`` an older Python client leaves behind.

About 10 s, on purpose: six processes contending for one lock for 40 rounds is what lets an
interleaving the two SDKs' old locks allowed show up (it did in round 1 to 26 before); nothing
in it waits on a clock.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from chainclient import Provider, Registry
from chainclient.state_file import StateFile
from tests.test_typescript_client import CONTRACT, ROOT, Probe, built  # noqa: F401

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("tests.test_typescript_client")]

CHAIN = CONTRACT["chain"]
REGISTRY = Registry(
    {
        name: Provider(spec["destination"], {model: set(caps) for model, caps in spec["models"].items()})
        for name, spec in CONTRACT["registry"].items()
    }
)
WRITERS_PER_SDK = 3
ROUNDS = 40
SAVES_PER_ROUND = 8


class Writer(Probe):
    """One writer process: a list of documents in, a result per document out."""

    def __init__(self, argv: list[str]) -> None:
        self.start(argv)
        assert self.first["event"] == "ready", self.first

    def send(self, documents: list[dict[str, Any]]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(documents) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            assert self.process.wait(10) == 0, self.process.stderr.read() if self.process.stderr else ""
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


def document(epoch: int, version: int) -> dict[str, Any]:
    """The chain's document at ``(epoch, version)``: the same content wherever it is saved from."""
    chain = [{"provider": "vendor_a", "model": "large", "timeout_ms": 20000}]
    return {
        "name": CHAIN,
        "epoch": epoch,
        "version": version,
        "preset": "normal",
        "is_default": True,
        "chain": chain,
        "marking": {"degraded": False, "note": ""},
        "updated_by": "alice",
        "reason": f"change {epoch}.{version}",
        "updated_at": "2026-12-05T04:59:00.000Z",
        "expires_at": None,
        "default": {"preset": "normal", "chain": chain, "marking": {"degraded": False, "note": ""}},
    }


def on_disk(state_dir: Path) -> tuple[int, int]:
    """The ``(epoch, version)`` the file holds, read as a restarted client reads it (its digest checked)."""
    loaded = StateFile(state_dir, chain=CHAIN, registry=REGISTRY).load()
    assert loaded.refused is None, loaded.refused
    assert loaded.document is not None
    return loaded.document.order


def test_python_and_typescript_writers_sharing_a_state_dir_never_take_the_file_back(
    built: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    # What an older Python client leaves: an empty lock file, long since released.
    legacy = state_dir / f"{CHAIN}.lock"
    legacy.touch()
    os.utime(legacy, (0, 0))
    registry_json = json.dumps(CONTRACT["registry"])
    python = [sys.executable, str(ROOT / "tests" / "state_writer.py"), str(state_dir), CHAIN, registry_json]
    node = ["node", str(ROOT / "tests" / "ts_client" / "state_writer.mjs"), str(state_dir), CHAIN, registry_json]
    writers: list[Writer] = []
    try:
        writers = [Writer(python if n % 2 == 0 else node) for n in range(2 * WRITERS_PER_SDK)]
        rng = random.Random(20261205)
        newest: tuple[int, int] | None = None
        outcomes: dict[str, int] = {}
        for round_ in range(ROUNDS):
            # Each writer's own mix: mostly around this round's level, up and down, with the
            # epoch raised now and then (a restore), so older and newer saves interleave.
            level = round_ * 10
            batches = [
                [
                    (round_ // 10 + rng.choice((0, 0, 0, -1)), max(1, level + rng.randint(-25, 25)))
                    for _ in range(SAVES_PER_ROUND)
                ]
                for _ in writers
            ]
            batches = [[(max(0, e), v) for e, v in batch] for batch in batches]
            for writer, batch in zip(writers, batches, strict=True):
                writer.send([document(e, v) for e, v in batch])
            for writer, batch in zip(writers, batches, strict=True):
                results = writer.read(timeout=60)
                assert len(results) == len(batch), results
                for order, result in zip(batch, results, strict=True):
                    kind = result.split(":")[0]
                    outcomes[kind] = outcomes.get(kind, 0) + 1
                    if kind in ("wrote", "held"):
                        newest = order if newest is None else max(newest, order)
            assert newest is not None
            held = on_disk(state_dir)
            assert held == newest, f"round {round_}: the file holds {held}, but {newest} was saved ({outcomes})"
        saves = ROUNDS * SAVES_PER_ROUND * len(writers)
        # Not a vacuous pass: nearly every save went through the lock (a few may time out on a
        # slow disk, and fail loudly, which is allowed).
        assert outcomes.get("wrote", 0) + outcomes.get("held", 0) >= 0.95 * saves, outcomes
        assert outcomes.get("wrote", 0) >= ROUNDS, outcomes
    finally:
        for writer in writers:
            writer.close()
