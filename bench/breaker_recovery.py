"""How soon a Router is back on a recovered primary, and what it sends a primary that is down.

A simulation on a fake clock (no sockets, no sleeps: the figures are exact, not timings):
a two-step chain whose primary fails every request from t=0 for ``down_s`` seconds, then
answers; requests arrive every ``gap_s`` seconds until 60 s after the recovery. For each
breaker setting, over outages of 20 to 180 s (every second, so the recovery falls at every
phase of the breaker's schedule), it prints the time from the recovery to the first
request the primary served again (p50 and max), the requests the primary got while down
per minute of the outage after its breaker opened (max), and the requests that failed for
the caller (none may).

    .venv/bin/python bench/breaker_recovery.py
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

from chainclient import BreakerSettings, ProviderError, Router, RoutingError, Step
from chainclient.testing import FakeClock

CHAIN = [Step("primary", "m", 10_000), Step("backup", "m", 10_000)]
SETTINGS = {
    "before (cooldown 30 s, a failed probe waits a cooldown)": BreakerSettings(cooldown_s=30, probe_interval_s=30),
    "cooldown 30 s, probe interval 5 s": BreakerSettings(cooldown_s=30, probe_interval_s=5),
    "cooldown 10 s, probe interval 10 s": BreakerSettings(cooldown_s=10, probe_interval_s=10),
    "defaults: cooldown 10 s, probe interval 5 s": BreakerSettings(),
    "cooldown 5 s, probe interval 2 s": BreakerSettings(cooldown_s=5, probe_interval_s=2),
}


def run(settings: BreakerSettings, down_s: float, gap_s: float) -> tuple[float, float, int]:
    """(seconds from recovery to the primary serving again, primary requests per minute
    while its breaker was open, requests failed for the caller)."""
    clock = FakeClock(0.0)
    primary_calls: list[float] = []

    def primary(step: Step, request: Any, timeout_s: float) -> str:
        primary_calls.append(clock.now())
        if clock.now() < down_s:
            raise ProviderError(503, True, "down")
        return "primary"

    router = Router(
        CHAIN,
        transports={"primary": primary, "backup": lambda *_: "backup"},
        breaker=settings,
        clock=clock,
    )
    back_at, failed = None, 0
    while clock.now() < down_s + 60:
        try:
            served = router.complete("hello").provider
        except RoutingError:
            failed += 1
            served = ""
        if served == "primary" and back_at is None:
            back_at = clock.now()
        clock.advance(gap_s)
    opened_at = primary_calls[settings.failure_threshold - 1] if len(primary_calls) >= settings.failure_threshold else 0
    probes = [at for at in primary_calls if opened_at < at < down_s]
    per_minute = len(probes) / ((down_s - opened_at) / 60) if down_s > opened_at else 0.0
    return (back_at - down_s) if back_at is not None else float("inf"), per_minute, failed


def main() -> None:
    logging.getLogger("chainclient").setLevel(logging.ERROR)  # a breaker line per opening, thousands
    for gap_s in (1.0, 0.1):
        print(f"\n== one request every {gap_s:g} s; outages of 20..180 s")
        print(f"{'breaker':<58} {'back p50 s':>10} {'back max s':>10} {'probes/min max':>15} {'failed':>7}")
        for name, settings in SETTINGS.items():
            backs, rates, failures = [], [], 0
            for down_s in range(20, 181):
                back, rate, failed = run(settings, float(down_s), gap_s)
                backs.append(back)
                rates.append(rate)
                failures += failed
            print(f"{name:<58} {statistics.median(backs):>10.1f} {max(backs):>10.1f} {max(rates):>15.1f} {failures:>7}")


if __name__ == "__main__":
    main()
