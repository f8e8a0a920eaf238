"""`make run` needs Python and make only: on a PATH without npm or node, with no SECRET_KEY,
no DATABASE_URL (SQLite under VAR_DIR) and no CELERY_BROKER_URL, it serves the pages."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import needs
from tests.servers import free_port, wait_for

NODE_TOOLS = {"npm", "npx", "node", "nodejs", "corepack"}
# Whatever configures a deployment or the suite: `make run` must need none of it.
NOT_PASSED = ("SECRET_KEY", "DEBUG", "DATABASE_", "CELERY_", "ALERT_", "PIN_", "EMAIL_", "LISTEN_DATABASE")
NOT_PASSED += ("VAR_DIR", "PORT", "VENV", "PROMETHEUS_MULTIPROC_DIR", "DJANGO_SETTINGS_MODULE", "MAKE", "MFLAGS")


def path_without_node(bin_dir: Path) -> str:
    """A PATH of one folder holding every program the real PATH finds, except npm and node."""
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name in NODE_TOOLS or link.exists() or link.is_symlink():
                continue  # the first on PATH wins, as in the shell
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(bin_dir)


def answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@pytest.mark.system
def test_make_run_serves_the_pages_without_npm_or_any_configuration(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        needs("needs make")
    path = path_without_node(tmp_path / "bin")
    assert not any((Path(path) / tool).exists() for tool in NODE_TOOLS)
    port = free_port()
    var_dir = tmp_path / "var"
    env = {key: value for key, value in os.environ.items() if not key.startswith(NOT_PASSED)}
    env.update({"PATH": path, "VAR_DIR": str(var_dir), "PORT": str(port)})
    venv = Path(sys.prefix)
    # The virtualenv is there: --assume-old keeps make from reinstalling it, whatever the
    # requirements files' times say, so this runs exactly the rest of the run target.
    command = [make, f"--assume-old={venv}/.installed", "run", f"VENV={venv}", f"PORT={port}"]
    log_path = tmp_path / "make-run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        served = wait_for(
            lambda: process.poll() is None and answers_200(f"http://127.0.0.1:{port}/accounts/login/"), 240, every=0.5
        )
        output = log_path.read_text(errors="replace")
        assert served, f"make run did not serve /accounts/login/ (exit {process.poll()}):\n{output[-4000:]}"
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    assert "pip install" not in output and "npm" not in output
    # The local secret key the run target generated, private to its owner, and SQLite, both in VAR_DIR.
    assert stat.S_IMODE((var_dir / "secret_key").stat().st_mode) == 0o600
    assert (var_dir / "controlplane.sqlite3").exists()
