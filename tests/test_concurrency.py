"""Concurrent changes serialise on the chain and selection row locks (PostgreSQL, real threads)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.test import Client
from django.utils import timezone

from presets import services
from presets.exceptions import InvalidInput
from presets.models import Selection

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run_in_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """Run target(i) in `count` threads released together; return results or exceptions."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def change_held_open(preset: str, actor: str, changed: threading.Event, release: threading.Event) -> None:
    """Select ``preset`` on chat in a transaction kept open, its locks held, from ``changed``
    being set until ``release`` is (at most 30 s)."""
    try:
        with transaction.atomic():
            services.select_preset(chain="chat", preset=preset, actor=actor, reason=f"held by {actor}")
            changed.set()
            release.wait(30)
    finally:
        connection.close()


def test_two_selects_with_the_same_expected_version_one_wins_the_other_gets_409(synced, write_token) -> None:
    presets = ["pin_secondary", "local_only"]

    def select(i: int) -> Any:
        client = Client(headers={"Authorization": f"Bearer {write_token}"})
        return client.post(
            "/api/v1/chains/chat/select",
            {"preset": presets[i], "reason": f"racer {i}", "expected_version": 1},
            content_type="application/json",
        )

    responses = run_in_threads(2, select)
    assert sorted(r.status_code for r in responses) == [200, 409]
    winner = next(r for r in responses if r.status_code == 200).json()
    loser = next(r for r in responses if r.status_code == 409).json()["error"]
    assert winner["version"] == 2
    assert winner["preset"] in loser["message"] and winner["reason"] in loser["message"]
    assert loser["details"]["current"]["version"] == 2
    assert Selection.history.filter(chain__name="chat").count() == 2


def test_200_changes_from_8_threads_leave_a_gapless_consistent_history(synced) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="setup", reason="start")
    choices = ["pin_secondary", "drop_vendor_b", "local_only", "extend"]

    def change_25_times(i: int) -> int:
        rng = random.Random(i)
        done = 0
        while done < 25:
            choice = rng.choice(choices)
            try:
                if choice == "extend":
                    services.extend_pin(chain="chat", actor=f"t{i}", reason=f"t{i} #{done}")
                else:
                    services.select_preset(chain="chat", preset=choice, actor=f"t{i}", reason=f"t{i} #{done}")
            except InvalidInput:
                continue  # that preset was already live: not a change
            done += 1
        return done

    results = run_in_threads(8, change_25_times)
    assert results == [25] * 8, results
    rows = list(Selection.history.filter(chain__name="chat").order_by("version"))
    assert len(rows) == 2 + 200
    assert [r.version for r in rows] == list(range(1, 203))
    for before, row in zip(rows, rows[1:], strict=False):
        assert row.previous_version == before.version
        assert row.previous_preset_id == before.preset_id
        assert row.previous_steps == before.steps
        assert row.previous_expires_at == before.expires_at
    assert Selection.objects.get(chain__name="chat").version == 202


def test_the_stale_pin_sweep_waiting_on_a_select_still_finds_the_row(synced) -> None:
    from datetime import timedelta

    from audit import alerts

    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
    changed = threading.Event()
    sweep_waiting = threading.Event()
    outcome: dict[str, Any] = {}

    def sweep() -> None:
        changed.wait(30)
        try:
            outcome["sweep"] = alerts.sweep_stale_pins(now=timezone.now() + timedelta(hours=2))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["sweep"] = exc
        finally:
            connection.close()

    # Holds the row lock with the preset changed until the sweep waits for that lock.
    writer = threading.Thread(target=change_held_open, args=("drop_vendor_b", "bob", changed, sweep_waiting))
    sweeper = threading.Thread(target=sweep)
    writer.start()
    sweeper.start()
    with connection.cursor() as cursor:
        for _ in range(600):  # until the sweep waits for the row lock (at most 30 s)
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            if cursor.fetchone()[0]:
                break
            threading.Event().wait(0.05)
    sweep_waiting.set()
    writer.join(30)
    sweeper.join(30)
    assert not isinstance(outcome["sweep"], Exception), outcome["sweep"]
    assert outcome["sweep"].raised == 1  # the pin that is live now (drop_vendor_b) is stale


def test_a_change_holds_its_chain_row_which_no_change_rewrites(synced) -> None:
    """Changes to one chain queue on the chain's row, first come first served. Not on the
    selection row: every change writes a new version of that one, and PostgreSQL queues a
    row's waiters per version, so a writer arriving later went ahead of those waiting on an
    older version (8 writers on one chain: p99 3x their median; bench/README.md)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM presets_chain WHERE name = 'chat'")
        before = cursor.fetchone()[0]
    held = threading.Event()
    done = threading.Event()
    writer = threading.Thread(target=change_held_open, args=("pin_secondary", "alice", held, done))
    writer.start()
    try:
        assert held.wait(30)
        with pytest.raises(OperationalError, match="could not obtain lock"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM presets_chain WHERE name = 'chat' FOR NO KEY UPDATE NOWAIT")
    finally:
        done.set()
        writer.join(30)
    services.revert_to_default(chain="chat", actor="alice", reason="INC-1 over")
    with connection.cursor() as cursor:
        cursor.execute("SELECT ctid::text FROM presets_chain WHERE name = 'chat'")
        assert cursor.fetchone()[0] == before  # the chain row was not rewritten by either change
    assert Selection.objects.get(chain__name="chat").version == 3
