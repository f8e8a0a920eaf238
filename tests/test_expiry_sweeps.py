"""The expiry sweep as Celery, cron and the read path run it: one revert per pin, reported as
a pin_expired alert in the same transaction."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection, transaction

from audit import alerts
from audit.models import Alert
from controlplane.celery import app
from presets import services
from presets.models import Selection
from worker import pins as tasks

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def pin(minutes: int = 10, preset: str = "pin_secondary") -> Selection:
    return services.select_preset(
        chain="chat",
        preset=preset,
        actor="alice",
        reason="INC-7 vendor_a returns garbage",
        expires_at=timedelta(minutes=minutes),
    )


def test_the_beat_schedule_runs_every_sweep_as_registered_tasks(settings) -> None:
    app.loader.import_default_modules()
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert {entry["task"] for entry in schedule.values()} == {
        "worker.pins.expire_pins",
        "worker.pins.run_plans",
        "worker.tasks.check_guards",
        "worker.tasks.alert_stale_pins",
        "worker.tasks.alert_providers",
        "worker.tasks.prune_provider_health",
        "worker.tasks.run_drills",
    }
    for entry in schedule.values():
        assert entry["task"] in app.tasks
    assert schedule["expire-pins"]["schedule"] == 15.0
    assert schedule["run-plans"]["schedule"] == 5.0  # planned pins start within 15 s
    assert schedule["check-guards"]["schedule"] == 15.0
    assert schedule["alert-stale-pins"]["schedule"] == 60.0
    assert schedule["alert-providers"]["schedule"] == 15.0
    assert schedule["prune-provider-health"]["schedule"] == 600.0
    assert schedule["run-drills"]["schedule"] == 5.0  # drills start, end and are judged within seconds


def test_the_task_reverts_a_due_pin_with_a_reason_naming_it_and_raises_pin_expired(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(minutes=10)
        clock.shift(timedelta(minutes=9))
        assert tasks.expire_pins() == 0
        clock.shift(timedelta(minutes=2))
        assert tasks.expire_pins() == 1
        assert tasks.expire_pins() == 0

    selection = live()
    assert (selection.version, selection.preset.name, selection.action, selection.updated_by) == (
        3,
        "normal",
        "expire",
        "system:expiry",
    )
    for fact in ("pin_secondary", "v2", "alice", "2026-11-29T02:00:00Z", "INC-7"):
        assert fact in selection.reason  # the pin it ended: what, who, when, why
    assert Selection.history.filter(chain__name="chat", action="expire").count() == 1

    alert = Alert.objects.get()
    assert (alert.kind, alert.chain.name, alert.version) == ("pin_expired", "chat", 3)
    document = alert.to_document()
    assert {
        key: document[key] for key in ("preset", "actor", "pin_version", "pinned_by", "pinned_at", "expires_at", "age")
    } == {
        "preset": "pin_secondary",
        "actor": "system:expiry",
        "pin_version": 2,
        "pinned_by": "alice",
        "pinned_at": "2026-11-29T02:00:00Z",
        "expires_at": "2026-11-29T02:10:00Z",
        "age": "10 min",
    }
    assert document["reason"] == selection.reason
    assert alert.resolved_at is not None  # an event: nothing stays open
    assert alert.deliveries == {
        "log": {"state": "delivered", "attempts": 1, "last_error": "", "delivered_at": "2026-11-29T02:11:00Z"}
    }


def test_the_read_path_reverting_an_expired_pin_raises_the_same_alert(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(minutes=10)
        clock.shift(timedelta(minutes=10, seconds=1))
        assert services.revert_expired_and_read(chain="chat").preset.name == "normal"
        assert tasks.expire_pins() == 0
    assert list(Alert.objects.values_list("kind", "version")) == [("pin_expired", 3)]


def test_a_failure_to_record_the_alert_rolls_the_revert_back_for_the_next_sweep(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(minutes=10)
        clock.shift(timedelta(minutes=11))
        with mock.patch.object(alerts, "raise_alert", side_effect=RuntimeError("disk full")):
            with pytest.raises(RuntimeError):
                services.expire_pins()
        assert (live().version, live().preset.name) == (2, "pin_secondary")
        assert not Alert.objects.exists()
        assert services.expire_pins() == 1
    assert Alert.objects.get().version == 3


def test_the_command_runs_one_sweep_and_prints_the_count(synced) -> None:
    out = StringIO()
    with time_machine.travel(T0, tick=False) as clock:
        pin(minutes=10)
        call_command("expire_pins", stdout=out)
        clock.shift(timedelta(minutes=11))
        call_command("expire_pins", stdout=out)
    assert out.getvalue().splitlines() == ["reverted 0 expired pin(s)", "reverted 1 expired pin(s)"]
    assert live().action == "expire"


# --- racing sweeps on PostgreSQL ------------------------------------------------------------


def race_on_the_row_lock(selection: Selection, sweep: Any, count: int = 2) -> list[Any]:
    """Run `count` sweeps in threads while this thread holds the selection's row lock, and let
    go only once every sweep waits on it: each has found the work and must now decide under
    the lock whether it is still to be done."""
    results: list[Any] = [None] * count
    pids: list[int] = []

    def worker(i: int) -> None:
        try:
            connection.ensure_connection()
            pids.append(connection.connection.info.backend_pid)
            results[i] = sweep()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    with transaction.atomic():
        Selection.objects.select_for_update().get(pk=selection.pk)
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        with connection.cursor() as cursor:
            while True:
                cursor.execute("SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)", [pids])
                if len(pids) == count and cursor.fetchone()[0] == count:
                    break
                assert time.monotonic() < deadline, "the sweeps never queued on the row lock"
                time.sleep(0.02)
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_racing_on_postgres_revert_a_pin_once(synced) -> None:
    selection = pin(minutes=10)
    later = selection.expires_at + timedelta(seconds=1)

    results = race_on_the_row_lock(selection, lambda: services.expire_pins(now=later))

    assert sorted(results) == [0, 1]
    assert Selection.history.filter(chain__name="chat", action="expire").count() == 1
    assert Selection.history.filter(chain__name="chat").count() == 3
    assert (live().version, live().preset.name) == (3, "normal")
    assert list(Alert.objects.values_list("kind", "version")) == [("pin_expired", 3)]
