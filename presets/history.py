"""Reading the audit trail: each historical selection row as a self-contained entry, filtered
and paged for the history pages, and read whole, oldest first, for the audit export.

The pages page by *keyset* ("older than this row"), not by offset: with a long trail an
offset makes the database walk every row before the page and a page count walks them all, on
every page; a keyset reads one page's rows from an index whatever its depth.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypedDict

from django.db.models import Q, Subquery

from presets import environments
from presets.documents import NO_MARKING, MarkingDocument, StepDocument, Time, format_time
from presets.exceptions import InvalidInput
from presets.models import Chain, Selection

# Each list's order, newest first: (sort key, tie-breaker). One chain's rows go by version
# (its own order: history_date follows the clock, which may jump); all chains' rows by when
# they were written. history_id (the table's serial key) breaks ties and names a row.
CHAIN_ORDER = ("version", "history_id")
ALL_ORDER = ("history_date", "history_id")


@dataclass(frozen=True)
class HistoryFilter:
    """Which changes a history list shows; None (or empty) is "any"."""

    chain: str | None = None
    # The environment whose changes the list shows (None: every environment's).
    environment: str | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None  # written at or after
    until: datetime | None = None  # written before


def history_rows(
    *,
    chain: str | None = None,
    environment: str | None = None,
    before: int | None = None,
    filters: HistoryFilter | None = None,
) -> Any:
    """Historical selection rows, newest first, with the presets they name: one chain's by
    version, all chains' by when they were written (``CHAIN_ORDER``, ``ALL_ORDER``); of
    ``environment``, or the filter's (a chain's: the default one when neither names one; the
    list of all chains: every environment's)."""
    rows = Selection.history.select_related("chain", "preset", "previous_preset")
    if environment is None and filters is not None:
        environment = filters.environment
    if before is not None:
        rows = rows.filter(version__lt=before)
    if filters is not None:
        rows = _filtered(rows, replace(filters, environment=environment))
    if chain is not None:
        return rows.filter(chain_id=_chain_id(chain, environment)).order_by(*(f"-{key}" for key in CHAIN_ORDER))
    return _in_environment(rows, environment).order_by(*(f"-{key}" for key in ALL_ORDER))


def _chain_id(name: str, environment: str | None) -> Subquery:
    """The chain's id as a value (a scalar subquery), not a join on its name: a join would keep
    the database from reading the rows in their order straight from an index."""
    return Subquery(Chain.objects.filter(name=name, environment=environments.resolve(environment)).values("pk")[:1])


def _in_environment(rows: Any, environment: str | None) -> Any:
    """The rows of ``environment``'s chains (None: all); with one environment, all of them,
    without a filter that would keep the database from its index order."""
    if environment is None or not environments.several():
        return rows
    return rows.filter(chain_id__in=Chain.objects.filter(environment=environment).values("pk"))


def _filtered(rows: Any, filters: HistoryFilter) -> Any:
    if filters.chain:
        rows = rows.filter(chain_id=_chain_id(filters.chain, filters.environment))
    if filters.actor:
        rows = rows.filter(updated_by=filters.actor)
    if filters.action:
        rows = rows.filter(action=filters.action)
    # history_date, not updated_at: the same moment (both written by the change's
    # transaction), and the all-chains list's own order, so a time window is one index range.
    if filters.since is not None:
        rows = rows.filter(history_date__gte=filters.since)
    if filters.until is not None:
        rows = rows.filter(history_date__lt=filters.until)
    return rows


_PRESET_TEXT = tuple(
    f"{preset}__{field}" for preset in ("preset", "previous_preset") for field in ("steps", "marking", "description")
)


@dataclass(frozen=True)
class HistoryPage:
    """One page of a history list and the cursors (history ids) of its neighbours."""

    rows: list[Any]
    newer_than: int | None  # the link to newer changes: those newer than this row
    older_than: int | None  # the link to older changes: those older than this row


