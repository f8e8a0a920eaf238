"""Reads of chains, presets and selections that never write (the services' reads that may
revert an expired pin are ``services.revert_expired_and_read[_all]``).

A pin *episode* starts with the select or restore that made a non-default preset live and
lasts through extensions and syncs of its definition, which are new versions of the same
pin; ``pin_start`` finds that change, and a pin's age counts from it everywhere (the pages,
/metrics, the stale-pin alert).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.db.models.query import RawQuerySet

from presets import environments, statements
from presets.models import Action, Chain, Preset, Selection


def selections(environment: str | None = None) -> QuerySet[Selection]:
    """Every chain's selection in ``environment`` (None: in every environment) with its chain,
    default and preset loaded, by chain name."""
    found = Selection.objects.select_related("chain", "chain__default_preset", "preset", "drill")
    if environment is not None:
        found = found.filter(chain__environment=environment)
    return found.order_by("chain__name", "chain__environment")


def chains_by_label(labels: Iterable[str]) -> dict[str, Chain]:
    """The chains these labels name (``environments.label``), one query per environment;
    unknown ones left out."""
    wanted: dict[str, dict[str, str]] = {}
    for label in labels:
        environment, name = environments.from_label(label)
        wanted.setdefault(environment, {})[name] = label
    found: dict[str, Chain] = {}
    for environment, names in wanted.items():
        for chain in Chain.objects.filter(environment=environment, name__in=names):
            found[names[chain.name]] = chain
    return found


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


# The changes that start a pin episode (presets_hsel_pin_start indexes them by chain and version).
_STARTS = [Action.SELECT, Action.RESTORE]
_START_FIELDS = ("version", "updated_at", "updated_by", "reason", "action")


def pin_start(*, chain: Chain, version: int) -> PinStart | None:
    """The select or restore that started the pin live at ``version`` (extensions and syncs
    keep a pin; any other change ends it, so the latest such change is where it began)."""
    row = (
        Selection.history.filter(chain_id=chain.pk, version__lte=version, action__in=_STARTS)
        .order_by("-version")
        .values(*_START_FIELDS)
        .first()
    )
    return None if row is None else _pin_start(row)


def live_pin_start(selection: Selection) -> PinStart | None:
    """Where the live pin began; None when the chain serves its default. A pin whose start is
    not in the history (a hand-made database) starts at its own change."""
    if not selection.is_pinned:
        return None
    return pin_start(chain=selection.chain, version=selection.version) or _own_start(selection)


def live_pin_starts(selections: Iterable[Selection]) -> dict[int, PinStart | None]:
    """``live_pin_start`` of every selection, by chain id, in one query for any number of
    chains (the dashboard's and the history pages' cards): each pinned chain's latest select
    or restore at or before its version in the table, one index probe a chain.

    The table's version is the one read, or later if a change has landed since: a start found
    at or before the version read is then that version's start too (no select or restore
    came between); one after it is that chain's own ``pin_start`` query."""
    selections = list(selections)
    starts: dict[int, PinStart | None] = {s.chain_id: None for s in selections}
    pinned = [s for s in selections if s.is_pinned]
    if not pinned:
        return starts
    found = {row.chain_id: row for row in _latest_starts([s.pk for s in pinned])}
    for selection in pinned:
        row = found.get(selection.chain_id)
        if row is not None and row.version > selection.version:  # a new pin since it was read
            start = pin_start(chain=selection.chain, version=selection.version)
        else:
            start = None if row is None else _pin_start({name: getattr(row, name) for name in _START_FIELDS})
        starts[selection.chain_id] = start or _own_start(selection)
    return starts


