from typing import Any

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail and alerts"

    def ready(self) -> None:
        # Wiring, not logic: every pin the expiry sweep reverts is reported as an alert.
        from presets import events

        events.pin_expired.connect(_report_expired_pin, dispatch_uid="audit.report_expired_pin")


def _report_expired_pin(sender: Any, *, selection: Any, now: Any, **_: Any) -> None:
    from audit.alerts import alert_pin_expired

    alert_pin_expired(selection=selection, now=now)
