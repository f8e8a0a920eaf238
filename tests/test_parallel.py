"""The suite's marks hold (tests/parallel.py): a test that starts a process without the
``system`` mark fails saying to mark it, and a test that commits is a system test whichever
way it asks to commit; so ``make test-fast`` runs no process and commits nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

TESTS = """
import os
import os
import subprocess
import sys

import pytest


def test_starts_a_process_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_forks_unmarked():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


@pytest.mark.system
def test_starts_a_process_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_nothing():
    pass


@pytest.mark.django_db(transaction=True)
def test_commits_through_its_mark():
    pass


def test_commits_through_a_fixture(transactional_db):
    pass
"""


@pytest.mark.system  # it runs pytest in a process of its own
def test_an_unmarked_test_that_starts_a_process_fails_and_committing_tests_are_system(tmp_path: Path) -> None:
    (tmp_path / "test_marks.py").write_text(TESTS)
    # The suite's own settings (pytest.ini: tests.parallel loaded), on a file of its own.
    run = [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", ".", "-q"]
    everything = subprocess.run(
        [*run, "-k", "not commits", str(tmp_path / "test_marks.py")],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    fast = subprocess.run(
        [*run, "--collect-only", "-m", "not system", str(tmp_path / "test_marks.py")],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert "2 failed, 2 passed" in everything.stdout, everything.stdout
    for name, what in [("test_starts_a_process_unmarked", "python -c pass"), ("test_forks_unmarked", "os.fork()")]:
        assert f"{name} starts a process ({what}): mark it @pytest.mark.system" in everything.stdout
    collected = [line.rsplit("::", 1)[-1] for line in fast.stdout.splitlines() if "::" in line]
    assert collected == ["test_starts_a_process_unmarked", "test_forks_unmarked", "test_starts_nothing"]


SHARED = """
import os

import pytest


@pytest.fixture(scope="module")
def stack():
    with open(os.environ["SET_UPS"], "a") as set_ups:  # one line each time the stack starts
        set_ups.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    return "stack"


@pytest.mark.parametrize("n", range(12))
def test_uses_the_stack(stack, n):
    assert stack == "stack"
"""


@pytest.mark.system  # it runs pytest in processes of its own
def test_a_module_set_up_starts_once_whatever_the_processes(tmp_path: Path) -> None:
    """A module-scoped set-up (a stack of real processes, a cluster, a build) is started in
    one process, not in each of `make test`'s processes that is handed one of its tests: the
    suite's time is mostly such set-ups (tests/parallel.py)."""
    (tmp_path / "test_shared.py").write_text(SHARED)
    set_ups = tmp_path / "set-ups"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", ".", "-q", "-n", "3", "--dist", "loadgroup"]
        + [str(tmp_path / "test_shared.py")],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "SET_UPS": str(set_ups)},
    )

    assert "12 passed" in run.stdout, run.stdout + run.stderr
    assert len(set_ups.read_text().splitlines()) == 1, set_ups.read_text()
