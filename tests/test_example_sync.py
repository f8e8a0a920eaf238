"""The ``synced`` fixture writes a real sync's rows (tests/example_sync.py): the same rows,
times moved to now, the same versions announced; and it syncs for real wherever writing them
would not be the same."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.db import connection, models, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from presets import events, services
from presets.models import Chain, Selection
from presets.presets_file import PresetsFile, load_presets_file
from presets.providers import get_registry
from tests.example_sync import MODELS, sync_example

pytestmark = pytest.mark.postgres


@pytest.fixture
def example(db: Any, example_file: Path) -> PresetsFile:
    return load_presets_file(example_file, registry=get_registry())


def state() -> dict[str, list[dict[str, Any]]]:
    """Every row a sync writes, ids as their row's place in its table and times as how long
    after the first version was made: equal for two syncs of one file into empty tables."""
    rows = {model: list(model._default_manager.order_by("pk").values()) for model in MODELS}
    place = {
        model: {row["id"]: index for index, row in enumerate(rows[model])}
        for model in MODELS
        if not hasattr(model, "instance_type")  # a history model: its rows' ids are their model's
    }
    synced_at = min(row["updated_at"] for row in rows[Selection])

    def same(model: type[models.Model], name: str, value: Any) -> Any:
        field = {field.attname: field for field in model._meta.concrete_fields}[name]
        if name == "history_id":
            return None
        if name == "id":
            return place[getattr(model, "instance_type", model)].get(value)
        if isinstance(field, models.ForeignKey) and field.related_model in place:
            return place[field.related_model].get(value)
        if isinstance(value, datetime):  # the sync's saves are some milliseconds apart
            return "at the sync" if abs(value - synced_at) < timedelta(seconds=1) else value - synced_at
        return value

    return {
        model._meta.db_table: [{name: same(model, name, value) for name, value in row.items()} for row in rows[model]]
        for model in MODELS
    }


def announced(run: Any) -> list[tuple[str, int, str, int]]:
    heard: list[tuple[str, int, str, int]] = []

    def hear(sender: Any, *, selection: Selection, epoch: int, **_: Any) -> None:
        heard.append((selection.chain.name, selection.version, selection.preset.name, epoch))

    events.selection_changed.connect(hear, dispatch_uid="test_example_sync")
    try:
        run()
    finally:
        events.selection_changed.disconnect(dispatch_uid="test_example_sync")
    return heard


def test_the_rows_written_and_the_versions_announced_are_a_real_syncs(example: PresetsFile) -> None:
    savepoint = transaction.savepoint()
    sync_example(example)  # the first in this process keeps its rows
    transaction.savepoint_rollback(savepoint)

    with time_machine.travel(timezone.now() + timedelta(days=3), tick=False):
        savepoint = transaction.savepoint()
        real_announced = announced(lambda: services.sync_presets(presets_file=example))
        real = state()
        transaction.savepoint_rollback(savepoint)
        with CaptureQueriesContext(connection) as queries:
            written_announced = announced(lambda: sync_example(example))

        assert len(queries) < 10, "the rows were not written: it synced for real"
        assert written_announced == real_announced == [("chat", 1, "normal", 0), ("incident-summary", 1, "normal", 0)]
        assert state() == real
        times = [value for model in MODELS for row in model._default_manager.values() for value in row.values()]
        assert max(value for value in times if isinstance(value, datetime)) <= timezone.now(), "a save after now"
        assert {selection.updated_at.microsecond % 1000 for selection in Selection.objects.all()} == {0}
        assert Chain.objects.get(name="chat").default_preset.name == "normal"


def test_tables_with_rows_are_synced_for_real(example: PresetsFile) -> None:
    sync_example(example)
    sync_example(example)  # the same file again: nothing to change, and no row twice

    assert sorted(Chain.objects.values_list("name", flat=True)) == ["chat", "incident-summary"]
    assert Selection.history.count() == 2


def test_a_sequence_set_back_below_the_kept_ids_is_synced_for_real(example: PresetsFile) -> None:
    savepoint = transaction.savepoint()
    sync_example(example)  # rows kept (or written from those kept)
    transaction.savepoint_rollback(savepoint)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('presets_chain', 'id')")
        (sequence,) = cursor.fetchone()
        cursor.execute("SELECT last_value FROM " + sequence)
        (before,) = cursor.fetchone()
        cursor.execute("SELECT setval(%s, 1)", [sequence])  # as a restore could leave it
    try:
        with CaptureQueriesContext(connection) as queries:
            sync_example(example)

        assert len(queries) > 20, "the kept rows were written over ids the sequence gives out again"
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT setval(%s, greatest(%s, (SELECT last_value FROM " + sequence + ")))", [sequence, before]
            )
