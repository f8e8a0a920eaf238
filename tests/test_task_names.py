"""Task names say where the task lives (worker/names.py), and a message an older release queued
under a former name (``presets.tasks.*``, ``audit.tasks.*``) still runs after an upgrade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine

from controlplane.celery import app
from presets.models import Selection
from tests.test_expiry_sweeps import live, pin
from worker.names import FORMER_NAMES

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)

FORMERLY = {
    "presets.tasks.expire_pins": "worker.pins.expire_pins",
    "presets.tasks.run_plans": "worker.pins.run_plans",
    "presets.tasks.publish_chain": "worker.publishing.publish_chain",
    "presets.tasks.publish_chains": "worker.publishing.publish_chains",
    "audit.tasks.alert_stale_pins": "worker.tasks.alert_stale_pins",
    "audit.tasks.alert_providers": "worker.tasks.alert_providers",
    "audit.tasks.check_guards": "worker.tasks.check_guards",
    "audit.tasks.prune_provider_health": "worker.tasks.prune_provider_health",
    "audit.tasks.deliver_alert": "worker.tasks.deliver_alert",
    "audit.tasks.deliver_notification": "worker.tasks.deliver_notification",
    "audit.tasks.follow_slack_convergence": "worker.tasks.follow_slack_convergence",
    "audit.tasks.run_drills": "worker.tasks.run_drills",
}


def _function(name: str) -> object:
    run = app.tasks[name].run
    return getattr(run, "__func__", run)  # a bound task's run is a method of its task


def test_every_task_is_named_for_the_module_and_function_that_hold_it() -> None:
    app.loader.import_default_modules()
    ours = {name: task for name, task in app.tasks.items() if task.__module__.startswith("worker.")}
    current = {name for name in ours if name not in FORMER_NAMES}
    assert current == set(FORMERLY.values())
    for name in current:
        assert name == f"{ours[name].__module__}.{ours[name].__name__}"


def test_every_former_name_is_still_registered_and_runs_the_same_function_with_the_same_options() -> None:
    app.loader.import_default_modules()
    assert FORMER_NAMES == FORMERLY
    for former, name in FORMERLY.items():
        assert former in app.tasks, former
        assert _function(former) is _function(name)
        assert (app.tasks[former].max_retries, app.tasks[former].typing) == (
            app.tasks[name].max_retries,
            app.tasks[name].typing,
        )


def test_nothing_sends_a_former_name(settings) -> None:
    from audit import delivery, slack
    from presets import publishing

    sent = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    sent |= {publishing.PUBLISH_TASK, slack.FOLLOW_TASK, delivery.ALERTS.task, delivery.NOTIFICATIONS.task}
    assert sent <= set(FORMERLY.values())


def test_a_sweep_queued_under_its_former_name_reverts_a_due_pin(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(minutes=10)
        clock.shift(timedelta(minutes=11))
        assert app.tasks["presets.tasks.expire_pins"].apply().get() == 1

    assert (live().preset.name, live().action) == ("normal", "expire")
    assert Selection.history.filter(chain__name="chat", action="expire").count() == 1
