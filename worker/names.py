"""Where a task's name comes from: the module that holds it (``worker.tasks.run_drills``), so a
name in a log, a trace or a queue says where to look.

Each task is registered under the name it had before as well (``presets.tasks.*``,
``audit.tasks.*``: the packages that held the tasks once). Messages an older release queued
(a delivery's retry waiting its countdown, a publish, a beat tick still in the queue) then run
after an upgrade instead of being refused as unknown; nothing sends the former names any more,
and they go in a later release, once every deployment's queues have drained."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import shared_task

# Every former name and the name that replaced it (tests/test_task_names.py holds both sides).
FORMER_NAMES: dict[str, str] = {}


def task(*, formerly: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``shared_task`` named after its module, also registered under its ``formerly`` name."""

    def register(run: Callable[..., Any]) -> Any:
        name = f"{run.__module__}.{run.__name__}"
        FORMER_NAMES[formerly] = name
        shared_task(name=formerly, **options)(run)
        return shared_task(name=name, **options)(run)

    return register