def pin_starts_at(versions: Iterable[tuple[int, int]]) -> dict[tuple[int, int], PinStart]:
    """``pin_start`` of each (chain id, version) given, in one query whatever their number (a
    history page's rows): each one index probe, like ``_latest_starts``. A version with no
    select or restore at or before it is left out. The query is made for no versions too, so
    a page's query count does not depend on what it lists."""
    keys = sorted(set(versions))
    history = Selection.history.model._meta.db_table
    starts = statements.placeholders(len(_STARTS))
    # The versions as one VALUES list, probed by one correlated subquery: a UNION of one probe
    # a version cost the planner more than the database took to run it.
    pairs = ", ".join(["(%s, %s)"] * len(keys)) or "(CAST(NULL AS INTEGER), CAST(NULL AS INTEGER))"
    fields = ", ".join(f"h.{name}" for name in ("history_id", "chain_id", *_START_FIELDS))
    sql = (
        f"WITH v (chain_id, version) AS (VALUES {pairs}) "
        f"SELECT {fields} FROM {history} h WHERE h.history_id IN ("
        f"SELECT (SELECT x.history_id FROM {history} x WHERE x.chain_id = v.chain_id AND x.version <= v.version "
        f"AND x.action IN ({starts}) ORDER BY x.version DESC LIMIT 1) FROM v)"
    )
    params = [*(value for key in keys for value in key), *_STARTS]
    rows = sorted(Selection.history.model.objects.raw(sql, params), key=lambda row: row.version)
    found: dict[tuple[int, int], PinStart] = {}
    for chain_id, version in keys:
        before = [row for row in rows if row.chain_id == chain_id and row.version <= version]
        if before:
            found[chain_id, version] = _pin_start({name: getattr(before[-1], name) for name in _START_FIELDS})
    return found


def _latest_starts(selection_ids: list[int]) -> RawQuerySet[Any]:
    """The history row of each selection's latest select or restore at or before its version.

    Written out: the ORM's form of it (a subquery a chain inside a subquery) cost more Python
    to build and compile than the database took to run it; the raw query still converts each
    column as the model's field reads it, on any database."""
    history, live = Selection.history.model._meta.db_table, Selection._meta.db_table
    ids, starts = statements.placeholders(len(selection_ids)), statements.placeholders(len(_STARTS))
    fields = ", ".join(f"h.{name}" for name in ("history_id", "chain_id", *_START_FIELDS))
    sql = (
        f"SELECT {fields} FROM {history} h WHERE h.history_id IN ("
        f"SELECT (SELECT x.history_id FROM {history} x WHERE x.chain_id = s.chain_id AND x.version <= s.version "
        f"AND x.action IN ({starts}) ORDER BY x.version DESC LIMIT 1) FROM {live} s WHERE s.id IN ({ids}))"
    )
    return Selection.history.model.objects.raw(sql, [*_STARTS, *selection_ids])


def _pin_start(row: dict[str, Any]) -> PinStart:
    return PinStart(
        version=row["version"],
        at=row["updated_at"],
        actor=row["updated_by"],
        reason=row["reason"],
        action=row["action"],
    )


def _own_start(selection: Selection) -> PinStart:
    return PinStart(
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


def environments_having(chain: str) -> set[str]:
    """The environments that have a chain named ``chain`` (the pages' environment switcher
    links to it only where it is)."""
    return set(Chain.objects.filter(name=chain).values_list("environment", flat=True))


def active_presets(*, chain: int) -> dict[str, Preset]:
    """One chain's non-retired presets by name."""
    presets = Preset.objects.filter(chain_id=chain, retired_at__isnull=True)
    return {p.name: p for p in presets.select_related("chain")}


def active_presets_by_chain(chains: Mapping[int, Chain]) -> dict[int, list[Preset]]:
    """The non-retired presets of ``chains`` (read already, by id) by name, by chain id, in
    one query (the dashboard): each preset is given its chain object, not read again."""
    grouped: dict[int, list[Preset]] = {}
    presets = Preset.objects.filter(retired_at__isnull=True, chain_id__in=list(chains)).order_by("chain_id", "name")
    for preset in presets:
        preset.chain = chains[preset.chain_id]
        grouped.setdefault(preset.chain_id, []).append(preset)
    return grouped
