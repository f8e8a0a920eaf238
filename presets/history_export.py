"""The audit export: every chain's changes, oldest first, as NDJSON or CSV, made batch by
batch so that its memory does not grow with the history (``GET /api/v1/history`` and
``manage.py export_history`` both write what this module makes).

- The entries are the per-chain history API's (``presets.history.entry``): one parser reads both.
- The order is when each change was written, then the order they were written in
  (``presets.history.ALL_ORDER``, ascending), so each chain's versions ascend.
- The reading is keyset batches (``presets.history.history_batches``) of
  ``HISTORY_EXPORT_BATCH_ROWS``: one short index read each, whatever the depth, and between
  batches the connection goes back to the pool, so a reader that takes its time holds none.
- Resuming: every entry names its place, ``chain_name:version`` (``place``). An export
  ``after`` a place has exactly the entries after it in the order, those written since
  included: a client resumes from the last entry it received, even from a stream cut short.
- Settling: a change's row carries the moment it was made, a little before its transaction
  commits. A change made just before the last entry a client got, but committed after the
  export read past that moment, would fall behind the resume point and never be exported.
  So an export ends at the changes made ``HISTORY_EXPORT_SETTLE_SECONDS`` before it started;
  later ones come with the next resume.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from presets import environments
from presets.exceptions import InvalidInput
from presets.history import HistoryEntry, HistoryFilter, entry, history_batches, history_position

FORMATS = ("ndjson", "csv")
NDJSON_MEDIA_TYPE = "application/x-ndjson"
# The CSV's header: the entry's fields in their order; lists and objects are JSON in one cell.
CSV_COLUMNS = tuple(HistoryEntry.__annotations__)
# A history row's version is a PostgreSQL integer.
VERSION_MAX = 2**31 - 1
AFTER_HELP = "send the chain_name and version of the last entry you received, e.g. chat:7"


@dataclass(frozen=True)
class Export:
    """What one export reads: the filter (ending where changes have settled) and the sort key
    of the entry it starts after (None: from the oldest)."""

    filters: HistoryFilter
    after: tuple[datetime, int] | None


def start_export(*, filters: HistoryFilter, after: str | None = None, now: datetime | None = None) -> Export:
    """The export of what ``filters`` admit, after the entry whose place ``after`` names
    (``chat:7``; none or empty: from the oldest). Checks the place at once, so a bad one is an
    error before anything is written: ``InvalidInput`` on ``after``."""
    settled = (now or timezone.now()) - timedelta(seconds=settings.HISTORY_EXPORT_SETTLE_SECONDS)
    until = settled if filters.until is None else min(filters.until, settled)
    return Export(replace(filters, until=until), _position(after) if after and after.strip() else None)


def place(item: HistoryEntry) -> str:
    """Where an entry stands, as ``after`` takes it: ``chain_name:version`` (a non-default
    environment's chain by its label, ``staging/chat:3``)."""
    return f"{environments.label(item['environment'], item['chain_name'])}:{item['version']}"


def _position(text: str) -> tuple[datetime, int]:
    chain, colon, version = text.strip().rpartition(":")
    if not colon or not chain or not (version.isascii() and version.isdigit()):
        raise InvalidInput("after", f"{text!r} is not CHAIN:VERSION: {AFTER_HELP}")
    number = int(version)
    environment, name = environments.from_label(chain)
    known = environment in environments.names() and 1 <= number <= VERSION_MAX
    key = history_position(chain=name, environment=environment, version=number) if known else None
    if key is None:
        raise InvalidInput("after", f"the history has no {chain} version {version}: {AFTER_HELP}")
    return key


def export_entries(export: Export) -> Iterator[list[HistoryEntry]]:
    """The export's entries, a batch at a time: the one producer of both the API's stream
    and the command's file."""
    for rows in history_batches(filters=export.filters, after=export.after, size=settings.HISTORY_EXPORT_BATCH_ROWS):
        entries = [entry(row) for row in rows]
        _release_connection()
        yield entries


def _release_connection() -> None:
    """Give the connection back to the pool between batches: a reader on a slow network then
    holds none of the process's few connections while it reads. Without a pool (every batch
    would connect anew) or inside a transaction (the tests'), it stays."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


def ndjson_lines(entries: Sequence[Mapping[str, Any]]) -> str:
    """One JSON object a line, each ending in a newline."""
    return "".join(json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n" for item in entries)


def csv_header(columns: tuple[str, ...] = CSV_COLUMNS) -> str:
    return _csv([columns])


def csv_lines(entries: Sequence[Mapping[str, Any]], columns: tuple[str, ...] = CSV_COLUMNS) -> str:
    """One CSV row an entry (RFC 4180: CRLF, quoted where needed), ``columns`` in their order
    (an interface may add its own after the entry's); a list or an object is its JSON in one
    cell, a null an empty cell."""
    return _csv([_cell(item[column]) for column in columns] for item in entries)


def _csv(rows: Any) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value
