"""Writes sent together: one round trip for the statements of a change whose answers nobody
reads.

A change writes its new selection row, that row's history row and its NOTIFY while it holds
its chain's lock, and every other change to the chain waits for that lock. Made one by one
through the ORM (``save()``, django-simple-history's ``post_save``, the NOTIFY receiver), each
statement waited for its answer: three round trips under the lock, and with 8 writers on one
chain each round trip waits for a core as well (bench/README.md, "Select latency").

Inside ``together()``, ``execute``, ``update_row`` and ``insert_row`` only collect; leaving the
block sends what was collected. On PostgreSQL that is one query, the statements joined by
``;``: Django's psycopg cursor binds parameters on the client, so it goes as one simple-protocol
query, run in order inside the change's transaction. An error in any of them fails the query,
and the transaction with it: nothing is half-applied. Elsewhere (SQLite, or a cursor binding
on the server) they run one by one. Outside ``together()`` every statement runs at once.

Statements made through the ORM meanwhile (a receiver creating rows) run at once, before the
collected ones: a statement collected here must not be read back before the block ends.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.db import connection, models

Statement = tuple[str, Sequence[Any]]
M = TypeVar("M", bound=models.Model)

_collected: ContextVar[list[Statement] | None] = ContextVar("presets_statements", default=None)


@contextmanager
def together() -> Iterator[None]:
    """Collect the statements made inside; send them in one round trip when the block ends
    without an error (after one, the transaction is rolled back anyway: nothing is sent)."""
    if _collected.get() is not None:  # already inside one: the outer block sends them
        yield
        return
    collected: list[Statement] = []
    token = _collected.set(collected)
    try:
        yield
    finally:
        _collected.reset(token)
    _send(collected)


def execute(sql: str, params: Sequence[Any]) -> None:
    """Run ``sql`` now, or with the other statements of the ``together()`` block around it."""
    collected = _collected.get()
    if collected is None:
        _send([(sql, params)])
    else:
        collected.append((sql, params))


def update_row(instance: models.Model) -> None:
    """``instance.save()`` of a row known to exist: every concrete field, by primary key, with
    no signals sent (its receivers are the caller's to run)."""
    sql, fields = _update_sql(type(instance), connection.vendor)
    params = [field.get_db_prep_save(field.pre_save(instance, False), connection) for field in fields]
    execute(sql, [*params, instance.pk])


def insert_row(instance: models.Model) -> None:
    """Insert ``instance`` as a new row without reading its generated primary key back (the
    caller never uses it), with no signals sent."""
    sql, fields = _insert_sql(type(instance), connection.vendor)
    execute(sql, [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields])


def placeholders(count: int) -> str:
    """``count`` query parameters, comma-separated: a VALUES row or an ``IN (...)`` list."""
    return ", ".join(["%s"] * count)


def columns(model: type[models.Model], alias: str) -> str:
    """The select list of ``model``'s concrete fields, of the table named ``alias``, in the
    order ``from_row`` reads them."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


def from_row(model: type[M], row: Sequence[Any], start: int = 0) -> tuple[M | None, int]:
    """The ``model`` instance in ``row`` from ``start`` (as ``columns`` selected it), or None
    where its primary key is NULL (an outer join found no row); and where the next one starts.
    Values come back through each field's converters, as the ORM's own queries give them."""
    fields = model._meta.concrete_fields
    values = list(row[start : start + len(fields)])
    end = start + len(fields)
    if values[[field.primary_key for field in fields].index(True)] is None:
        return None, end
    for index, (column, converters) in enumerate(_converters(model, connection.vendor)):
        for converter in converters:
            values[index] = converter(values[index], column, connection)
    return model.from_db(connection.alias, [field.attname for field in fields], values), end


@functools.cache
def _converters(model: type[models.Model], vendor: str) -> tuple[tuple[Any, tuple[Any, ...]], ...]:
    """Per concrete field, its column and the converters the ORM applies to its values: the
    backend's, then the field's own (a JSON column is read as text on SQLite, say)."""
    made = []
    for field in model._meta.concrete_fields:
        column = field.get_col(model._meta.db_table)
        made.append((column, (*connection.ops.get_db_converters(column), *column.get_db_converters(connection))))
    return tuple(made)


def _send(statements: list[Statement]) -> None:
    if not statements:
        return
    with connection.cursor() as cursor:
        if len(statements) > 1 and _binds_on_client(cursor):
            cursor.execute("; ".join(sql for sql, _ in statements), [p for _, params in statements for p in params])
            return
        for sql, params in statements:
            cursor.execute(sql, params)


def _binds_on_client(cursor: Any) -> bool:
    """Whether ``cursor`` sends several statements as one query: psycopg's client-side binding
    cursor (Django's default on PostgreSQL), not its server-side binding one, which prepares
    each query and refuses more than one statement."""
    if connection.vendor != "postgresql":
        return False
    import psycopg

    return isinstance(cursor.cursor, psycopg.ClientCursor)


@functools.cache
def _update_sql(model: type[models.Model], vendor: str) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    meta = model._meta
    fields = tuple(field for field in meta.concrete_fields if not field.primary_key)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    return f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s", fields


@functools.cache
def _insert_sql(model: type[models.Model], vendor: str) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    meta = model._meta
    fields = tuple(field for field in meta.local_concrete_fields if field is not meta.auto_field)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders(len(fields))})", fields
