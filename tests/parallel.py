"""The suite in parallel processes (pytest-xdist; `make test`'s TEST_PROCESSES, README "The two
commands"). Most of the suite's time is system tests waiting on real processes and clocks, so
its files run in a few processes at once; each keeps to itself what is per process:

- its test database (pytest-django names it after the process) and its Redis database
  (tests/conftest.py's ``redis_url``);
- its metrics files: this module, loaded before Django's settings (pytest.ini's ``-p``), gives
  each process a ``PROMETHEUS_MULTIPROC_DIR`` of its own, so a test that counts requests counts
  only its own;
- the set-ups its system tests share: every test that commits (``transactional_db``,
  ``live_server``) runs in its module's group (``--dist loadgroup``), so a module's real stack
  or browser is started once, in one process.

Each process runs the tests it is given in the suite's order (pytest-django's: those in a
rolled-back transaction first, then those that commit), so a test never finds the rows the
migrations made (the role groups) flushed by a committing test that ran before it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

if WORKER:
    metrics = Path(__file__).resolve().parent.parent / "var" / f"prometheus-{WORKER}"
    metrics.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))
