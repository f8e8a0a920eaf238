"""One provider-health prune, for cron users (the Celery beat schedule runs it every 10 min)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from audit import provider_health


class Command(BaseCommand):
    help = (
        "Forget provider health (the SDK's per-minute reports) older than "
        "PROVIDER_HEALTH_RETENTION_HOURS (48 by default); prints how many minute buckets went."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = provider_health.prune()
        self.stdout.write(f"pruned {deleted} provider-health minute bucket(s)")
