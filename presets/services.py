"""Every operation that changes what a chain serves. Nothing else writes a Selection.

Each change runs in one transaction holding its chain's row lock and then the chain's
selection row lock (``select_for_update``), so concurrent changes serialise, in the order they
arrived: versions go up by one per change and each historical row's previous value is the row
before it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from presets import environments, events, expiry, selectors, statements
from presets.documents import format_time, to_millisecond
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.models import (
    EPOCH_ROW,
    Action,
    Chain,
    Drill,
    DrillState,
    Epoch,
    PinGuard,
    Preset,
    PresetsRevision,
    Selection,
    Verdict,
    epoch_held,
    expiry_passed,
    lock_selection,
    read_epoch_held,
)
from presets.presets_file import PresetsFile

log = logging.getLogger(__name__)

REASON_MAX = 500
EXPIRY_ACTOR = "system:expiry"
SYNC_ACTOR = "system:sync"
GUARD_ACTOR = "system:guard"

Expiry = datetime | timedelta | None


# --- reads that may write ------------------------------------------------------------


def revert_expired_and_read(*, chain: str, environment: str = "", now: datetime | None = None) -> Selection:
    """The selection a chain of ``environment`` (empty: the default) serves now, *reverting its
    pin first if it has expired* (a read that may write), so an expired pin is never served
    even when no worker runs."""
    now = now or _now()
    environment = environments.resolve(environment)
    selection = selectors.selections(environment).filter(chain__name=chain).first()
    if selection is None:
        raise unknown_chain(chain, environment)
    if selection.is_expired(now):
        expire_pins(now=now, chain_ids=[selection.chain_id])
        selection = selectors.selections().get(pk=selection.pk)
    return selection


def revert_expired_and_read_all(*, environment: str | None = None, now: datetime | None = None) -> list[Selection]:
    """Every live selection of ``environment`` (None: of every environment), *reverting
    expired pins first* (a read that may write)."""
    now = now or _now()
    selections = list(selectors.selections(environment))
    expired = [s.chain_id for s in selections if s.is_expired(now)]
    if expired:
        expire_pins(now=now, chain_ids=expired)
        selections = list(selectors.selections(environment))
    return selections


def unknown_chain(chain: str, environment: str) -> NotFound:
    """The refusal of a chain name that ``environment`` does not have (one that another
    environment has is named, so that nobody takes a missing promotion for a typo)."""
    elsewhere = list(
        Chain.objects.filter(name=chain).exclude(environment=environment).values_list("environment", flat=True)
    )
    details = {"chain": chain, "environment": environment}
    if elsewhere:
        order = environments.names()
        lower = [name for name in elsewhere if name in order and order.index(name) < order.index(environment)]
        how = f": it reaches {environment} with a promotion" if lower else ": it is read there"
        return NotFound(
            f"{environment} has no chain {chain!r} ({', '.join(sorted(elsewhere))} has it{how})", details=details
        )
    if environments.several():
        return NotFound(f"unknown chain {chain!r} in {environment}", details=details)
    return NotFound(f"unknown chain {chain!r}", details={"chain": chain})


# --- changes ----------------------------------------------------------------------------


def select_preset(
    *,
    chain: str,
    environment: str = "",
    preset: str,
    actor: str,
    reason: str,
    expires_at: Expiry = None,
    expected_version: int | None = None,
    guard: bool | None = None,
    spend_bound: Decimal | None = None,
) -> Selection:
    """Make a reviewed preset live. A non-default preset is a pin and always expires.

    ``guard``: watch the pin (``presets.guards``) and restore what it replaced if the fleet
    finds its head clearly worse; None: as ``GUARD_PINS_BY_DEFAULT`` says. ``spend_bound``: the
    chain's spend an hour (the registry's currency) past which a spend alert is raised while
    the pin is live (``audit.spend_alerts``); None: none."""
    reason = clean_reason(reason)
    spend_bound = clean_spend_bound(spend_bound)
    now = _now()
    with _changing(chain, environment, expected_version, preset=preset) as selection:
        target = active_preset(selection, preset)
        refusal = already_live_refusal(selection, target)
        if refusal is not None:
            raise refusal
        if target.is_default and expires_at is not None:
            raise InvalidInput(
                "expires_at",
                f"{preset!r} is the default preset, which never expires: leave the duration out",
            )
        if target.is_default and spend_bound is not None:
            raise InvalidInput(
                "spend_bound_per_hour", f"{preset!r} is the default preset: a spend bound is for a pin; leave it out"
            )
        expiry = None if target.is_default else resolve_expiry(expires_at, now=now)
        _apply(
            selection,
            preset=target,
            action=Action.SELECT,
            actor=actor,
            reason=reason,
            expires_at=expiry,
            now=now,
            spend_bound=spend_bound,
        )
        _watch(selection, guard=guard, now=now)
        return selection


def guard_wanted(asked: bool | None) -> bool:
    """Whether a pin is to be guarded: as asked, or, not asked, as GUARD_PINS_BY_DEFAULT says
    (a guard is made only when the pin changes the head: ``_watch``)."""
    return settings.GUARD_PINS_BY_DEFAULT if asked is None else asked


def fit_reason(text: str, limit: int = REASON_MAX) -> str:
    """A reason the control plane writes itself (a sweep's, a guard's, a plan's), cut to
    ``limit`` with an ellipsis; a person's reason is refused instead (``clean_reason``)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def already_live_refusal(selection: Selection, target: Preset) -> InvalidInput | None:
    """Why pinning ``target`` is refused because it is what the chain serves, or None."""
    if target.pk != selection.preset_id:
        return None
    hint = "use extend to keep it longer" if selection.is_pinned else "nothing to change"
    return InvalidInput("preset", f"{target.name!r} is already live on {selection.chain.name}: {hint}")


def revert_refusal(selection: Selection) -> InvalidInput | None:
    """Why reverting is refused (the chain serves its default), or None."""
    if selection.is_default:
        return InvalidInput("chain", f"{selection.chain.name} already serves its default preset; nothing to revert")
    return None


def extend_refusal(selection: Selection) -> InvalidInput | None:
    """Why moving the pin's expiry is refused (there is no pin), or None."""
    if not selection.is_pinned:
        return InvalidInput("chain", f"{selection.chain.name} is not pinned: only a pin can be extended")
    return None


def revert_to_default(
    *, chain: str, environment: str = "", actor: str, reason: str, expected_version: int | None = None
) -> Selection:
    """End the pin: serve the chain's default preset again."""
    reason = clean_reason(reason)
    with _changing(chain, environment, expected_version) as selection:
        refusal = revert_refusal(selection)
        if refusal is not None:
            raise refusal
        return _serve_default(selection, action=Action.REVERT, actor=actor, reason=reason, now=_now())


def extend_pin(
    *,
    chain: str,
    environment: str = "",
    expires_at: Expiry = None,
    actor: str,
    reason: str,
    expected_version: int | None = None,
    shorten: bool = False,
) -> Selection:
    """Keep the live pin for longer (a decision someone takes, with a reason).

    Extending never ends a pin sooner than it ends now: an earlier expiry is refused unless
    ``shorten`` says ending it earlier is the point (then only an earlier expiry is taken).
    Either way the change is recorded as ``extend``, with the old and the new expiry."""
    reason = clean_reason(reason)
    now = _now()
    with _changing(chain, environment, expected_version) as selection:
        refusal = extend_refusal(selection)
        if refusal is not None:
            raise refusal
        until = resolve_expiry(expires_at, now=now)
        refusal = expiry_change_refusal(selection, until, shorten=shorten, expires_at=expires_at)
        if refusal is not None:
            raise refusal
        return _apply(
            selection,
            preset=selection.preset,
            action=Action.EXTEND,
            actor=actor,
            reason=reason,
            expires_at=until,
            now=now,
            steps=selection.steps,
            marking=selection.marking,
        )


def expiry_change_refusal(
    selection: Selection, until: datetime, *, shorten: bool, expires_at: Expiry = None
) -> InvalidInput | None:
    """Why moving the live pin's expiry to ``until`` is refused, or None: extending must not
    end the pin sooner, shortening must end it sooner (the pages ask before they change)."""
    current = selection.expires_at
    assert current is not None  # only a pin is extended
    field = "duration_minutes" if isinstance(expires_at, timedelta) else "expires_at"
    if not shorten and until < current:
        return InvalidInput(
            field,
            f"that would end the pin at {format_time(until)}, before its current expiry "
            f"{format_time(current)}: extending never shortens a pin. To end it earlier on "
            f'purpose, shorten it ("shorten": true, or "End the pin earlier" on the chain page), '
            f"or revert to the default now",
            expires_at=format_time(current),
        )
    if shorten and until >= current:
        return InvalidInput(
            field,
            f"the pin already ends at {format_time(current)}; shortening must end it before then "
            f"(to keep it longer, extend it)",
            expires_at=format_time(current),
        )
    return None


@contextmanager
def chain_locked(
    chain: str, environment: str, *, preset: str | None = None, expected_version: int | None = None
) -> Iterator[Selection]:
    """The frame of a change, for the domain's other operations (``presets.plans``): one
    transaction holding the chain's locks as every change does (``_lock``), so what they check
    and write about the chain is serialised with its changes (``preset``, ``expected_version``:
    as ``_changing``)."""
    with _changing(chain, environment, expected_version, preset=preset) as selection:
        yield selection


def start_planned_pin(
    selection: Selection, *, preset: Preset, ends_at: datetime, actor: str, reason: str, now: datetime
) -> Selection:
    """Make a planned pin live, inside ``chain_locked``: ``preset`` until ``ends_at`` (the
    plan's end, so the read path stops serving it at that instant as at any pin's expiry),
    guarded as ``GUARD_PINS_BY_DEFAULT`` says."""
    _apply(
        selection,
        preset=preset,
        action=Action.SELECT,
        actor=actor,
        reason=clean_reason(reason),
        expires_at=resolve_expiry(ends_at, now=now),
        now=now,
    )
    _watch(selection, guard=None, now=now)
    return selection


def restore_guarded(
    selection: Selection, *, preset: Preset, expires_at: datetime | None, reason: str, now: datetime
) -> Selection:
    """The guard's restore (``presets.guards.restore``, inside ``chain_locked``): the selection
    the pin replaced, live again as a new version by ``system:guard``."""
    return _apply(
        selection,
        preset=preset,
        action=Action.RESTORE,
        actor=GUARD_ACTOR,
        reason=reason,
        expires_at=expires_at,
        now=now,
    )


def _watch(selection: Selection, *, guard: bool | None, now: datetime) -> PinGuard | None:
    """Guard the pin ``selection`` was just made with, if asked (or by the setting) and if it
    changed the head: the guard compares the two heads."""
    if (
        not guard_wanted(guard)
        or not selection.is_pinned
        or selection.previous_preset is None
        or not selection.previous_steps
    ):
        return None
    assert selection.previous_version is not None  # _apply set it with the previous preset
    new_head, old_head = selection.steps[0], selection.previous_steps[0]
    if (new_head["provider"], new_head["model"]) == (old_head["provider"], old_head["model"]):
        return None  # the same head: nothing for the fleet to compare
    return PinGuard.objects.create(
        chain_id=selection.chain_id,
        pin_version=selection.version,
        pin_preset=selection.preset,
        pinned_at=now,
        pinned_by=selection.updated_by,
        bake_until=now + timedelta(minutes=settings.GUARD_BAKE_MINUTES),
        previous_version=selection.previous_version,
        previous_preset=selection.previous_preset,
        previous_expires_at=selection.previous_expires_at,
        new_head={"provider": new_head["provider"], "model": new_head["model"]},
        old_head={"provider": old_head["provider"], "model": old_head["model"]},
        updated_at=now,
    )


def restore(
    *,
    chain: str,
    environment: str = "",
    version: int,
    actor: str,
    reason: str,
    expected_version: int | None = None,
) -> Selection:
    """Undo the change that produced ``version``: make its previous value live again, as a new
    version. The previous preset is served with its current reviewed definition; a restored
    pin gets a fresh expiry of the default duration."""
    reason = clean_reason(reason)
    now = _now()
    with _changing(chain, environment, expected_version) as selection:
        entry = (
            Selection.history.filter(chain_id=selection.chain_id, version=version)
            .select_related("previous_preset__chain")
            .first()
        )
        if entry is None:
            raise NotFound(f"{chain} has no version {version}", details={"chain": chain, "version": version})
        previous = entry.previous_preset
        refusal = restore_refusal(chain=chain, version=version, previous=previous, live_preset_id=selection.preset_id)
        if refusal is not None:
            raise refusal
        assert previous is not None  # refused above
        expiry = None if previous.is_default else resolve_expiry(None, now=now)
        return _apply(
            selection, preset=previous, action=Action.RESTORE, actor=actor, reason=reason, expires_at=expiry, now=now
        )


def restore_refusal(
    *, chain: str, version: int, previous: Preset | None, live_preset_id: int | None
) -> InvalidInput | None:
    """Why undoing ``version`` (whose previous value was ``previous``) is refused while
    ``live_preset_id`` is live, or None. ``restore`` raises it; the history page shows it
    beside the Restore button instead of offering one."""
    if previous is None:
        return InvalidInput("version", f"v{version} created {chain}; it has no previous value to restore")
    if previous.is_retired:
        return InvalidInput(
            "version",
            f"v{version} replaced preset {previous.name!r}, which has "
            "been retired from the presets file; select an active preset",
        )
    if previous.pk == live_preset_id:
        return InvalidInput(
            "version",
            f"{previous.name!r} (the value before v{version}) is already live; use extend to keep a pin longer",
        )
    return None


@contextmanager
def locked(chain: str, environment: str) -> Iterator[Selection]:
    """The chain's selection locked as every change locks it (one transaction), for
    ``presets.drills``, which decides under the lock whether its change is made."""
    with _changing(chain, environment, None) as selection:
        yield selection


def carry_drill(selection: Selection, *, drill: Drill | None, actor: str, reason: str, now: datetime) -> Selection:
    """A new version that serves what ``selection`` serves (preset, steps, marking, expiry),
    its document carrying ``drill`` (None: no drill): a drill's start or end, made by
    ``presets.drills`` inside ``locked``."""
    reason = fit_reason(reason)
    return _apply(
        selection,
        preset=selection.preset,
        action=Action.DRILL,
        actor=actor,
        reason=reason,
        expires_at=selection.expires_at,
        now=now,
        steps=selection.steps,
        marking=selection.marking,
        drill=drill,
    )


def expire_pins(*, now: datetime | None = None, chain_ids: Iterable[int] | None = None) -> int:
    """Revert every pin whose expiry has passed to its chain's default, raising a
    ``pin_expired`` alert for each in the same transaction. Returns how many.

    Idempotent and safe with several workers: each pin is re-checked under its row lock, so
    only the first sweep to get the lock reverts it."""
    now = now or _now()
    due = Selection.objects.filter(expiry_passed(now))
    if chain_ids is not None:
        due = due.filter(chain_id__in=list(chain_ids))
    reverted = 0
    for selection_id in due.values_list("id", flat=True):
        with transaction.atomic():
            selection = lock_selection(selection_id)
            if not selection.is_expired(now):
                continue  # another sweep, or a person, already ended or extended it
            ended = (
                f"pin {selection.preset.name} (v{selection.version}) by {selection.updated_by} "
                f"at {format_time(selection.updated_at)} expired at "
                f"{format_time(selection.expires_at)}; it was: "
            )
            reason = fit_reason(ended + selection.reason)
            _serve_default(selection, action=Action.EXPIRE, actor=EXPIRY_ACTOR, reason=reason, now=now)
            events.pin_expired.send(sender=Selection, selection=selection, now=now)
            reverted += 1
    return reverted


def raise_epoch(*, actor: str, reason: str, now: datetime | None = None) -> int:
    """Raise the epoch after a database restore; returns the new one.

    Clients order documents by (epoch, version). A restore takes versions back below what
    running services hold, so they would ignore every change; a higher epoch makes this
    database's documents newer again. The new epoch is at least the current Unix time, so
    restoring the same backup twice and raising each time still moves it forward. Every
    chain's document changes (it carries the epoch), so each is announced."""
    reason = clean_reason(reason)
    now = now or _now()
    with transaction.atomic():
        Epoch.objects.get_or_create(pk=EPOCH_ROW)
        row = Epoch.objects.select_for_update().get(pk=EPOCH_ROW)
        previous = row.value
        row.value = max(previous + 1, int(now.timestamp()))
        row.raised_at, row.raised_by, row.reason = now, actor, reason
        row.save()
        for selection in selectors.selections():
            events.selection_changed.send(sender=Selection, selection=selection, epoch=row.value, raised=True)
    log.warning("epoch raised %d -> %d by %s: %s", previous, row.value, actor, reason)
    return row.value


# --- rules shared by the operations ---------------------------------------------------------


def clean_reason(reason: Any) -> str:
    """A reason is required everywhere: stripped, 1..500 characters."""
    if not isinstance(reason, str):
        raise InvalidInput("reason", "must be text")
    reason = reason.strip()
    if not reason:
        raise InvalidInput("reason", "is required: say why (e.g. the incident number)")
    if len(reason) > REASON_MAX:
        raise InvalidInput("reason", f"is {len(reason)} characters; keep it to {REASON_MAX}")
    return reason


def resolve_expiry(expires_at: Expiry, *, now: datetime) -> datetime:
    """A pin's expiry: the default duration, a duration, or a time; future and within the max."""
    if expires_at is None:
        return to_millisecond(now + timedelta(minutes=settings.PIN_DEFAULT_MINUTES))
    if isinstance(expires_at, timedelta):
        if expires_at <= timedelta(0):
            raise InvalidInput("duration_minutes", "must be positive")
        if expires_at > timedelta(minutes=settings.PIN_MAX_MINUTES):
            raise InvalidInput(
                "duration_minutes",
                f"{int(expires_at.total_seconds() // 60)} minutes is longer than the maximum "
                f"pin of {settings.PIN_MAX_MINUTES}; pin for less and extend later if needed",
                max_minutes=settings.PIN_MAX_MINUTES,
            )
        expires_at = now + expires_at
    if timezone.is_naive(expires_at):
        raise InvalidInput("expires_at", "needs a time zone, e.g. 2026-11-29T06:00:00Z")
    # Stored as published: the document states milliseconds, and the pin ends at that instant.
    expires_at = to_millisecond(expires_at)
    latest = now + timedelta(minutes=settings.PIN_MAX_MINUTES)
    if expiry.has_passed(expires_at, now):
        raise InvalidInput("expires_at", f"{format_time(expires_at)} is not in the future")
    if expires_at > latest:
        raise InvalidInput(
            "expires_at",
            f"{format_time(expires_at)} is more than {settings.PIN_MAX_MINUTES} minutes ahead; "
            f"pick a time before {format_time(latest)} and extend later if needed",
            max_minutes=settings.PIN_MAX_MINUTES,
        )
    return expires_at


def _now() -> datetime:
    """The time a change is made, to the millisecond: documents publish times to the
    millisecond, so a pin's stored expiry (now + its duration) is exactly the one stated."""
    return to_millisecond(timezone.now())


@contextmanager
def _changing(
    chain: str, environment: str, expected_version: int | None, *, preset: str | None = None
) -> Iterator[Selection]:
    """The frame of every change: one transaction holding the chain's selection row lock, so
    concurrent changes serialise (and the version the caller saw is checked under it).
    ``preset``: the name of the preset the change makes live, read with the live one."""
    environment = environments.resolve(environment)
    with transaction.atomic():
        yield _lock(chain, environment, expected_version, preset=preset)


def _lock(chain: str, environment: str, expected_version: int | None, *, preset: str | None = None) -> Selection:
    """Lock the chain's row and its selection row, then load what every change reads: the
    chain, its default and the live preset, the preset named ``preset`` if any
    (``selection.presets_read``, by name), and the epoch (held: ``models.epoch_held``). Two
    statements, as every change pays for them, each a round trip under the lock.

    Changes queue on the chain's row (a subquery on its name, ``FOR NO KEY UPDATE``: history
    rows still reference it), which no change rewrites, so they are served first come, first
    served. Queued on the selection row alone, which every change rewrites, they were not:
    PostgreSQL queues a row's waiters per version of the row, and a writer arriving after a
    change found the newest version with nobody queued on it, ahead of those still waiting on
    an older one (8 writers on one chain: p99 3x their median; bench/README.md). The selection
    row is still locked: the sweeps lock it alone (``lock_selection``), without the chain's.

    The lock statement joins nothing (``lock_selection`` says why). The second statement,
    made after the locks are held, sees under READ COMMITTED what the change we may have
    waited for committed."""
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(connection.vendor), [chain, environment])
        locked = cursor.fetchone()
        if locked is None:
            raise unknown_chain(chain, environment)
        selection, _ = statements.from_row(Selection, locked)
        assert selection is not None
        cursor.execute(_read_sql(connection.vendor), [selection.preset_id, selection.chain_id, preset])
        rows = cursor.fetchall()
    read = [_preset_from_row(row) for row in rows]
    live = next(each for each in read if each.pk == selection.preset_id)
    # A chain only ever serves its own presets, so the live preset's chain is the selection's.
    selection.chain = live.chain
    selection.preset = live
    selection.presets_read = {each.name: each for each in read}
    for each in read:
        each.chain = live.chain
    selection.change_epoch = rows[0][-1] or 0
    if expected_version is not None and expected_version != selection.version:
        raise Conflict(
            f"{chain} changed since v{expected_version}: it is now v{selection.version}, "
            f"{selection.action} of {selection.preset.name} by {selection.updated_by} at "
            f"{format_time(selection.updated_at)} (reason: {selection.reason}). Check it and "
            "try again with the new version.",
            details={
                "expected_version": expected_version,
                "current": selection.to_document(),
                "action": selection.action,
            },
        )
    return selection


