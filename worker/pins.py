"""Celery tasks of the chains (beat's pin expiry); thin: each calls a service and returns."""

from __future__ import annotations

from celery import shared_task

from presets import services


@shared_task(name="presets.tasks.expire_pins")
def expire_pins() -> int:
    """Revert every pin past its expiry (beat: every EXPIRE_PINS_EVERY_SECONDS, 15 s)."""
    return services.expire_pins()
