"""The secret key: a process refuses to start without a strong SECRET_KEY, in one line naming
it and how to generate one; a local run uses the key generated once under VAR_DIR (mode 0600)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from controlplane.secret_key import configured_secret_key, create_local_key, weakness

STRONG = "3vQ9-x!fP0r7Lz@uW2eN5tY8bC1mA6dS4gH" + "k7Jq2Rw9Zt4Yp6Xs8Vn1"


@pytest.mark.parametrize(
    "key,why",
    [
        ("a" * 10 + "bcdef", "15 characters, fewer than 50"),
        ("ab" * 40, "2 different characters, fewer than 5"),
        ("django-insecure-" + STRONG, "starts with 'django-insecure-'"),
    ],
    ids=["short", "few-characters", "django-insecure"],
)
def test_a_weak_key_is_refused_saying_why_and_how_to_make_one(key: str, why: str, tmp_path: Path) -> None:
    assert why in str(weakness(key))
    with pytest.raises(ImproperlyConfigured) as refused:
        configured_secret_key(key, local_file=tmp_path / "secret_key", create=True)
    message = str(refused.value)
    assert message.startswith("SECRET_KEY is too weak") and why in message
    assert "secrets.token_urlsafe(50)" in message and "\n" not in message
    assert not (tmp_path / "secret_key").exists()  # a set key is never replaced by a local one


def test_a_strong_key_is_used_as_given(tmp_path: Path) -> None:
    assert weakness(STRONG) is None
    assert configured_secret_key(STRONG, local_file=tmp_path / "secret_key", create=True) == STRONG


def test_the_local_key_is_generated_once_private_and_strong(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret_key"
    assert create_local_key(path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = configured_secret_key("", local_file=path, create=False)
    assert weakness(key) is None
    assert create_local_key(path) is False
    assert configured_secret_key("", local_file=path, create=True) == key
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]  # no draft left behind


def test_a_local_key_others_may_read_or_a_weak_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    create_local_key(path)
    path.chmod(0o644)
    with pytest.raises(ImproperlyConfigured, match=r"other users may read \(mode 0644\): chmod 600"):
        configured_secret_key("", local_file=path, create=False)
    path.write_text("short\n")
    path.chmod(0o600)
    with pytest.raises(ImproperlyConfigured, match="too weak"):
        configured_secret_key("", local_file=path, create=False)


# --- the real process ------------------------------------------------------------------------


def manage_check(var_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py check` as a deployment runs it: no SECRET_KEY unless given, its own VAR_DIR."""
    base = {key: value for key, value in os.environ.items() if key not in {"SECRET_KEY", "DEBUG", "VAR_DIR"}}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env={**base, "VAR_DIR": str(var_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.system
def test_without_a_key_the_process_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    done = manage_check(tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: SECRET_KEY is not set: set it to ")
    assert "secrets.token_urlsafe(50)" in last and str(tmp_path / "secret_key") in last
    assert not (tmp_path / "secret_key").exists()


@pytest.mark.system
def test_with_the_key_the_makefile_generates_or_with_debug_it_starts(tmp_path: Path) -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "controlplane.secret_key", str(tmp_path / "made" / "secret_key")],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert generated.returncode == 0 and "Generated a local secret key" in generated.stdout, generated.stderr
    done = manage_check(tmp_path / "made")
    assert done.returncode == 0, done.stderr
    assert "AXES" not in done.stdout + done.stderr  # no banner from every command

    debug = manage_check(tmp_path / "debug", DEBUG="true")
    assert debug.returncode == 0, debug.stderr
    assert stat.S_IMODE((tmp_path / "debug" / "secret_key").stat().st_mode) == 0o600
