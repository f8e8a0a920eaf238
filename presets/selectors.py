"""Reads of chains, presets and selections that never write (the services' reads that may
revert an expired pin are ``services.revert_expired_and_read[_all]``).

A pin *episode* starts with the select or restore that made a non-default preset live and
lasts through extensions and syncs of its definition, which are new versions of the same
pin; ``pin_start`` finds that change, and a pin's age counts from it everywhere (the pages,
/metrics, the stale-pin alert).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet

from presets.models import Action, Chain, Preset, Selection


def selections() -> QuerySet[Selection]:
    """Every chain's selection with its chain, default and preset loaded, by chain name."""
    return Selection.objects.select_related("chain", "chain__default_preset", "preset").order_by("chain__name")


@dataclass(frozen=True)
class PinStart:
    """The change that started a pin episode."""

    version: int
    at: datetime
    actor: str
    reason: str
    action: str = Action.SELECT

    def age(self, now: datetime) -> timedelta:
        """How long the pin has been served at ``now``."""
        return now - self.at


def pin_start(*, chain: Chain, version: int) -> PinStart | None:
    """The select or restore that started the pin live at ``version`` (extensions and syncs
    keep a pin; any other change ends it, so the latest such change is where it began)."""
    row = (
        Selection.history.filter(chain_id=chain.pk, version__lte=version, action__in=[Action.SELECT, Action.RESTORE])
        .order_by("-version")
        .values("version", "updated_at", "updated_by", "reason", "action")
        .first()
    )
    if row is None:
        return None
    return PinStart(
        version=row["version"],
        at=row["updated_at"],
        actor=row["updated_by"],
        reason=row["reason"],
        action=row["action"],
    )


def live_pin_start(selection: Selection) -> PinStart | None:
    """Where the live pin began; None when the chain serves its default. A pin whose start is
    not in the history (a hand-made database) starts at its own change."""
    if not selection.is_pinned:
        return None
    return pin_start(chain=selection.chain, version=selection.version) or PinStart(
        version=selection.version,
        at=selection.updated_at,
        actor=selection.updated_by,
        reason=selection.reason,
        action=selection.action,
    )


def pin_age(selection: Selection, *, now: datetime) -> timedelta | None:
    """How long the live pin has been served at ``now`` (extending does not make it younger);
    None when the chain serves its default."""
    start = live_pin_start(selection)
    return None if start is None else start.age(now)


def active_presets(*, chain: int) -> dict[str, Preset]:
    """One chain's non-retired presets by name."""
    presets = Preset.objects.filter(chain_id=chain, retired_at__isnull=True)
    return {p.name: p for p in presets.select_related("chain")}


def active_presets_by_chain() -> dict[int, list[Preset]]:
    """Every chain's non-retired presets, by chain id (one query for the dashboard)."""
    grouped: dict[int, list[Preset]] = {}
    for preset in Preset.objects.filter(retired_at__isnull=True).select_related("chain"):
        grouped.setdefault(preset.chain_id, []).append(preset)
    return grouped