def history_page(
    *,
    chain: str | None = None,
    environment: str | None = None,
    filters: HistoryFilter | None = None,
    older_than: int | None = None,
    newer_than: int | None = None,
    size: int,
) -> HistoryPage:
    """``size`` rows of the list, newest first: the newest, or those just older (or newer)
    than the row whose history id is the cursor. A cursor that names no row of this chain
    raises ``InvalidInput`` on its field. At most four short index reads, at any depth."""
    order = CHAIN_ORDER if chain is not None else ALL_ORDER
    # A page names its presets and reads their retirement: not their steps, marking or text
    # (JSON decoded for nothing, two presets a row).
    rows = history_rows(chain=chain, environment=environment, filters=filters).defer(*_PRESET_TEXT)
    if newer_than is not None:
        key = _cursor_key(chain, environment, "newer_than", newer_than, order)
        above = list(rows.filter(_beyond(order, key, older=False)).order_by(*order)[: size + 1])
        if len(above) > size:
            page = above[:size][::-1]
            older = _exists_beyond(rows, order, page[-1], older=True)
            return HistoryPage(page, newer_than=page[0].history_id, older_than=page[-1].history_id if older else None)
        # Less than a page above the cursor: that is the newest page.
    elif older_than is not None:
        key = _cursor_key(chain, environment, "older_than", older_than, order)
        page = list(rows.filter(_beyond(order, key, older=True))[: size + 1])
        newer = bool(page) and _exists_beyond(rows, order, page[0], older=False)
        return HistoryPage(
            page[:size],
            newer_than=page[0].history_id if newer else None,
            older_than=page[size - 1].history_id if len(page) > size else None,
        )
    page = list(rows[: size + 1])
    return HistoryPage(page[:size], newer_than=None, older_than=page[size - 1].history_id if len(page) > size else None)


# How far a history list's count goes: beyond it the pages say "10,000+" (a bounded read,
# never a count that walks the whole trail).
HISTORY_COUNT_CAP = 10_000


def history_count(
    *, chain: str | None = None, environment: str | None = None, filters: HistoryFilter | None = None
) -> tuple[int, bool]:
    """How many changes the list holds, and whether there are more than ``HISTORY_COUNT_CAP``
    (then the count is the cap): the count reads at most the cap's rows, at any length."""
    rows = Selection.history.all()
    if environment is None and filters is not None:
        environment = filters.environment
    if filters is not None:
        rows = _filtered(rows, replace(filters, chain=None))
    names = {chain, filters.chain if filters is not None else None} - {None, ""}
    if not names:
        rows = _in_environment(rows, environment)
    for name in names:
        # The chain's id as a value, not a subquery: with a subquery the database cannot tell
        # how many rows it holds and plans the count for the whole trail.
        chain_id = (
            Chain.objects.filter(name=name, environment=environments.resolve(environment))
            .values_list("pk", flat=True)
            .first()
        )
        if chain_id is None:
            return 0, False
        rows = rows.filter(chain_id=chain_id)
    # No order and no joins: a count of at most the cap's ids, read from an index.
    found = rows.order_by().values("history_id")[: HISTORY_COUNT_CAP + 1].count()
    return min(found, HISTORY_COUNT_CAP), found > HISTORY_COUNT_CAP


def oldest_page_cursor(
    *, chain: str | None = None, environment: str | None = None, filters: HistoryFilter | None = None, size: int
) -> int | None:
    """The ``older_than`` cursor of the list's oldest page (the row just newer than its
    ``size`` oldest), or None when the list fits on one page: one short index read."""
    order = CHAIN_ORDER if chain is not None else ALL_ORDER
    rows = (
        history_rows(chain=chain, environment=environment, filters=filters)
        .order_by(*order)
        .values_list("history_id", flat=True)
    )
    return next(iter(rows[size : size + 1]), None)


def _cursor_key(
    chain: str | None, environment: str | None, field: str, history_id: int, order: tuple[str, str]
) -> tuple[Any, Any]:
    """The sort key of the cursor's row (one chain's list: a row of that chain)."""
    found = Selection.history.filter(history_id=history_id)
    if chain is not None:
        found = found.filter(chain_id=_chain_id(chain, environment))
    key = found.values_list(*order).first()
    if key is None:
        raise InvalidInput(field, "this page link names no change of this list: start again from the newest")
    return (key[0], key[1])


