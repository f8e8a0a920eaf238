"""Celery tasks of the alerts, provider health, deliveries and Slack messages; thin: each calls the
audit services and returns."""

from __future__ import annotations

from typing import Any

from audit import alerts, delivery, drills, guards, provider_alerts, provider_health, slack, spend_alerts
from worker.names import task


@task(formerly="audit.tasks.alert_stale_pins")
def alert_stale_pins() -> int:
    """Raise and resolve stale-pin alerts, then queue deliveries that are due (beat: every
    ALERT_STALE_PINS_EVERY_SECONDS, 60 s). Returns how many alerts it raised."""
    sweep = alerts.sweep_stale_pins()
    delivery.queue_due_deliveries()
    return sweep.raised


@task(formerly="audit.tasks.alert_providers")
def alert_providers() -> int:
    """Raise and resolve provider_failing and provider_credentials alerts (usage reports also
    run that sweep) and spend alerts (only here: they weigh a day of spend, and a window of
    SPEND_ALERT_MINUTES needs no answer within seconds), then queue deliveries that are due
    (beat: every PROVIDER_ALERTS_EVERY_SECONDS, 15 s). Returns how many alerts it raised."""
    sweep = provider_alerts.sweep()
    spent = spend_alerts.sweep()
    delivery.queue_due_deliveries()
    return sweep.raised + spent.raised


@task(formerly="audit.tasks.check_guards")
def check_guards() -> dict[str, list[int]]:
    """Weigh the guarded pins' evidence and restore where a pin made things worse, then queue
    deliveries that are due (beat: every GUARD_EVERY_SECONDS, 15 s)."""
    sweep = guards.check_guards()
    if sweep.acted:
        delivery.queue_due_deliveries()
    return {"acted": sweep.acted, "passed": sweep.passed, "ended": sweep.ended}


@task(formerly="audit.tasks.prune_provider_health")
def prune_provider_health() -> int:
    """Forget provider health older than PROVIDER_HEALTH_RETENTION_HOURS (beat: every
    PRUNE_PROVIDER_HEALTH_EVERY_SECONDS, 600 s). Returns how many minute buckets went."""
    return provider_health.prune()


# Attempts are counted on the alert, not by Celery, so they survive a re-queue by a sweep;
# the service bounds them (ALERT_DELIVERY_MAX_ATTEMPTS) and computes the backoff. ``lease`` is
# the row's lease this task was queued with (audit/delivery.py): the retry carries the next.
@task(formerly="audit.tasks.deliver_alert", bind=True, max_retries=None)
def deliver_alert(self: Any, alert_id: int, lease: str | None = None) -> None:
    """Deliver one alert to its pending notifiers; retry with backoff while any is pending."""
    retry = delivery.attempt(delivery.ALERTS, pk=alert_id, lease=delivery.lease_of(lease))
    if retry is not None:
        raise self.retry(countdown=retry.seconds, kwargs={"lease": retry.lease.isoformat()})


@task(formerly="audit.tasks.deliver_notification", bind=True, max_retries=None)
def deliver_notification(self: Any, notification_id: int, lease: str | None = None) -> None:
    """Deliver one change or resolution to its pending notifiers; retry with backoff while any
    is pending."""
    retry = delivery.attempt(delivery.NOTIFICATIONS, pk=notification_id, lease=delivery.lease_of(lease))
    if retry is not None:
        raise self.retry(countdown=retry.seconds, kwargs={"lease": retry.lease.isoformat()})


@task(formerly="audit.tasks.follow_slack_convergence")
def follow_slack_convergence(**body: Any) -> None:
    """Update a Slack message with the fleet's progress on a change made from Slack; again
    in a moment until every instance has it or the time to follow is up."""
    again = slack.follow(slack.followed_from(body))
    if again is not None:
        follow_slack_convergence.apply_async((), body, countdown=again)


@task(formerly="audit.tasks.run_drills")
def run_drills() -> dict[str, list[int]]:
    """Start the planned failover drills whose time has come (or record why they wait), end
    the ones whose window closed and judge them, then queue deliveries that are due (beat:
    every RUN_DRILLS_EVERY_SECONDS, 5 s)."""
    sweep = drills.run_drills()
    delivery.queue_due_deliveries()
    return {"started": sweep.started, "waiting": sweep.waiting, "ended": sweep.ended, "missed": sweep.missed}