@functools.cache
def _lock_sql(vendor: str) -> str:
    """``_lock``'s first statement: the chain's row locked ``FOR NO KEY UPDATE`` (history rows
    still reference it), then its selection row ``FOR UPDATE``. Written once rather than built
    by the ORM on every change: compiling it cost more CPU than PostgreSQL spent running it."""
    quote = connection.ops.quote_name
    for_chain, for_selection = (" FOR NO KEY UPDATE", " FOR UPDATE") if vendor == "postgresql" else ("", "")
    return (
        f"SELECT {statements.columns(Selection, 's')} FROM {quote(Selection._meta.db_table)} s "
        f"WHERE s.{quote('chain_id')} = (SELECT c.{quote('id')} FROM {quote(Chain._meta.db_table)} c "
        f"WHERE c.{quote('name')} = %s AND c.{quote('environment')} = %s{for_chain}){for_selection}"
    )


@functools.cache
def _read_sql(vendor: str) -> str:
    """``_lock``'s second statement: the live preset (by id) and the one named (by chain and
    name), each with its chain and the chain's default preset, and the epoch held."""
    quote = connection.ops.quote_name
    presets, chains = quote(Preset._meta.db_table), quote(Chain._meta.db_table)
    return (
        f"SELECT {statements.columns(Preset, 'p')}, {statements.columns(Chain, 'c')}, "
        f"{statements.columns(Preset, 'd')}, ({epoch_held()}) FROM {presets} p "
        f"JOIN {chains} c ON c.{quote('id')} = p.{quote('chain_id')} "
        f"LEFT JOIN {presets} d ON d.{quote('id')} = c.{quote('default_preset_id')} "
        f"WHERE p.{quote('id')} = %s OR (p.{quote('chain_id')} = %s AND p.{quote('name')} = %s)"
    )


