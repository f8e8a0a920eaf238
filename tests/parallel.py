"""The suite in parallel processes (pytest-xdist; `make test`'s TEST_PROCESSES, README "The two
commands"). Most of the suite's time is system tests waiting on real processes and clocks, so
its files run in a few processes at once; each keeps to itself what is per process:

- its test database (pytest-django names it after the process) and its Redis database
  (tests/conftest.py's ``redis_url``);
- its metrics files: this module, loaded before Django's settings (pytest.ini's ``-p``), gives
  each process a ``PROMETHEUS_MULTIPROC_DIR`` of its own, so a test that counts requests counts
  only its own;
- the set-ups its system tests share: every test that commits (``transactional_db``,
  ``live_server``, ``django_db(transaction=True)``) or uses a module-scoped set-up of its
  own module (a stack of real processes, a cluster, a build) runs in its module's group
  (``--dist loadgroup``), so a module's real stack, cluster or browser is started once, in
  one process, not once in each process that is handed one of its tests.

The tests that commit are the suite's system tests too: they commit because a real process
(a web server, a worker, a browser's page, a relay, a disposable cluster) reads what they
wrote. They get the ``system`` marker here, as do the tests that use a browser or a set-up
their module shares (module-scoped: a stack, a cluster, nginx); the others that start a
process (``make run``, the linters, a build) carry it themselves.
``make test-fast`` leaves every ``system`` test out (README, "The two commands"). A test
without the marker that starts a process (``subprocess``, ``os.fork``; in its fixtures too)
fails, saying to mark it: the fast loop runs none, and the marks stay true
(tests/test_parallel.py).

Each process is given the tests that do not commit before those that do, and runs them in
that order (``pytest_xdist_make_scheduler``; pytest-django orders a process's own the same
way), so a test never finds the rows the migrations made (the role groups) flushed by a
committing test that ran before it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pytest_django.plugin import validate_django_db

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

if WORKER:
    metrics = Path(__file__).resolve().parent.parent / "var" / f"prometheus-{WORKER}"
    metrics.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)


# The fixtures of a test that commits (for a real process to read what it wrote).
COMMITS = {"transactional_db", "live_server"}
# How the name of a group ends when one of its tests commits (``_order``).
COMMITTING = "+commits"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    grouped: list[tuple[pytest.Item, str]] = []
    committing: set[str] = set()
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        commits, shares = _commits(item, fixtures), _shares_a_module_set_up(item)
        # A module may name its group itself (two modules sharing one build); else its name.
        explicit = item.get_closest_marker("xdist_group")
        group = _group_name(explicit) if explicit is not None else None
        if group is None and (commits or shares):
            group = item.module.__name__ if item.module else item.nodeid
        if group is not None:
            grouped.append((item, group))
            if commits:
                committing.add(group)
        if commits or (shares and item.nodeid.startswith("tests/")) or "browser" in fixtures:
            item.add_marker(pytest.mark.system)
    for item, group in grouped:  # the closest mark: the test's own, before its module's
        item.add_marker(pytest.mark.xdist_group(group + COMMITTING if group in committing else group))


def _group_name(mark: pytest.Mark) -> str:
    """The name an ``xdist_group`` mark gives, as pytest-xdist reads it."""
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``, each process given every test that does not commit before any
    that does: a committing test empties the process's database when it ends (the rows the
    migrations made, the role groups, with it), so a test after it in that process would not
    find them. pytest-xdist hands out the largest groups first (``--loadscope-reorder``);
    here the tests that do not commit go first, in the suite's order (the groups that only
    share a set-up among them, so that the heavy set-ups do not all meet at the end), then
    the groups that commit, the largest first, so none of them is left for the end."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CommittingLast(LoadGroupScheduling):
        ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is whole at the first assignment
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: _order(*unit))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return CommittingLast(config, log)


def _order(scope: str, tests: dict[str, bool]) -> tuple[bool, int]:
    """A test alone (its node id for its scope) or a group that does not commit (a module's
    name) before a group that does (its name ends with ``COMMITTING``), in the suite's order;
    the groups that commit the largest first."""
    commits = scope.endswith(COMMITTING)
    return (commits, -len(tests) if commits else 0)


_ungrouped: list[str] = []  # why the groups do not hold, when they do not


def pytest_collection_finish(session: pytest.Session) -> None:
    """In a worker of ``--dist loadgroup``, note whether the groups hold: pytest-xdist groups
    by a suffix it puts on each grouped test's id, which pytest 9.2 ignores
    (pytest-dev/pytest-xdist#1386). The tests would still pass, each module's shared stack
    started in every process, and the suite minutes slower with nothing said: every test then
    fails saying why (``pytest_runtest_setup``; an error in a worker's collection is not shown)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    grouped = next((item for item in session.items if item.get_closest_marker("xdist_group")), None)
    if grouped is not None and "@" not in grouped.nodeid:
        _ungrouped.append(
            f"pytest-xdist's --dist loadgroup does not group under pytest {pytest.__version__} ({grouped.nodeid} "
            "has no @group suffix, pytest-dev/pytest-xdist#1386): install requirements-dev.txt's pytest "
            "(make install)"
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _ungrouped:
        pytest.fail(_ungrouped[0], pytrace=False)


def _commits(item: pytest.Item, fixtures: set[str]) -> bool:
    """Whether the test commits: it uses a fixture that does, or its ``django_db`` mark says
    ``transaction=True``, as pytest-django reads the mark."""
    marker = item.get_closest_marker("django_db")
    return bool(COMMITS & fixtures) or (marker is not None and validate_django_db(marker)[0])


def _shares_a_module_set_up(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture of its own module: those set up what a
    module's tests share, once, which is why they are module-scoped. In the control plane's
    suite they start processes (a stack, a cluster, nginx, Node's packages), so their tests are
    system tests; the SDK's run its conformance scenarios, build its packages, read files or
    set up tracing, and its suite marks its few system tests itself."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    return any(
        definitions[-1].scope == "module" and definitions[-1].baseid == module
        for definitions in info.name2fixturedefs.values()
    )


# --- a test that starts a process is a system test ----------------------------------------

_running: list[pytest.Item] = []
_popen_init = subprocess.Popen.__init__


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """While a test runs (its fixtures too), note which it is: a process it starts is checked
    against its marks."""
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def _unmarked(what: str) -> None:
    """Fail the running test if it is not marked system: it starts ``what``."""
    item = _running[-1] if _running else None
    if item is not None and item.get_closest_marker("system") is None:
        raise pytest.fail.Exception(
            f"{item.nodeid} starts a process ({what}): mark it @pytest.mark.system "
            "(tests/parallel.py), so that make test-fast, which runs no process, leaves it out",
            pytrace=False,
        )


def _checked_popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    _unmarked(_command(args))
    _popen_init(self, args, *rest, **kwargs)


def _checked_fork() -> int:
    _unmarked("os.fork()")
    return _fork()


def _command(args: Any) -> str:
    words = [str(word) for word in ([args] if isinstance(args, str | os.PathLike) else args)]
    return " ".join(Path(words[0]).name.split() + words[1:3]) + (" ..." if len(words) > 3 else "")


subprocess.Popen.__init__ = _checked_popen_init  # type: ignore[method-assign]
if hasattr(os, "fork"):
    _fork = os.fork
    os.fork = _checked_fork
