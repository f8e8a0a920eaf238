"""Guarded pins on a controlled clock (presets/guards.py, audit/guards.py): the fleet's reports
recorded as the usage API records them, the guard weighed as the beat weighs it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import override_settings

from audit import guards as weighing
from audit.models import Alert, AlertKind, FleetInstance
from audit.provider_health import StepReport, record_health
from presets import guards, services
from presets.exceptions import InvalidInput
from presets.models import Chain, PinGuard, Selection
from presets.wire import LATENCY_BOUNDS_MS

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, 30, tzinfo=UTC)  # the pin's instant
OLD, NEW = ("vendor_a", "large"), ("vendor_b", "large")


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0 - timedelta(minutes=10), tick=False) as traveller:
        yield traveller


def fleet(count: int) -> list[int]:
    chain = Chain.objects.get(name="chat")
    return [
        FleetInstance.objects.create(
            chain=chain,
            client=f"svc/i{n}",
            applied_version=1,
            version_seen_at=T0 - timedelta(hours=1),
            first_seen_at=T0 - timedelta(hours=1),
            last_seen_at=T0,
        ).pk
        for n in range(count)
    ]


def report(
    instances: list[int], head: tuple[str, str], *, at: datetime, served: int, errors: int = 0, latency_ms: int = 250
) -> None:
    """Each instance reports ``served`` and ``errors`` attempts on ``head`` at ``at``."""
    bucket = next((i for i, bound in enumerate(LATENCY_BOUNDS_MS) if latency_ms <= bound), len(LATENCY_BOUNDS_MS))
    histogram = tuple(served if i == bucket else 0 for i in range(len(LATENCY_BOUNDS_MS) + 1))
    chain = Chain.objects.get(name="chat")
    for n, instance in enumerate(instances):
        record_health(
            chain=chain,
            instance=instance,
            token=f"svc-{n % 2}",  # two services: enough tokens (EVIDENCE_MIN_TOKENS) to act on
            steps=[
                StepReport(head[0], head[1], {"served": served, "server_error": errors}, histogram),
            ],
            breaker_openings={},
            now=at,
        )


def before_the_pin(instances: list[int], *, served: int = 20, errors: int = 0, latency_ms: int = 250) -> None:
    for minutes in (8, 5, 2, 0):
        report(instances, OLD, at=T0 - timedelta(minutes=minutes), served=served, errors=errors, latency_ms=latency_ms)


def pin(clock: Any, **kwargs: Any) -> Selection:
    clock.move_to(T0)
    kwargs.setdefault("guard", True)
    return services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="INC-1 vendor_a slow", **kwargs
    )


def run(
    clock: Any, instances: list[int], *, until: timedelta, served: int, errors: int = 0, latency_ms: int = 250
) -> list[int]:
    """Every 15 s from the pin to ``until`` after it: the fleet reports on the new head, the beat
    weighs; the guards that acted."""
    acted: list[int] = []
    at = T0 + timedelta(seconds=15)
    while at <= T0 + until:
        clock.move_to(at)
        report(instances, NEW, at=at, served=served, errors=errors, latency_ms=latency_ms)
        acted += weighing.check_guards(now=at).acted
        at += timedelta(seconds=15)
    return acted


def guard() -> PinGuard:
    return PinGuard.objects.get(chain__name="chat")


def live() -> Selection:
    return Selection.objects.select_related("preset").get(chain__name="chat")


def test_a_pin_whose_head_does_clearly_worse_is_restored_once_by_system_guard_with_the_evidence(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances, served=20, errors=0)
    pin(clock)
    assert guard().state == "watching" and guard().previous_version == 1
    acted = run(clock, instances, until=timedelta(minutes=8), served=5, errors=5)  # 50 % errors
    assert acted == [guard().pk]  # once
    restored = live()
    assert (restored.version, restored.preset.name, restored.updated_by, restored.action) == (
        3,
        "normal",
        "system:guard",
        "restore",
    )
    assert "vendor_b/large did worse than vendor_a/large" in restored.reason
    assert "50.0 % errors against 0.0 %" in restored.reason
    held = guard()
    assert (held.state, held.acted_version) == ("acted", 3)
    assert held.evidence["current"]["instances"] == 4 and held.evidence["baseline"]["attempts"] == 320
    # It acted after the sustained span, not at the first worse figure.
    assert restored.updated_at >= T0 + timedelta(seconds=15 + 180)
    alert = Alert.objects.get(kind=AlertKind.GUARD_RESTORED)
    assert alert.version == 3 and "restored normal as v3" in alert.message and not alert.is_open


@override_settings(GUARD_LATENCY_MARGIN_PERCENT=50)
def test_a_slower_head_by_more_than_the_latency_margin_is_restored(clock: Any) -> None:
    instances = fleet(3)
    before_the_pin(instances, served=20, latency_ms=400)  # p95 500 ms
    pin(clock)
    assert run(clock, instances, until=timedelta(minutes=5), served=10, latency_ms=2000)  # p95 2500 ms
    assert "p95 2500 ms against 500 ms" in live().reason


@pytest.mark.slow
def test_noise_inside_the_margin_never_acts_and_the_guard_passes_at_the_end_of_its_window(clock: Any) -> None:
    """Slow on purpose: a guard's whole window (31 minutes of reports from four instances)
    passes, as nothing short of its end shows that it passes."""
    instances = fleet(4)
    before_the_pin(instances, served=50, errors=1)  # 2 %
    pin(clock)
    assert run(clock, instances, until=timedelta(minutes=31), served=10, errors=1) == []  # 9 %: inside 10 points
    assert live().version == 2
    assert guard().state == "passed" and "without cause to act" in guard().state_reason


def test_too_few_instances_never_act(clock: Any) -> None:
    instances = fleet(2)  # GUARD_MIN_INSTANCES is 3
    before_the_pin(instances, served=40)
    pin(clock)
    assert run(clock, instances, until=timedelta(minutes=8), served=20, errors=20) == []
    assert live().version == 2
    assert "too little evidence about vendor_a/large before the pin" in guard().state_reason


def test_a_degraded_old_head_is_never_restored(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances, served=10, errors=10)  # vendor_a failing: why the pin was made
    pin(clock)
    assert run(clock, instances, until=timedelta(minutes=8), served=5, errors=15) == []
    assert live().version == 2
    assert guard().state == "passed" and "was failing before the pin" in guard().state_reason


def test_a_guard_switched_off_never_acts(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances)
    pin(clock)
    with pytest.raises(InvalidInput, match="reason"):
        guards.switch_off(chain="chat", actor="bob", reason=" ")
    guards.switch_off(chain="chat", actor="bob", reason="vendor_b is expected to be slow")
    assert run(clock, instances, until=timedelta(minutes=8), served=5, errors=5) == []
    assert live().version == 2
    assert (guard().state, guard().state_reason) == ("off", "switched off by bob: vendor_b is expected to be slow")
    with pytest.raises(InvalidInput, match="no guard on"):
        guards.switch_off(chain="chat", actor="bob", reason="again")


def test_a_break_in_the_bad_figures_starts_the_sustained_span_again(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances)
    pin(clock)
    assert run(clock, instances, until=timedelta(minutes=2), served=5, errors=5) == []  # worse for 105 s
    report(instances, NEW, at=T0 + timedelta(minutes=2, seconds=20), served=500)  # a good minute dilutes it
    clock.move_to(T0 + timedelta(minutes=2, seconds=30))
    assert weighing.check_guards(now=T0 + timedelta(minutes=2, seconds=30)).acted == []
    assert guard().worse_since is None


def test_the_guard_ends_with_its_pin_and_never_restores_over_a_later_change(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances)
    pin(clock)
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-2")
    assert run(clock, instances, until=timedelta(minutes=5), served=5, errors=5) == []
    assert live().preset.name == "drop_vendor_b"
    assert guard().state == "ended"


def test_an_extended_pin_stays_guarded(clock: Any) -> None:
    instances = fleet(4)
    before_the_pin(instances)
    pin(clock)
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="bob", reason="longer")
    assert run(clock, instances, until=timedelta(minutes=5), served=5, errors=5)
    assert (live().version, live().preset.name) == (4, "normal")


def test_which_pins_are_guarded(clock: Any, settings: Any) -> None:
    pin(clock, guard=None)  # the setting is off by default
    assert not PinGuard.objects.exists()
    services.revert_to_default(chain="chat", actor="alice", reason="back")
    settings.GUARD_PINS_BY_DEFAULT = True
    pin(clock, guard=None)
    assert PinGuard.objects.count() == 1
    services.revert_to_default(chain="chat", actor="alice", reason="back")
    # drop_vendor_b keeps vendor_a at the head: nothing for the fleet to compare.
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="alice", reason="INC-3", guard=True)
    assert PinGuard.objects.count() == 1
    assert guards.live_guard(chain="chat") is None