def _preset_from_row(row: tuple[Any, ...]) -> Preset:
    """A row of ``_read_sql``: the preset, its chain and the chain's default preset."""
    preset, start = statements.from_row(Preset, row)
    chain, start = statements.from_row(Chain, row, start)
    default, _ = statements.from_row(Preset, row, start)
    assert preset is not None and chain is not None  # an inner join: both are there
    chain.default_preset = default
    preset.chain = chain
    return preset


def active_preset(selection: Selection, name: str) -> Preset:
    """The preset ``name`` of the selection's chain, read by ``_lock``; refused if it does not
    exist or is retired."""
    preset = selection.presets_read.get(name)
    refusal = preset_refusal(selection.chain, name, preset)
    if refusal is not None:
        raise refusal
    assert preset is not None  # refused above
    return preset


def preset_refusal(chain: Chain, name: str, preset: Preset | None) -> InvalidInput | None:
    """Why ``name`` (read as ``preset``, None if there is none) cannot be served on ``chain``:
    it does not exist or is retired; None when it can."""
    if preset is not None and not preset.is_retired:
        return None
    active = sorted(chain.presets.filter(retired_at__isnull=True).values_list("name", flat=True))
    state = "is retired" if preset else "does not exist"
    return InvalidInput("preset", f"{name!r} {state} on {chain.name}: use one of {', '.join(active)}", choices=active)


