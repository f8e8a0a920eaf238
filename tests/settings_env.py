"""controlplane/settings.py run afresh under a chosen environment, for the settings' own checks."""

import os
import runpy
from pathlib import Path
from typing import Any

import pytest

SETTINGS_FILE = Path(__file__).resolve().parent.parent / "controlplane" / "settings.py"


def load_settings(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], *, clear: tuple[str, ...]
) -> dict[str, Any]:
    """The settings module's names, run with ``environment`` on top of this process's.

    Variables starting with one of ``clear`` are removed first, so what the test sets is all
    that the settings under test see of their own group.
    """
    for name in list(os.environ):
        if name.startswith(clear):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))
