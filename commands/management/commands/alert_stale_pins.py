"""One stale-pin sweep, for cron users (the Celery beat schedule runs it every 60 s)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from audit import alerts, delivery


class Command(BaseCommand):
    help = (
        "Raise a stale_pin alert for each pin live longer than PIN_ALERT_AFTER_MINUTES "
        "(once per pin), resolve those whose pin ended, then deliver due alerts and change "
        "notifications (webhook, Slack, PagerDuty, email) from this process, one attempt each; "
        "prints the counts."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        sweep = alerts.sweep_stale_pins()
        # Cron setups may run no worker, so due deliveries are attempted here rather than
        # queued; with a worker running too, each alert is claimed by one of them.
        attempted = delivery.deliver_due_alerts()
        self.stdout.write(
            f"raised {sweep.raised} stale-pin alert(s), resolved {sweep.resolved}, attempted delivery of {attempted}"
        )