def _serve_default(selection: Selection, *, action: str, actor: str, reason: str, now: datetime) -> Selection:
    """End the pin: the chain's default preset, which never expires, is live again."""
    return _apply(
        selection, preset=selection.chain.default, action=action, actor=actor, reason=reason, expires_at=None, now=now
    )


# ``_apply``'s default: keep the live pin's spend bound while that pin goes on.
KEEP_BOUND = object()
# The largest spend bound (the column's digits), in the registry's currency an hour.
SPEND_BOUND_MAX = Decimal("9999999999.99")


# What a form or an API field says of a spend bound it cannot read (Django's and DRF's keys).
SPEND_BOUND_ERRORS = {
    "invalid": "a spend bound is an amount, like 25 or 12.50 (or leave it out for none)",
    "min_value": "a spend bound is more than 0 (or leave it out for none)",
    "max_value": f"a spend bound is at most {SPEND_BOUND_MAX}",
    "max_digits": f"a spend bound is at most {SPEND_BOUND_MAX}",
    "max_whole_digits": f"a spend bound is at most {SPEND_BOUND_MAX}",
    "max_decimal_places": "a spend bound is to the cent: at most 2 decimal places",
}


def clean_spend_bound(value: Decimal | None) -> Decimal | None:
    """A pin's spend bound, checked: above 0 and at most ``SPEND_BOUND_MAX``, to the cent."""
    if value is None:
        return None
    if not isinstance(value, Decimal) or not value.is_finite() or value <= 0 or value > SPEND_BOUND_MAX:
        raise InvalidInput(
            "spend_bound_per_hour",
            f"a spend bound is an amount an hour above 0 and at most {SPEND_BOUND_MAX} (e.g. 25.00); "
            "leave it out for none",
        )
    return value.quantize(Decimal("0.01"))


