"""A change and a raise of the epoch never cross: each change is announced (and answered) with
the epoch it commits under.

Readers order documents by (epoch, version). Were a change to read the epoch, and a raise to
commit before the change did, the raise would announce the chain's old version with the new
epoch and the change its new version with the old one, which every reader takes for older:
the change would be lost to them until the next one. A change holds the epoch row (``FOR KEY
SHARE``) until it commits, and the raise locks it ``FOR UPDATE``: one waits for the other.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from presets import services
from presets.models import EPOCH_ROW, Epoch, Selection
from read_path.notifications import CHANGE_CHANNEL, connection_params

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]


@pytest.fixture
def listener() -> Iterator[psycopg.Connection[Any]]:
    """A LISTEN connection of its own on the change notifications, as a web process holds."""
    listener = psycopg.connect(**connection_params(connection.settings_dict), autocommit=True)
    listener.execute(f"LISTEN {CHANGE_CHANNEL}")
    yield listener
    listener.close()


def in_thread_until_it_waits(job: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``job`` on a connection of its own, and return once it waits for a lock (this
    thread's transaction holds it); the thread's result or error land in the dict."""
    result: dict[str, Any] = {}
    pids: list[int] = []

    def run() -> None:
        try:
            connection.ensure_connection()
            pids.append(connection.connection.info.backend_pid)
            result["value"] = job()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 20
    with connection.cursor() as cursor:
        while True:
            if pids:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = %s", [pids[0]])
                if cursor.fetchone()[0]:
                    return thread, result
            assert time.monotonic() < deadline and thread.is_alive(), f"it never waited: {result}"
            time.sleep(0.02)


def test_a_change_waits_for_an_epoch_being_raised_and_is_announced_with_the_new_epoch(listener) -> None:
    Epoch.objects.get_or_create(pk=EPOCH_ROW)  # a flushed test database lost migration 0007's row
    with transaction.atomic():  # what raise_epoch does first: the row locked, then raised
        row = Epoch.objects.select_for_update().get(pk=EPOCH_ROW)
        row.value = 1_900_000_000
        row.save()
        thread, result = in_thread_until_it_waits(
            lambda: services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
        )
    thread.join(30)
    selection: Selection = result["value"]
    assert selection.to_document()["epoch"] == 1_900_000_000  # the answer's
    (announced,) = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert (announced["chain"], announced["version"], announced["document"]["epoch"]) == ("chat", 2, 1_900_000_000)


def test_the_epoch_is_raised_only_once_the_changes_in_flight_have_committed(listener) -> None:
    Epoch.objects.get_or_create(pk=EPOCH_ROW)
    with transaction.atomic():  # a change in flight (an outer transaction keeps it uncommitted)
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
        thread, result = in_thread_until_it_waits(
            lambda: services.raise_epoch(actor="dave", reason="restored the database")
        )
    thread.join(30)
    raised = result["value"]
    payloads = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=3)]
    chat = [(p["version"], p["document"]["epoch"]) for p in payloads if p["chain"] == "chat"]
    assert chat == [(2, 0), (2, raised)]  # the change with the epoch it committed under, then the raise with it


def test_an_expiry_sweep_waits_for_an_epoch_being_raised_as_a_change_does(listener) -> None:
    Epoch.objects.get_or_create(pk=EPOCH_ROW)
    pin = services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
    later = pin.expires_at + timedelta(seconds=1)
    with transaction.atomic():
        row = Epoch.objects.select_for_update().get(pk=EPOCH_ROW)
        row.value = 1_900_000_000
        row.save()
        thread, result = in_thread_until_it_waits(lambda: services.expire_pins(now=later))
    thread.join(30)
    assert result["value"] == 1
    announced = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=2)]
    assert [(p["version"], p["document"]["epoch"]) for p in announced] == [(2, 0), (3, 1_900_000_000)]
