"""The ``synced`` fixture's sync of the example presets, written again from its rows.

Long because it is the suite's most used set-up: two thousand tests start from the example
file synced, and ``sync_presets`` takes 44 statements and ~35 ms a time (a third of
``make test-fast``, bench/README.md "The fast loop"). The first sync in a test process runs
for real, and its rows (chains, presets, selections and their history) are kept. A later test
gets the same rows in one round trip, their times moved to now, and each new version announced
(``selection_changed``) as the sync announces it, so that its receivers (the NOTIFY,
notifications, publishing) act as they do for a real sync: 7 statements, ~9 ms.

It writes rows only where a real sync would write exactly those: the same presets file, every
table it writes empty, a test inside a transaction that is never committed (a test that
commits for a real process to read syncs for real), and ids the sequences have already given
out (a restored or reset sequence would hand them out again). Otherwise it syncs for real and
keeps those rows instead. ``tests/test_example_sync.py`` holds the rows and the announcements
to a real sync's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models
from django.db.models.sql import InsertQuery
from django.utils import timezone

from presets import environments, services
from presets.models import Chain, Preset, PresetsRevision, Selection
from presets.presets_file import PresetsFile

MODELS: tuple[type[models.Model], ...] = (
    Chain,
    Preset,
    Selection,
    Chain.history.model,
    Preset.history.model,
    Selection.history.model,
    PresetsRevision,
)


@dataclass(frozen=True)
class Rows:
    """What one real sync wrote: each model's rows as field values, and the latest time in
    them (the sync's last save)."""

    rows: dict[type[models.Model], list[dict[str, Any]]]
    last: datetime


MILLISECOND = timedelta(milliseconds=1)

_kept: dict[tuple[str, str], Rows] = {}


def sync_example(presets_file: PresetsFile) -> None:
    """Sync ``presets_file`` into an empty database: from the rows of an earlier real sync
    where they are exactly what it would write, otherwise for real (and keep its rows)."""
    # The environment a sync reaches is in its rows: a test with other ENVIRONMENTS syncs apart.
    key = (presets_file.sha256, repr(presets_file.chains), environments.first())
    kept = _kept.get(key)
    if kept is not None and _can_write(kept):
        _write(kept)
        return
    fresh = connection.vendor == "postgresql" and connection.in_atomic_block and not _written()
    services.sync_presets(presets_file=presets_file)
    if fresh:
        _kept[key] = _read()


def _written() -> bool:
    """Whether any table a sync writes has a row."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_ANY_ROW}")
        return bool(cursor.fetchone()[0])


_ANY_ROW = " OR ".join(f'EXISTS (SELECT 1 FROM "{model._meta.db_table}")' for model in MODELS)


def _can_write(kept: Rows) -> bool:
    """Whether a real sync would write exactly ``kept``'s rows now, in one statement: every
    table it writes is empty, and each table's sequence has given out every kept id already (a
    sequence restored or reset would give them out again to the test's next row)."""
    if connection.vendor != "postgresql" or not connection.in_atomic_block:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_ANY_ROW}, "
            + ", ".join("pg_sequence_last_value(pg_get_serial_sequence(%s, %s))" for _ in MODELS),
            [value for model in MODELS for value in (model._meta.db_table, model._meta.pk.column)],
        )
        written, *given_out = cursor.fetchone()
    return not written and all(
        not kept.rows[model]
        or (last is not None and last >= max(row[model._meta.pk.attname] for row in kept.rows[model]))
        for model, last in zip(MODELS, given_out, strict=True)
    )


def _read() -> Rows:
    rows = {model: list(model._default_manager.order_by("pk").values(*_attnames(model))) for model in MODELS}
    times = [value for model in MODELS for row in rows[model] for value in row.values() if isinstance(value, datetime)]
    return Rows(rows=rows, last=max(times))


def _attnames(model: type[models.Model]) -> list[str]:
    return [field.attname for field in model._meta.concrete_fields]


def _write(kept: Rows) -> None:
    """The kept rows, moved to now, in one round trip; then each new version announced with
    its chain and presets at hand, as the sync holds them. Times move by whole milliseconds
    (the sync's own are to the millisecond) and the last lands at most at now: never a save
    in the future, which a reader that waits for history to settle would leave out."""
    shift = (timezone.now() - kept.last) // MILLISECOND * MILLISECOND
    made = {model: [_instance(model, row, shift) for row in kept.rows[model]] for model in MODELS}
    statements = [_insert(model, objects) for model, objects in made.items() if objects]
    with connection.cursor() as cursor:
        cursor.execute(";\n".join(statements))
    chains = {chain.pk: chain for chain in made[Chain]}
    presets = {preset.pk: preset for preset in made[Preset]}
    for chain in chains.values():
        chain.default_preset = presets.get(chain.default_preset_id)
    for selection in made[Selection]:
        selection.chain = chains[selection.chain_id]
        selection.preset = presets[selection.preset_id]
        services._announce(selection)


def _instance(model: type[models.Model], row: dict[str, Any], shift: timedelta) -> Any:
    instance = model(**{name: value + shift if isinstance(value, datetime) else value for name, value in row.items()})
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


def _insert(model: type[models.Model], objects: list[models.Model]) -> str:
    """The INSERT of ``objects`` as one SQL text, values as they are (no ``auto_now``)."""
    query = InsertQuery(model)
    query.insert_values(model._meta.concrete_fields, objects, raw=True)
    return ";\n".join(
        connection.ops.compose_sql(sql, params) for sql, params in query.get_compiler(connection=connection).as_sql()
    )
