"""Reading the audit trail: each historical selection row as a self-contained entry."""

from __future__ import annotations

from typing import Any, TypedDict

from presets.documents import NO_MARKING, MarkingDocument, StepDocument, Time, format_time
from presets.models import Selection


def history_rows(*, chain: str | None = None, before: int | None = None) -> Any:
    """Historical selection rows, newest first, with the presets they name. One chain's rows
    are ordered by version (its own order: history_date follows the clock, which may jump);
    all chains' rows by when they were written."""
    rows = Selection.history.select_related("chain", "preset", "previous_preset")
    if before is not None:
        rows = rows.filter(version__lt=before)
    if chain is not None:
        return rows.filter(chain__name=chain).order_by("-version", "-history_id")
    return rows.order_by("-history_date", "-history_id")


class HistoryEntry(TypedDict):
    """One change: who, when, which action, the previous value, the new value, and why."""

    chain_name: str
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


def history_entries(*, chain: str, limit: int = 100, before: int | None = None) -> list[HistoryEntry]:
    rows = history_rows(chain=chain, before=before)[:limit]
    return [entry(row) for row in rows]
