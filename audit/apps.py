from typing import Any

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail and alerts"

    def ready(self) -> None:
        # Wiring, not logic: every pin the expiry sweep reverts is reported as an alert, every
        # change is told to the notifiers that take changes, a planned pin suspended or
        # missed is an alert (resolved when the plan is settled), and so is a document the
        # publisher found at a target and replaced because it was not the control plane's; and
        # how every failover drill ended (its verdict).
        from presets import events

        events.pin_expired.connect(_report_expired_pin, dispatch_uid="audit.report_expired_pin")
        events.selection_changed.connect(_notify_change, dispatch_uid="audit.notify_change")
        events.plan_suspended.connect(_report_suspended_plan, dispatch_uid="audit.report_suspended_plan")
        events.plan_missed.connect(_report_missed_plan, dispatch_uid="audit.report_missed_plan")
        events.plan_settled.connect(_resolve_plan_alert, dispatch_uid="audit.resolve_plan_alert")
        events.publish_replaced.connect(_report_publish_replaced, dispatch_uid="audit.report_publish_replaced")
        events.drill_ended.connect(_report_drill_ended, dispatch_uid="audit.report_drill_ended")


def _report_expired_pin(sender: Any, *, selection: Any, now: Any, **_: Any) -> None:
    from audit.alerts import alert_pin_expired

    alert_pin_expired(selection=selection, now=now)


def _notify_change(sender: Any, *, selection: Any, raised: bool = False, **_: Any) -> None:
    # A raised epoch changes every chain's document but is no change of what a chain serves.
    if raised:
        return
    from audit.notifications import notify_change

    notify_change(selection=selection)


def _report_suspended_plan(sender: Any, *, plan: Any, selection: Any, now: Any, **_: Any) -> None:
    from audit.plan_alerts import alert_plan_suspended

    alert_plan_suspended(plan=plan, selection=selection, now=now)


def _report_missed_plan(sender: Any, *, plan: Any, now: Any, **_: Any) -> None:
    from audit.plan_alerts import alert_plan_missed

    alert_plan_missed(plan=plan, now=now)


def _resolve_plan_alert(sender: Any, *, plan: Any, now: Any, resolution: str, **_: Any) -> None:
    from audit.plan_alerts import resolve_plan_alert

    resolve_plan_alert(plan=plan, now=now, resolution=resolution)


def _report_publish_replaced(sender: Any, *, replaced: Any, **_: Any) -> None:
    from audit.publish_alerts import alert_publish_replaced

    alert_publish_replaced(replaced=replaced)


def _report_drill_ended(sender: Any, *, drill: Any, now: Any, **_: Any) -> None:
    from audit.drills import alert_drill_ended

    alert_drill_ended(drill=drill, now=now)