def _beyond(order: tuple[str, str], key: tuple[Any, Any], *, older: bool) -> Q:
    """Rows after ``key`` in the list's order (older), or before it (newer). The bare range
    on the first column lets the database start its index scan at the cursor."""
    first, second = order
    op, edge = ("lt", "lte") if older else ("gt", "gte")
    return Q(**{f"{first}__{edge}": key[0]}) & (
        Q(**{f"{first}__{op}": key[0]}) | Q(**{first: key[0], f"{second}__{op}": key[1]})
    )


def _exists_beyond(rows: Any, order: tuple[str, str], row: Any, *, older: bool) -> bool:
    key = (getattr(row, order[0]), getattr(row, order[1]))
    return bool(rows.filter(_beyond(order, key, older=older)).exists())


def recent_actors(
    *, chain: str | None = None, environment: str | None = None, rows: int = 200, limit: int = 20
) -> list[str]:
    """Who made the newest ``rows`` changes of the list, most recent first (at most
    ``limit``): the suggestions of the pages' actor filter."""
    names = history_rows(chain=chain, environment=environment).values_list("updated_by", flat=True)[:rows]
    return list(dict.fromkeys(names))[:limit]


class HistoryEntry(TypedDict):
    """One change: who, when, which action, the previous value, the new value, and why."""

    chain_name: str
    environment: str
    version: int
    action: str
    actor: str
    reason: str
    at: Time
    preset: str
    chain: list[StepDocument]
    marking: MarkingDocument
    expires_at: Time | None
    previous_version: int | None
    previous_preset: str | None
    previous_chain: list[StepDocument] | None
    previous_expires_at: Time | None


def entry(row: Any) -> HistoryEntry:
    """One change: who, when, which action, previous value, new value, why."""
    return {
        "chain_name": row.chain.name,
        "environment": row.chain.environment,
        "version": row.version,
        "action": row.action,
        "actor": row.updated_by,
        "reason": row.reason,
        "at": format_time(row.updated_at),
        "preset": row.preset.name,
        "chain": row.steps,
        "marking": row.marking or NO_MARKING.copy(),
        "expires_at": format_time(row.expires_at),
        "previous_version": row.previous_version,
        "previous_preset": row.previous_preset.name if row.previous_preset else None,
        "previous_chain": row.previous_steps,
        "previous_expires_at": format_time(row.previous_expires_at),
    }


def history_entries(
    *, chain: str, environment: str | None = None, limit: int = 100, before: int | None = None
) -> list[HistoryEntry]:
    rows = history_rows(chain=chain, environment=environment, before=before)[:limit]
    return [entry(row) for row in rows]


# --- every change, oldest first: the audit export (presets/history_export.py) -------------------


def history_position(*, chain: str, environment: str | None = None, version: int) -> tuple[datetime, int] | None:
    """Where a chain's version stands in the all-chains order (``ALL_ORDER``): its row's
    sort key, or None when the history has no such version."""
    key = (
        Selection.history.filter(chain_id=_chain_id(chain, environment), version=version)
        .order_by("-history_id")
        .values_list(*ALL_ORDER)
        .first()
    )
    return (key[0], key[1]) if key is not None else None


def history_batches(
    *, filters: HistoryFilter, after: tuple[datetime, int] | None = None, size: int
) -> Iterator[list[Any]]:
    """Every row the filter admits, oldest first (``ALL_ORDER`` ascending), after the row
    whose sort key is ``after`` (from the oldest without it), in lists of at most ``size``.
    Each list is one query that starts its index scan after the previous list's last row, so
    memory and the cost of a read stay the same at any depth and no query outlives its list.
    The few chains and presets a list names are read once for it, not joined to every row."""
    rows = (
        history_rows(filters=filters)
        .select_related(None)
        .prefetch_related("chain", "preset", "previous_preset")
        .order_by(*ALL_ORDER)
    )
    while True:
        batch = list((rows if after is None else rows.filter(_beyond(ALL_ORDER, after, older=False)))[:size])
        if batch:
            yield batch
        if len(batch) < size:
            return
        after = (batch[-1].history_date, batch[-1].history_id)