def _apply(
    selection: Selection,
    *,
    preset: Preset,
    action: str,
    actor: str,
    reason: str,
    expires_at: datetime | None,
    now: datetime,
    steps: list[dict[str, Any]] | None = None,
    marking: dict[str, Any] | None = None,
    drill: Drill | None = None,
    spend_bound: Decimal | None | object = KEEP_BOUND,
) -> Selection:
    """Write one new version, recording the value it replaces (one history row).

    ``spend_bound``: the new pin's spend bound (a select); left out, the live one is kept
    while the same preset stays pinned (extend, a drill, a sync) and dropped otherwise: a
    bound lasts as long as its pin.

    ``drill``: the failover drill the new version's document carries (``presets.drills``
    starts and ends one with ``Action.DRILL``). Any other change takes a running drill out of
    the document and ends it as aborted, in the same transaction: a drill never runs while
    the chain is pinned, and it drills the steps it was started on, no others."""
    before = f"v{selection.version} {selection.preset.name}"
    interrupted = selection.drill_id if action != Action.DRILL else None
    if spend_bound is KEEP_BOUND:
        same_pin = preset.pk == selection.preset_id and expires_at is not None
        spend_bound = selection.spend_bound_per_hour if same_pin else None
    selection.spend_bound_per_hour = spend_bound  # type: ignore[assignment]
    selection.previous_version = selection.version
    selection.previous_preset = selection.preset
    selection.previous_steps = selection.steps
    selection.previous_expires_at = selection.expires_at
    selection.version += 1
    selection.preset = preset
    if steps is None:  # the preset's definition; else (extend, drill) what is served is kept
        selection.failure_policy = preset.failure_policy
    selection.steps = steps if steps is not None else preset.steps
    selection.marking = marking if marking is not None else preset.marking
    selection.updated_by = actor
    selection.reason = reason
    selection.updated_at = now
    selection.expires_at = expires_at
    selection.action = action
    selection.drill = drill
    with statements.together():  # one round trip under the lock (presets/statements.py)
        statements.update_row(selection)
        statements.insert_row(_history_row(selection))
        _announce(selection)
    if interrupted is not None:
        _interrupt_drill(interrupted, selection, now=now)
    log.info(
        "chain %s: %s -> v%d %s (%s by %s): %s",
        selection.chain.name,
        before,
        selection.version,
        preset.name,
        action,
        actor,
        reason,
    )
    return selection


