"""`manage.py bootstrap` (the release step) and `manage.py ensure_local_admin` (`make run`):
the role groups and the first admin, created once and never changed afterwards; and `make
run` showing how to sign in last."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import urllib.request
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError

from tests import servers

pytestmark = pytest.mark.django_db


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def password_of(username: str, password: str) -> User | None:
    """The user, when ``password`` is theirs."""
    user = User.objects.filter(username=username).first()
    return user if user is not None and user.check_password(password) else None


def boxed_password(output: str) -> str:
    found = re.search(r"^\|\s+password: (\S+)\s+\|$", output, re.MULTILINE)
    assert found, output
    return found.group(1)


@pytest.fixture
def admin_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("ADMIN_USERNAME", "ADMIN_EMAIL", "ADMIN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_bootstrap_creates_the_groups_and_prints_a_generated_password_once(admin_env: Any, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = "https://chains.example.com"
    Group.objects.filter(name="oncall").delete()
    admin_env.setenv("ADMIN_USERNAME", "root-admin")

    first = run("bootstrap")
    assert "created oncall" in first
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "oncall"}
    assert "Sign in at https://chains.example.com/accounts/login/" in first
    password = boxed_password(first)
    user = password_of("root-admin", password)
    assert user is not None and user.is_superuser and user.is_staff

    again = run("bootstrap")
    assert "password:" not in again and "exists: left as it is" in again
    assert password_of("root-admin", password) is not None


def test_bootstrap_never_changes_an_existing_admin_s_password(admin_env: Any) -> None:
    User.objects.create_superuser("admin", "", "the-original-pass-9")
    admin_env.setenv("ADMIN_PASSWORD", "a-new-and-long-pass-7")
    output = run("bootstrap")
    assert "ADMIN_PASSWORD is not applied to it" in output
    assert password_of("admin", "the-original-pass-9") is not None


def test_bootstrap_uses_admin_password_without_printing_it(admin_env: Any) -> None:
    admin_env.setenv("ADMIN_PASSWORD", "correct-horse-battery-9")
    admin_env.setenv("ADMIN_EMAIL", "ops@example.com")
    output = run("bootstrap")
    assert "correct-horse-battery-9" not in output and "created with the password in ADMIN_PASSWORD" in output
    user = password_of("admin", "correct-horse-battery-9")
    assert user is not None and user.email == "ops@example.com"


@pytest.mark.parametrize(
    "variable,value,words",
    [
        ("ADMIN_PASSWORD", "password", "too common"),
        ("ADMIN_PASSWORD", "short", "too short"),
        ("ADMIN_USERNAME", "no spaces please", "valid username"),
        ("ADMIN_EMAIL", "not-an-address", "valid email"),
    ],
    ids=["common-password", "short-password", "bad-username", "bad-email"],
)
def test_bootstrap_refuses_bad_admin_settings_and_creates_nobody(
    admin_env: Any, variable: str, value: str, words: str
) -> None:
    admin_env.setenv(variable, value)
    with pytest.raises(CommandError, match=rf"^{variable}: .*{words}.*no admin was created"):
        run("bootstrap")
    assert not User.objects.exists()


def test_the_local_admin_keeps_one_password_and_prints_it_in_a_box(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    first = run("ensure_local_admin", "--url", "http://127.0.0.1:8123/")
    assert "Sign in at http://127.0.0.1:8123/" in first and "user:     admin" in first
    password = boxed_password(first)
    assert (tmp_path / "admin-password.txt").read_text().strip() == password
    assert password_of("admin", password) is not None
    # Every line of the box is as wide as the others.
    assert len({len(line) for line in first.strip().splitlines()}) == 1

    assert boxed_password(run("ensure_local_admin")) == password


def test_the_local_admin_made_elsewhere_keeps_its_password(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    User.objects.create_superuser("admin", "", "set-by-a-person-42")
    output = run("ensure_local_admin")
    assert "(unchanged)" in output and "changepassword admin" in output
    assert password_of("admin", "set-by-a-person-42") is not None
    assert not (tmp_path / "admin-password.txt").exists()


@pytest.mark.system
def test_make_run_shows_the_sign_in_box_last_once_web_and_worker_are_up(tmp_path: Path) -> None:
    """`python -m controlplane.run_local` (make run's last step) on SQLite and the filesystem
    broker: the box comes after the worker's banner and ready line, when the web answers."""
    port = servers.free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DATABASE_", "CELERY_", "ADMIN_"))}
    env.update({"VAR_DIR": str(tmp_path), "SECRET_KEY": secrets.token_urlsafe(50)})
    python = [sys.executable, "manage.py"]
    subprocess.run([*python, "migrate", "--no-input", "-v0"], cwd=settings.BASE_DIR, env=env, check=True, timeout=120)
    (tmp_path / "static").mkdir()
    run_local = subprocess.Popen(
        [sys.executable, "-m", "controlplane.run_local", f"127.0.0.1:{port}"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    watchdog = threading.Timer(120, run_local.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert run_local.stdout is not None
        for line in run_local.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops"):
                break
        output = "\n".join(lines)
        assert lines and lines[-1].startswith("Ctrl-C stops"), output[-3000:]
        box = next(i for i, line in enumerate(lines) if line.startswith("+--"))
        ready = next(i for i, line in enumerate(lines) if line.endswith(" ready."))
        banner = next(i for i, line in enumerate(lines) if "[tasks]" in line)
        assert banner < ready < box, output[-3000:]
        assert f"Sign in at http://127.0.0.1:{port}/" in lines[box + 1]
        assert boxed_password("\n".join(lines[box:])) == (tmp_path / "admin-password.txt").read_text().strip()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        os.killpg(run_local.pid, signal.SIGTERM)
        run_local.wait(30)
        watchdog.cancel()
    assert run_local.returncode == 0
