"""One expiry sweep, for cron users (the Celery beat schedule runs it every 15 s)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from presets import services


class Command(BaseCommand):
    help = (
        "Revert every pin past its expiry to its chain's default (action expire, actor "
        "system:expiry), raising a pin_expired alert for each; prints how many."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        reverted = services.expire_pins()
        self.stdout.write(f"reverted {reverted} expired pin(s)")
