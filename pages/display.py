"""How chains, pins and presets read on the on-call pages. Pure functions of data already
read: nothing here queries the database or decides whether a change is allowed (that is
``presets.services``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from presets.documents import format_duration
from presets.models import Preset, Selection
from presets.selectors import PinStart

if TYPE_CHECKING:
    from audit.provider_health import StepHealth

# The fleet's health of each step, keyed by (provider, model): ``provider_health.health_by_step``.
HealthMap = Mapping[tuple[str, str], "StepHealth"]


def format_clock(value: datetime, *, now: datetime) -> str:
    """A moment in UTC: "06:03 UTC" today, "Sat 29 Nov 06:03 UTC" on another day."""
    value, now = value.astimezone(UTC), now.astimezone(UTC)
    if value.date() == now.date():
        return f"{value:%H:%M} UTC"
    return f"{value:%a %d %b %H:%M} UTC"


def format_minutes(minutes: int) -> str:
    """A duration choice: 30 -> "30 min", 240 -> "4 h"."""
    return format_duration(timedelta(minutes=minutes))


def step_label(step: dict[str, Any]) -> str:
    """One step as "vendor_b/large"."""
    return f"{step['provider']}/{step['model']}"


@dataclass(frozen=True)
class StepRow:
    """One step of a chain as the pages list it: the step, and how the fleet finds it lately
    (None when nobody reported on it in the last hour: nothing worth a line)."""

    step: dict[str, Any]
    health: StepHealth | None = None

    @property
    def health_class(self) -> str:
        """``failing`` by the fleet's rule (``provider_health.is_failing``), ``quiet`` when no
        attempt was reported in the last 5 minutes, else ``ok``."""
        if self.health is None or not self.health["recent"]["attempts"]:
            return "quiet"
        return "failing" if self.health["failing"] else "ok"


def step_rows(steps: list[dict[str, Any]], health: HealthMap | None) -> list[StepRow]:
    """``steps`` with the health of each, for a step list."""
    rows = []
    for step in steps:
        known = (health or {}).get((step["provider"], step["model"]))
        if known is not None and not (known["hour"]["attempts"] or known["hour"]["outcomes"] or known["instances"]):
            known = None
        rows.append(StepRow(step, known))
    return rows


@dataclass(frozen=True)
class ChainChange:
    """What serving ``steps`` instead of the live steps would change."""

    new_head: dict[str, Any] | None  # the first step, when it differs from the live head
    dropped: list[str] = field(default_factory=list)  # providers that would get no traffic
    added: list[str] = field(default_factory=list)  # providers that would start getting it
    reordered: bool = False  # same providers, different order

    @property
    def is_same(self) -> bool:
        """Whether the steps are exactly the live ones."""
        return self.new_head is None and not (self.dropped or self.added or self.reordered)


def compare_steps(live: list[dict[str, Any]], steps: list[dict[str, Any]]) -> ChainChange:
    """The difference an on-call person must see before serving ``steps`` instead of ``live``."""
    live_providers = _providers(live)
    providers = _providers(steps)
    head = steps[0] if steps else None
    new_head = head if not live or head is None or step_label(head) != step_label(live[0]) else None
    return ChainChange(
        new_head=new_head,
        dropped=[p for p in live_providers if p not in providers],
        added=[p for p in providers if p not in live_providers],
        reordered=set(live_providers) == set(providers) and live_providers != providers,
    )


def _providers(steps: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for step in steps:
        if step["provider"] not in seen:
            seen.append(step["provider"])
    return seen


@dataclass(frozen=True)
class ChangeFacts:
    """Who made a change, when, which action and why: what a card's By/When/Why show."""

    actor: str
    at: datetime
    action: str
    reason: str

    @property
    def done(self) -> str:
        """The action as a past participle: "extended", "synced"."""
        return _DONE.get(self.action, self.action)


_DONE = {
    "select": "pinned",
    "revert": "reverted",
    "extend": "extended",
    "restore": "restored",
    "expire": "expired",
    "sync": "synced",
}


@dataclass(frozen=True)
class LiveState:
    """A chain's live selection with the facts its card shows."""

    selection: Selection
    is_stale: bool  # pinned for longer than the alert threshold
    pinned_for: timedelta | None
    expires_in: timedelta | None
    fleet_summary: str = ""
    steps: list[StepRow] = field(default_factory=list)  # the live steps, with their health
    pin_start: PinStart | None = None  # the select or restore that began the live pin

    @property
    def origin(self) -> ChangeFacts:
        """The change that made the live preset live: for a pin, who pinned it and why (an
        extension or a sync since does not replace that); else the latest change."""
        start, s = self.pin_start, self.selection
        if start is not None and start.version != s.version:
            return ChangeFacts(start.actor, start.at, start.action, start.reason)
        return ChangeFacts(s.updated_by, s.updated_at, s.action, s.reason)

    @property
    def latest(self) -> ChangeFacts | None:
        """The latest change when it is not the origin (an extension of the pin, say)."""
        start, s = self.pin_start, self.selection
        if start is None or start.version == s.version:
            return None
        return ChangeFacts(s.updated_by, s.updated_at, s.action, s.reason)

    @property
    def chain(self) -> str:
        return self.selection.chain.name

    @property
    def is_default(self) -> bool:
        return self.selection.is_default

    @property
    def is_pinned(self) -> bool:
        return self.selection.is_pinned


def live_state(
    selection: Selection,
    *,
    now: datetime,
    alert_after: timedelta,
    fleet_summary: str = "",
    health: HealthMap | None = None,
    pin_start: PinStart | None = None,
) -> LiveState:
    """The card facts of one live selection at ``now``; ``pin_start`` is where the live pin
    began (``selectors.live_pin_start``), ``health`` the fleet's view of its steps."""
    pinned_for = pin_start.age(now) if pin_start is not None else None
    return LiveState(
        selection=selection,
        is_stale=pinned_for is not None and pinned_for > alert_after,
        pinned_for=pinned_for,
        pin_start=pin_start,
        expires_in=selection.expires_at - now if selection.expires_at else None,
        fleet_summary=fleet_summary,
        steps=step_rows(selection.steps, health),
    )


@dataclass(frozen=True)
class PresetChoice:
    """A reviewed preset offered on the chain page, with what it would change."""

    preset: Preset
    is_live: bool
    change: ChainChange
    warning: str | None = None  # e.g. its head has not served a request lately
    steps: list[StepRow] = field(default_factory=list)  # its steps, with their health

    @property
    def name(self) -> str:
        return self.preset.name

    @property
    def degraded(self) -> bool:
        return bool((self.preset.marking or {}).get("degraded"))

    @property
    def note(self) -> str:
        return str((self.preset.marking or {}).get("note") or "")


def preset_choices(
    presets: list[Preset],
    selection: Selection,
    warn: Callable[[list[dict[str, Any]]], str | None] | None = None,
    *,
    health: HealthMap | None = None,
) -> list[PresetChoice]:
    """The presets one can pin (the default is reached with "Revert to default")."""
    return [
        PresetChoice(
            preset=p,
            is_live=p.pk == selection.preset_id,
            change=compare_steps(selection.steps, p.steps),
            warning=warn(p.steps) if warn and p.pk != selection.preset_id else None,
            steps=step_rows(p.steps, health),
        )
        for p in presets
        if not p.is_default
    ]
