"""The layers of docs/ARCHITECTURE.md hold: import-linter's contracts (.importlinter) pass on
the code as it is, and fail, naming the contract, when a module imports the wrong way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


@pytest.mark.system
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
    # The server keeps its own copy of what it agrees with the SDK (presets/wire.py).
    ("presets/models.py", "chainclient", "The server never imports the SDK"),
    ("presets/document_signatures.py", "chainclient.signatures", "The server never imports the SDK"),
    ("relay/app.py", "def later():\n    from chainclient import wire", "The server never imports the SDK"),
]


@pytest.mark.system
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


def test_the_relay_shares_exactly_the_server_modules_the_architecture_lists() -> None:
    """docs/ARCHITECTURE.md lists what the relay shares with the control plane: a module the
    relay starts to import (even through another) is in the list, or the claim is untrue."""
    import grimp

    graph = grimp.build_graph("relay", "read_path", "presets", cache_dir=None)
    imported = {
        module for module in graph.find_upstream_modules("relay", as_package=True) if not module.startswith("relay")
    }
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rule = text[text.index("- **The relay needs no database**") :].split("\n- **")[0]
    listed = {path.removesuffix(".py").replace("/", ".") for path in re.findall(r"`([\w/]+\.py)`", rule)}
    listed.discard("tests.test_architecture")
    assert imported == listed


def ruff_check(path: str, source: str) -> subprocess.CompletedProcess[str]:
    """``ruff check`` (make lint) of ``source`` as if it were the file at ``path``."""
    ruff = Path(sys.executable).parent / "ruff"
    command = [str(ruff), "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"]
    return subprocess.run(command, cwd=ROOT, input=source, capture_output=True, text=True)


DOMAIN_HTTP = [
    ("presets/services.py", "from django.http import HttpResponse"),
    ("presets/models.py", "import django.http"),
    ("audit/alerts.py", "from django.shortcuts import get_object_or_404"),
    ("audit/spend.py", "from django.urls import reverse"),
    ("presets/plans.py", "def later():\n    from django.views import View"),
]


@pytest.mark.system
@pytest.mark.parametrize(("module", "statement"), DOMAIN_HTTP, ids=[m for m, _ in DOMAIN_HTTP])
def test_the_domain_importing_django_http_fails_the_lint(module: str, statement: str) -> None:
    clean = (ROOT / module).read_text()
    assert ruff_check(module, clean).returncode == 0
    result = ruff_check(module, f"{clean}\n{statement}  # the deliberate mistake\n")
    assert result.returncode != 0
    assert "the domain speaks no HTTP" in result.stdout, result.stdout


@pytest.mark.system
def test_an_interface_may_import_django_http() -> None:
    assert ruff_check("pages/views.py", (ROOT / "pages/views.py").read_text()).returncode == 0
    assert "django.http" in (ROOT / "pages/views.py").read_text()


def test_every_path_the_architecture_names_exists() -> None:
    """docs/ARCHITECTURE.md says where each behaviour lives: a path it names that is gone
    (moved, renamed) sends a newcomer to nothing."""
    named = list(_named_paths((ROOT / "docs" / "ARCHITECTURE.md").read_text()))
    assert len(named) > 150  # the tables are read, not skipped
    missing = [f"{path} (line {line})" for line, path, bases in named if not any((b / path).exists() for b in bases)]
    assert missing == []


PATH = re.compile(r"`([\w.*/-]+(?:\.(?:py|ts|md|json|toml|yml|ini|txt|html)|/))`")
SECTION_ROOTS = {"## The SDK": ("sdk/chainclient",), "## The TypeScript client": ("sdk-ts/src", "sdk-ts")}


def _named_paths(text: str) -> Any:
    """Each path the document names, with where it may be: from the repository's root (or the
    package its section is about: the SDK's table names its own modules), and a bare file name
    in the folder of a path named before it on the same line (`http_api/alerts.py`,
    `fleet.py`)."""
    section: tuple[Path, ...] = (ROOT,)
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            section = (ROOT, *(ROOT / root for root in SECTION_ROOTS.get(line.strip(), ())))
        folders: list[Path] = []
        for path in PATH.findall(line):
            if "*" not in path:  # a pattern (`controlplane/logging_*.py`) only names a folder
                yield number, path, section if "/" in path.rstrip("/") else (*folders, *section)
            if "/" in path.rstrip("/"):
                folders.insert(0, ROOT / path.rstrip("/").rsplit("/", 1)[0])
            elif path.endswith("/"):
                folders.insert(0, ROOT / path)