def _interrupt_drill(drill_id: int, selection: Selection, *, now: datetime) -> None:
    """End the drill a change other than a drill's took out of the chain's document."""
    why = (
        f"aborted: v{selection.version} ({selection.action} of {selection.preset.name} by {selection.updated_by}) "
        "took the drill out of the chain's document: a drill runs only on the chain it was started on, never "
        "while it is pinned"
    )
    changed = Drill.objects.filter(pk=drill_id, state=DrillState.RUNNING).update(
        state=DrillState.ENDED,
        verdict=Verdict.ABORTED,
        reasons=[why],
        ended_at=now,
        ended_by=selection.updated_by,
        ended_version=selection.version,
        judged_at=now,
    )
    if changed:
        events.drill_ended.send(sender=Drill, drill=Drill.objects.select_related("chain").get(pk=drill_id), now=now)


def _history_row(selection: Selection) -> models.Model:
    """The history row of the version ``selection`` now holds, as django-simple-history's
    ``post_save`` makes it on ``save()`` ("~": a change), for ``_apply`` to send with the row."""
    return Selection.history.model(
        history_date=timezone.now(),
        history_type="~",
        history_user=None,
        history_change_reason=None,
        **{field.attname: getattr(selection, field.attname) for field in Selection._meta.concrete_fields},
    )


