"""What serving other steps instead of a chain's live steps would change: a new head, providers
that would get no traffic, providers that would start getting it, a new order. Pure functions
of steps as presets and selections hold them; the review before a change (pages, commands)
says what they find."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def step_label(step: Mapping[str, Any]) -> str:
    """One step as "vendor_b/large"."""
    return f"{step['provider']}/{step['model']}"


@dataclass(frozen=True)
class ChainChange:
    """What serving ``steps`` instead of the live steps would change."""

    new_head: Mapping[str, Any] | None  # the first step, when it differs from the live head
    dropped: list[str] = field(default_factory=list)  # providers that would get no traffic
    added: list[str] = field(default_factory=list)  # providers that would start getting it
    reordered: bool = False  # same providers, different order

    @property
    def is_same(self) -> bool:
        """Whether the steps are exactly the live ones."""
        return self.new_head is None and not (self.dropped or self.added or self.reordered)


def compare_steps(live: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> ChainChange:
    """The difference an on-call person must see before serving ``steps`` instead of ``live``."""
    live_providers = providers_of(live)
    providers = providers_of(steps)
    head = steps[0] if steps else None
    new_head = head if not live or head is None or step_label(head) != step_label(live[0]) else None
    return ChainChange(
        new_head=new_head,
        dropped=[p for p in live_providers if p not in providers],
        added=[p for p in providers if p not in live_providers],
        reordered=set(live_providers) == set(providers) and live_providers != providers,
    )


def providers_of(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The providers of ``steps``, each once, in fallback order."""
    seen: list[str] = []
    for step in steps:
        if step["provider"] not in seen:
            seen.append(step["provider"])
    return seen
