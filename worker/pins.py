"""Celery tasks of the chains (beat's pin expiry and planned pins); thin: each calls a service and returns."""

from __future__ import annotations

from presets import plans, services
from worker.names import task


@task(formerly="presets.tasks.expire_pins")
def expire_pins() -> int:
    """Revert every pin past its expiry (beat: every EXPIRE_PINS_EVERY_SECONDS, 15 s)."""
    return services.expire_pins()


@task(formerly="presets.tasks.run_plans")
def run_plans() -> dict[str, list[int]]:
    """Start, suspend, end or miss the planned pins whose time has come (beat: every
    RUN_PLANS_EVERY_SECONDS, 5 s)."""
    sweep = plans.run_plans()
    return {"started": sweep.started, "suspended": sweep.suspended, "ended": sweep.ended, "missed": sweep.missed}
