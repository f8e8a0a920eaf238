"""Running manage.py commands as the command tests do: in process (what they print, or the one
line they refuse with) and from a shell (exit status and stderr, as an operator sees them)."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command


def run(*args: str) -> str:
    """What the command prints."""
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refusal(*args: str) -> str:
    """The command's refusal: its CommandError's one line."""
    with pytest.raises(CommandError) as refused:
        call_command(*args, stdout=StringIO())
    return str(refused.value)


def from_a_shell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python manage.py *args`` in a process of its own (``env``: the test's subprocess_env)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
