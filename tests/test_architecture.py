"""The layers of docs/ARCHITECTURE.md hold: import-linter's contracts (.importlinter) pass on
the code as it is, and fail, naming the contract, when a module imports the wrong way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = (
    "controlplane",
    "http_api",
    "pages",
    "commands",
    "worker",
    "chatops",
    "read_path",
    "audit",
    "presets",
    "relay",
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'sdk'}"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_code_keeps_every_import_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


LAYERS = "Layers: wiring, interfaces, read path, audit, presets"
WRONG_IMPORTS = [
    # (module that imports, what it imports, the contract that must break)
    ("presets/services.py", "pages.views", LAYERS),
    ("presets/models.py", "audit.alerts", LAYERS),
    ("audit/alerts.py", "controlplane.metrics", LAYERS),
    ("audit/delivery.py", "worker.tasks", LAYERS),
    ("audit/fleet.py", "read_path.snapshot", LAYERS),
    ("read_path/snapshot.py", "pages.display", LAYERS),
    ("pages/views.py", "controlplane.urls", LAYERS),
    ("pages/views.py", "http_api.chains", LAYERS),
    ("commands/operations.py", "pages.views", LAYERS),
    ("presets/selectors.py", "audit.models", "presets imports nothing of audit"),
    # An import inside a function counts as much as one at the top.
    ("presets/services.py", "def later():\n    from audit import alerts", "presets imports nothing of audit"),
    ("audit/usage.py", "def later():\n    from http_api import fleet", LAYERS),
    ("read_path/snapshot.py", "http_api.chains", "The read path imports no DRF"),
    ("audit/fleet.py", "rest_framework.serializers", "The domain (presets and audit) speaks no HTTP"),
    ("read_path/http.py", "read_path.front", "No import circles"),
    # The relay runs where there is no database: nothing it imports may need one.
    ("relay/app.py", "presets.models", "The relay needs no database"),
    ("read_path/held.py", "django.db", "The relay needs no database"),
    ("relay/disk.py", "read_path.snapshot", "The relay needs no database"),
    ("read_path/held.py", "relay.app", LAYERS),
    # The Slack app's endpoints are an interface: they share nothing with the pages.
    ("chatops/views.py", "pages.views", LAYERS),
]


@pytest.mark.parametrize(
    ("module", "imported", "contract"), WRONG_IMPORTS, ids=[f"{m} imports {i.split()[-1]}" for m, i, _ in WRONG_IMPORTS]
)
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, module: str, imported: str, contract: str) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copytree(
        ROOT / "sdk" / "chainclient", tmp_path / "sdk" / "chainclient", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    assert lint_imports(tmp_path).returncode == 0  # the copy is as clean as the original
    with open(tmp_path / module, "a") as source:
        statement = imported if imported.startswith("def ") else f"import {imported}"
        source.write(f"\n{statement}  # the deliberate mistake\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts")[-1]
    assert contract in broken, result.stdout
