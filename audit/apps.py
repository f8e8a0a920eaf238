from typing import Any

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail and alerts"

    def ready(self) -> None:
        # Wiring, not logic: every pin the expiry sweep reverts is reported as an alert, and
        # every change is told to the notifiers that take changes.
        from presets import events

        events.pin_expired.connect(_report_expired_pin, dispatch_uid="audit.report_expired_pin")
        events.selection_changed.connect(_notify_change, dispatch_uid="audit.notify_change")


def _report_expired_pin(sender: Any, *, selection: Any, now: Any, **_: Any) -> None:
    from audit.alerts import alert_pin_expired

    alert_pin_expired(selection=selection, now=now)


def _notify_change(sender: Any, *, selection: Any, raised: bool = False, **_: Any) -> None:
    # A raised epoch changes every chain's document but is no change of what a chain serves.
    if raised:
        return
    from audit.notifications import notify_change

    notify_change(selection=selection)
