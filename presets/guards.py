"""Guarded pins: a pin that restores what it replaced when it makes things worse
(docs/on-call.md, "Guarded pins").

A guard is made with its pin (``services.select_preset(guard=...)``, ``services._watch``) when
the pin changes the chain's head. ``audit.guards`` weighs the fleet's evidence during its bake
window and calls ``restore`` here; a person switches it off (``switch_off``). The guard acts
once, only while its pin is live, and only ever restores the selection its pin replaced (that
selection's preset; a replaced pin keeps its own expiry, and if that has passed since, the
chain's default is served, as it would be by then).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from presets import environments, services
from presets.documents import format_instant, format_time, to_millisecond
from presets.exceptions import InvalidInput, NotFound
from presets.models import GuardState, PinGuard, Selection

# --- reads ----------------------------------------------------------------------------------


def live_guard(*, chain: str, environment: str = "") -> PinGuard | None:
    """The guard of the pin the chain serves now, whatever its state; None if it has none."""
    environment = environments.resolve(environment)
    selection = Selection.objects.filter(chain__name=chain, chain__environment=environment).first()
    if selection is None or not selection.is_pinned:
        return None
    return (
        PinGuard.objects.filter(chain_id=selection.chain_id, pin_version=pin_start(selection))
        .select_related("chain", "previous_preset")
        .first()
    )


def get_live_guard(*, chain: str, environment: str = "") -> PinGuard:
    """The live pin's guard, as the API and the CLI read it (an expired pin reverted first, as
    every read does); NotFound saying why when the chain serves none."""
    selection = services.revert_expired_and_read(chain=chain, environment=environment)
    guard = live_guard(chain=chain, environment=environment)
    if guard is not None:
        return guard
    if selection.is_pinned:
        why = (
            f"its pin {selection.preset.name} (v{pin_start(selection)}) is not guarded: a pin is guarded when "
            "asked or by GUARD_PINS_BY_DEFAULT, and only when it changes the chain's head"
        )
    else:
        why = f"v{selection.version} serves its default preset {selection.preset.name}; only a pin is guarded"
    # After a guard acted (or its pin ended) the live selection has none: say what the last one did.
    last = PinGuard.objects.filter(chain_id=selection.chain_id).order_by("-pin_version").first()
    if last is not None and last.state != GuardState.WATCHING:
        why += f"; the last guard (on v{last.pin_version}) {last.state}: {last.state_reason}"
    details = {"chain": chain, "version": selection.version}
    raise NotFound(f"{chain}'s live selection has no guard: {why}", details=details)


def pin_start(selection: Selection) -> int:
    """The version that made the live pin live: the latest one that was not an extension."""
    start = (
        Selection.history.filter(chain_id=selection.chain_id, version__lte=selection.version)
        .exclude(action="extend")
        .order_by("-version")
        .values_list("version", flat=True)
        .first()
    )
    return start if start is not None else selection.version


def guards_of(chain_ids: list[int]) -> dict[int, PinGuard]:
    """The newest guard of each chain (the dashboard's cards), by chain id."""
    found: dict[int, PinGuard] = {}
    for guard in PinGuard.objects.filter(chain_id__in=chain_ids).order_by("chain_id", "-pin_version"):
        found.setdefault(guard.chain_id, guard)
    return found


def watching() -> list[PinGuard]:
    return list(PinGuard.objects.filter(state=GuardState.WATCHING).select_related("chain"))


def describe(guard: PinGuard, *, now: datetime | None = None) -> str:
    """The guard in one line, as the card and the CLI say it."""
    now = now or timezone.now()
    if guard.state == GuardState.WATCHING:
        line = (
            f"guarded until {format_time(guard.bake_until)}: restores v{guard.previous_version} "
            f"{guard.previous_preset.name} if {guard.head_text} does clearly worse than {guard.old_head_text} did"
        )
        held = (guard.evidence or {}).get("held")  # worse by the figures, on too few tokens' word
        return f"{line}; {held}" if held else line
    return f"guard {guard.state}: {guard.state_reason}"


def guard_entry(guard: PinGuard) -> dict[str, Any]:
    """A guard as the API gives it."""
    return {
        "chain": guard.chain.name,
        "pin_version": guard.pin_version,
        "state": guard.state,
        "state_reason": guard.state_reason,
        "pinned_at": format_instant(guard.pinned_at),
        "bake_until": format_instant(guard.bake_until),
        "restores": {"version": guard.previous_version, "preset": guard.previous_preset.name},
        "new_head": guard.new_head,
        "old_head": guard.old_head,
        "baseline": guard.baseline,
        "evidence": guard.evidence,
        "acted_version": guard.acted_version,
        "summary": describe(guard),
    }


# --- operations -----------------------------------------------------------------------------


def switch_off(*, chain: str, environment: str = "", actor: str, reason: str) -> PinGuard:
    """Switch the live pin's guard off: it will not act on this pin."""
    reason = services.clean_reason(reason)
    now = _now()
    with services.chain_locked(chain, environment) as selection:
        if not selection.is_pinned:
            raise InvalidInput(
                "chain", f"{chain} serves its default (v{selection.version}): no pin, no guard to switch off"
            )
        guard = _locked(selection)
        if guard is None or guard.state not in (GuardState.WATCHING, GuardState.PASSED):
            raise InvalidInput("chain", f"{chain}'s live pin (v{selection.version}) has no guard on to switch off")
        guard.state, guard.state_reason, guard.updated_at = (
            GuardState.OFF,
            services.fit_reason(f"switched off by {actor}: {reason}"),
            now,
        )
        guard.save(update_fields=["state", "state_reason", "updated_at"])
        return guard


def settle(guard_id: int, *, state: str, why: str, now: datetime | None = None) -> None:
    """End a guard's watch without acting (its bake window passed, its pin ended)."""
    PinGuard.objects.filter(pk=guard_id, state=GuardState.WATCHING).update(
        state=state, state_reason=services.fit_reason(why), updated_at=now or _now()
    )


def note(guard_id: int, **fields: Any) -> None:
    """Keep what the evaluation learnt (its baseline, since when the head is worse, the figures)."""
    PinGuard.objects.filter(pk=guard_id, state=GuardState.WATCHING).update(**fields)


def restore(*, guard: int, reason: str, evidence: dict[str, Any]) -> Selection | None:
    """Restore the selection the guard's pin replaced, as a new version by ``system:guard``
    with ``reason`` (the evidence in words); None, and the guard settled, if it may not act
    any more (switched off, acted already, or its pin is no longer live)."""
    now = _now()
    found = PinGuard.objects.filter(pk=guard).values_list("chain__name", "chain__environment").first()
    if found is None:
        raise NotFound(f"no guard {guard}", details={"guard": guard})
    with services.chain_locked(*found) as selection:
        held = PinGuard.objects.select_for_update().select_related("previous_preset", "pin_preset").get(pk=guard)
        if held.state != GuardState.WATCHING:
            return None
        if not selection.is_pinned or pin_start(selection) != held.pin_version:
            held.state, held.state_reason = GuardState.ENDED, f"its pin is no longer live (v{selection.version})"
            held.save(update_fields=["state", "state_reason"])
            return None
        previous = held.previous_preset
        previous.chain = selection.chain
        if previous.is_retired or previous.is_default:
            target, expires_at = selection.chain.default, None
        elif held.previous_expires_at is not None and held.previous_expires_at > now:
            target, expires_at = previous, held.previous_expires_at
        else:
            target, expires_at = selection.chain.default, None  # the replaced pin has expired since
        services.restore_guarded(
            selection, preset=target, expires_at=expires_at, reason=services.fit_reason(reason), now=now
        )
        held.state, held.acted_version, held.evidence, held.updated_at = (
            GuardState.ACTED,
            selection.version,
            evidence,
            now,
        )
        held.state_reason = services.fit_reason(f"restored {target.name} as v{selection.version}: {reason}")
        held.save(update_fields=["state", "acted_version", "evidence", "updated_at", "state_reason"])
        return selection


def _locked(selection: Selection) -> PinGuard | None:
    if not selection.is_pinned:
        return None
    return (
        PinGuard.objects.select_for_update()
        .filter(chain_id=selection.chain_id, pin_version=pin_start(selection))
        .first()
    )


def _now() -> datetime:
    return to_millisecond(timezone.now())
