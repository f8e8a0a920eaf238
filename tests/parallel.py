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

The tests that commit are the suite's system tests too: they commit because a real process
(a web server, a worker, a browser's page, a relay, a disposable cluster) reads what they
wrote. They get the ``system`` marker here, as do the tests that use a browser or a set-up
their module shares (module-scoped: a stack, a cluster, nginx); the others that start a
process (``make run``, the linters, a build) carry it themselves.
``make test-fast`` leaves every ``system`` test out (README, "The two commands").

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


# The fixtures of a test that commits (for a real process to read what it wrote).
COMMITS = {"transactional_db", "live_server"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if COMMITS & fixtures:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))
        if COMMITS & fixtures or "browser" in fixtures or _shares_a_module_set_up(item):
            item.add_marker(pytest.mark.system)


def _shares_a_module_set_up(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture of its own module: in the control plane's
    suite those start what a module's tests share (a stack of real processes, a cluster,
    nginx, Node's packages), which is why they are module-scoped. (The SDK's module-scoped
    fixtures read files or set up tracing: its suite marks its few system tests itself.)"""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    return module.startswith("tests/") and any(
        definitions[-1].scope == "module" and definitions[-1].baseid == module
        for definitions in info.name2fixturedefs.values()
    )
