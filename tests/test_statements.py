"""A change sends its writes together: the selection row, its history row and its NOTIFY go to
PostgreSQL as one query while the chain's lock is held, and all or none of them apply."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from presets import services, statements
from presets.models import Selection
from read_path.notifications import CHANGE_CHANNEL, connection_params

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

FRAME = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT")


def test_a_change_is_three_statements_under_its_lock_and_writes_in_one() -> None:
    with CaptureQueriesContext(connection) as captured:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="vendor_a is down")
    made = [query["sql"] for query in captured.captured_queries if not query["sql"].startswith(FRAME)]
    lock, read, write = made  # the locks, what the change reads, and everything it writes
    assert "FOR UPDATE" in lock
    assert "FOR KEY SHARE" in read and "'pin_secondary'" in read  # the epoch held, the target read
    assert write.startswith('UPDATE "presets_selection"')
    assert 'INSERT INTO "presets_historicalselection"' in write and "pg_notify" in write


def test_the_history_row_sent_with_a_change_is_the_row_it_records() -> None:
    live = services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="vendor_a is down")
    stored = Selection.objects.get(pk=live.pk)
    row = Selection.history.filter(id=live.pk).order_by("-history_id").first()
    assert row is not None
    for field in Selection._meta.concrete_fields:
        assert getattr(row, field.attname) == getattr(stored, field.attname), field.name
    assert (row.version, row.history_type, row.history_user_id, row.history_change_reason) == (2, "~", None, None)
    assert row.history_date >= stored.updated_at


def test_a_change_is_announced_only_when_its_writes_commit() -> None:
    with psycopg.connect(**connection_params(connection.settings_dict), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANGE_CHANNEL}")
        with pytest.raises(RuntimeError), transaction.atomic():  # made, then rolled back
            services.select_preset(chain="chat", preset="local_only", actor="alice", reason="rolled back")
            raise RuntimeError("the caller's transaction failed after the change")
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="vendor_a is down")
        (notice,) = list(listener.notifies(timeout=5, stop_after=1))
    payload = json.loads(notice.payload)
    assert (payload["chain"], payload["version"], payload["document"]["preset"]) == ("chat", 2, "pin_secondary")


def test_an_error_in_any_statement_sent_together_applies_none_of_them() -> None:
    selection = Selection.objects.get(chain__name="chat")
    history_before = Selection.history.count()
    selection.reason = "never stored"
    selection.version += 1
    with pytest.raises(DatabaseError), transaction.atomic():
        with statements.together():
            statements.update_row(selection)
            statements.insert_row(services._history_row(selection))
            statements.execute("SELECT 1 / %s", [0])  # fails after the two writes, in the same query
    stored = Selection.objects.get(pk=selection.pk)
    assert (stored.version, stored.reason) != (selection.version, "never stored")
    assert Selection.history.count() == history_before


def test_statements_run_at_once_outside_a_together_block() -> None:
    selection = Selection.objects.get(chain__name="chat")
    selection.reason = "written at once"
    with transaction.atomic():
        statements.update_row(selection)
        assert Selection.objects.get(pk=selection.pk).reason == "written at once"  # read back, same transaction


def test_a_block_left_by_an_error_sends_nothing(django_assert_num_queries: Any) -> None:
    selection = Selection.objects.get(chain__name="chat")
    selection.reason = "never sent"
    with django_assert_num_queries(0), pytest.raises(RuntimeError), statements.together():
        statements.update_row(selection)
        raise RuntimeError("the change was refused")
    assert Selection.objects.get(pk=selection.pk).reason != "never sent"


def test_a_row_read_back_is_the_instance_the_orm_reads() -> None:
    stored = Selection.objects.get(chain__name="chat")
    table = connection.ops.quote_name(Selection._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {statements.columns(Selection, 's')}, NULL FROM {table} s WHERE s.id = %s", [stored.pk])
        (row,) = cursor.fetchall()
    read, end = statements.from_row(Selection, row)
    assert read is not None and end == len(row) - 1
    for field in Selection._meta.concrete_fields:  # JSON decoded, times aware, as the ORM gives them
        assert getattr(read, field.attname) == getattr(stored, field.attname), field.name
    assert statements.from_row(Selection, [None] * len(row)) == (None, len(row) - 1)  # an outer join's miss
