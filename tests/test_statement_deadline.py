"""Every wait for the database has a deadline (DATABASE_STATEMENT_TIMEOUT), migrations aside.

The system test of the faults it is for (a server that stops answering) is
tests/test_database_faults.py; these pin the rules on the suite's own PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError, connection

from controlplane.postgresql.base import answer_within, statement_timeout

pytestmark = pytest.mark.postgres


@pytest.fixture
def short_deadline(transactional_db: Any) -> Any:
    connection.ensure_connection()
    answer_within(connection.connection, 0.3)
    yield
    connection.close()  # a fresh connection, with the configured deadline, for what follows


def test_every_postgres_connection_gets_the_configured_deadline(transactional_db: Any) -> None:
    connection.ensure_connection()
    assert statement_timeout() == 3
    assert "wait" in vars(connection.connection)


def test_a_statement_past_the_deadline_fails_and_its_connection_is_closed(short_deadline: Any) -> None:
    with pytest.raises(OperationalError, match="did not answer within 0.3 s"), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(2)")
    assert connection.connection.closed
    connection.close()
    with connection.cursor() as cursor:  # the next request gets a working connection
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_migration_may_take_longer_than_the_deadline(short_deadline: Any) -> None:
    with connection.schema_editor() as editor:
        editor.execute("SELECT pg_sleep(0.6)")
    assert not connection.connection.closed
    # ...and the deadline is back once the schema editor is done.
    with pytest.raises(OperationalError, match="did not answer within 3 s"), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(3.5)")
