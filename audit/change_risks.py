"""Why a change of what a chain serves needs a second look, in the same words wherever a change
is made (the review page before it, the runbook commands with it): the preset is marked
degraded, providers lose all of the chain's traffic, or the fleet finds the new head failing
now (``provider_health.is_failing``, on the last 5 minutes). Pure functions of steps and of
health already read (``provider_health.health_by_step``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from audit.provider_health import StepHealth
from presets.models import is_degraded
from presets.step_changes import compare_steps

# The fleet's health of each step, keyed by (provider, model): ``provider_health.health_by_step``.
HealthMap = Mapping[tuple[str, str], StepHealth]


def reported_health(step: Mapping[str, Any], health: HealthMap | None) -> StepHealth | None:
    """The fleet's health of ``step``, or None when nobody reported on it in the last hour
    (nothing worth a line)."""
    known = (health or {}).get((step["provider"], step["model"]))
    if known is None or not (known["hour"]["attempts"] or known["hour"]["outcomes"] or known["instances"]):
        return None
    return known


def health_class(health: StepHealth | None) -> str:
    """``failing`` by the fleet's rule, ``quiet`` when no attempt was reported in the last 5
    minutes (or none in the hour: ``reported_health`` is None), else ``ok``."""
    if health is None or not health["recent"]["attempts"]:
        return "quiet"
    return "failing" if health["failing"] else "ok"


def change_risks(
    *,
    chain: str,
    target: str,
    marking: Mapping[str, Any] | None,
    live_steps: Sequence[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]],
    health: HealthMap | None,
) -> list[str]:
    """What is risky about serving ``target`` (its ``steps`` and ``marking``) on ``chain``
    instead of ``live_steps``, one sentence each; empty when nothing is."""
    risks = []
    marking = marking or {}
    if is_degraded(marking):
        note = f": {marking['note']}" if marking.get("note") else ""
        risks.append(f"{target} is marked degraded{note}")
    dropped = compare_steps(live_steps, steps).dropped
    if dropped:
        risks.append(f"{', '.join(dropped)} will get no {chain} traffic")
    head = reported_health(steps[0], health) if steps else None
    if head is not None and health_class(head) == "failing":
        risks.append(f"its head is failing now: {head['summary']}")
    return risks