def _announce(selection: Selection) -> None:
    """Tell the receivers of ``selection_changed`` of a new version, with the epoch it is
    made under: the one ``_lock`` read, or (the sweeps and sync lock without it) read now,
    held alike until the change commits."""
    if selection.change_epoch is None:
        selection.change_epoch = read_epoch_held()
    events.selection_changed.send(sender=Selection, selection=selection, epoch=selection.change_epoch)


# --- presets file sync --------------------------------------------------------------------


@dataclass
class SyncReport:
    """What a sync changed (or would change, on a dry run)."""

    lines: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.lines)

    def add(self, line: str) -> None:
        self.lines.append(line)


class SyncRefused(Exception):
    """The file is valid but cannot be applied to this database; nothing was written."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _DryRun(Exception):
    pass


def sync_presets(*, presets_file: PresetsFile, dry_run: bool = False) -> SyncReport:
    """Make the first environment's chains and presets match the reviewed file, all or nothing
    (each next environment gets the file by a promotion: ``presets.promotions``).

    Creates chains (with their default live as v1), adds and updates presets, retires
    removed ones (never a live one), and applies a changed definition of a live preset as a
    new version (action ``sync``)."""
    return apply_presets(presets_file=presets_file, environment=environments.first(), dry_run=dry_run)


def apply_presets(
    *, presets_file: PresetsFile, environment: str, dry_run: bool = False, reason: str = "", actor: str = SYNC_ACTOR
) -> SyncReport:
    """``sync_presets`` for ``environment``: a sync's, or a promotion's (``reason``: the
    history's, else the file's name and hash). Records the file as the environment's presets
    revision (``PresetsRevision``)."""
    report = SyncReport()
    try:
        with transaction.atomic():
            _sync(presets_file, report, environment=environment, reason=reason, actor=actor)
            if not dry_run:
                PresetsRevision.record(presets_file, environment=environment, now=_now(), actor=actor)
            if dry_run:
                raise _DryRun
    except _DryRun:
        pass
    return report


def _sync(presets_file: PresetsFile, report: SyncReport, *, environment: str, reason: str, actor: str) -> None:
    now = _now()
    reason = reason or f"presets file {Path(presets_file.path).name} sha256 {presets_file.sha256[:12]}"
    problems: list[str] = []
    chains = Chain.objects.filter(environment=environment)
    missing_chains = chains.exclude(name__in=presets_file.chains).values_list("name", flat=True)
    for name in missing_chains:
        problems.append(
            f"$.chains.{name}: chain {name!r} exists but is not in the file; chains "
            "are never deleted (history must resolve): keep it in the file"
        )
    for spec in presets_file.chains.values():
        chain, created = chains.select_for_update().get_or_create(
            name=spec.name,
            environment=environment,
            defaults={"description": spec.description, "contract": spec.contract},
        )
        if created:
            report.add(f"+ chain {spec.name}")
        elif (chain.description, chain.contract) != (spec.description, spec.contract):
            chain.description, chain.contract = spec.description, spec.contract
            chain.save()
            report.add(f"~ chain {spec.name}: description/contract updated")
        existing = {p.name: p for p in chain.presets.all()}
        for preset_spec in spec.presets.values():
            preset = existing.get(preset_spec.name)
            values = {
                "steps": preset_spec.steps,
                "marking": preset_spec.marking,
                "failure_policy": preset_spec.failure_policy,
                "description": preset_spec.description,
                "source_hash": preset_spec.source_hash,
                "retired_at": None,
            }
            if preset is None:
                Preset.objects.create(chain=chain, name=preset_spec.name, **values)
                report.add(f"+ preset {spec.name}/{preset_spec.name} {_describe_steps(preset_spec.steps)}")
            elif preset.source_hash != preset_spec.source_hash or preset.is_retired:
                was = "retired " if preset.is_retired else ""
                for key, value in values.items():
                    setattr(preset, key, value)
                preset.save()
                report.add(
                    f"~ preset {spec.name}/{preset_spec.name} ({was}definition changed) "
                    f"{_describe_steps(preset_spec.steps)}"
                )
        selection_id = Selection.objects.filter(chain=chain).values_list("id", flat=True).first()
        selection = lock_selection(selection_id) if selection_id is not None else None
        for name, preset in existing.items():
            if name not in spec.presets and not preset.is_retired:
                if selection is not None and selection.preset_id == preset.pk:
                    problems.append(
                        f"$.chains.{spec.name}.presets: {name!r} is live on {spec.name} "
                        f"(v{selection.version}) and cannot be retired; revert or select "
                        "another preset first, then sync again"
                    )
                    continue
                preset.retired_at = now
                preset.save()
                report.add(f"- preset {spec.name}/{name} retired")
        default_name = spec.default_in(environment)
        default = chain.presets.get(name=default_name)
        if chain.default_preset_id != default.pk:
            old = chain.default_preset.name if chain.default_preset else None
            chain.default_preset = default
            chain.save()
            if old is not None:
                report.add(f"~ chain {spec.name}: default {old} -> {default_name}")
        if selection is None:
            created_selection = Selection.objects.create(
                chain=chain,
                version=1,
                preset=default,
                steps=default.steps,
                marking=default.marking,
                failure_policy=default.failure_policy,
                updated_by=actor,
                reason=fit_reason(f"chain created from {reason}"),
                updated_at=now,
                expires_at=None,
                action=Action.SYNC,
            )
            _announce(created_selection)
            report.add(f"+ {spec.name} v1 serves {default_name}")
            continue
        _sync_live(selection, chain, reason=fit_reason(reason), actor=actor, now=now, report=report)
    if problems:
        raise SyncRefused(problems)


def _sync_live(
    selection: Selection, chain: Chain, *, reason: str, actor: str, now: datetime, report: SyncReport
) -> None:
    """Apply reviewed changes to what the chain serves now, as one new version."""
    selection.chain = chain
    live = chain.presets.get(pk=selection.preset_id)
    was_default = selection.is_default
    target, expiry = live, selection.expires_at
    if was_default and not live.is_default:
        target = chain.default  # the chain serves its default, and the default moved
    elif live.is_default:
        expiry = None  # the pinned preset became the default: nothing left to expire
    if (target.pk, target.steps, target.marking, target.failure_policy, expiry) == (
        selection.preset_id,
        selection.steps,
        selection.marking,
        selection.failure_policy,
        selection.expires_at,
    ):
        return
    _apply(selection, preset=target, action=Action.SYNC, actor=actor, reason=reason, expires_at=expiry, now=now)
    report.add(f"~ {chain.name} v{selection.version} serves {target.name} {_describe_steps(target.steps)}")


def _describe_steps(steps: list[dict[str, Any]]) -> str:
    return "[" + ", ".join(f"{s['provider']}/{s['model']}" for s in steps) + "]"
