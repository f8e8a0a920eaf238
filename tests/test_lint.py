"""The repository stays clean under its own lint and format settings (ruff.toml); `make lint`
also runs mypy and the import contracts (tests/test_architecture.py runs those here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings


@pytest.mark.system
def test_ruff_finds_nothing() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "check", "--no-cache", "."], cwd=settings.BASE_DIR, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.system
def test_ruff_format_would_change_nothing() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "format", "--check", "--no-cache", "."], cwd=settings.BASE_DIR, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
