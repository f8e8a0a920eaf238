"""Delivering alerts to the notifiers: at least once per notifier, with backoff.

Each alert records, per notifier, ``pending``, ``delivered`` or ``failed`` (after
``ALERT_DELIVERY_MAX_ATTEMPTS``) with the attempts and the last error. The webhook and email
are sent by the ``audit.tasks.deliver_alert`` task, retried with exponential backoff and
jitter. A broker that is down when a delivery is queued leaves the alert due
(``delivery_due_at``), and the next stale-pin sweep queues it again; so does a delivery task
that got lost.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import Alert, DeliveryState
from audit.notifiers import NOTIFIERS, DeliveryFailed
from presets.documents import format_time

log = logging.getLogger(__name__)

DELIVER_TASK = "audit.tasks.deliver_alert"
# How long a queued delivery task owns an alert's pending deliveries before a sweep assumes
# it was lost and queues another (a worker that is merely slow may then deliver twice).
DELIVERY_LEASE = timedelta(minutes=5)
BACKOFF_CAP_SECONDS = 900
SWEEP_BATCH = 100
# Publishing to the broker retries briefly, then gives up: the alert stays due for the next
# sweep instead of holding a sweep (or a web request that reverted an expired pin).
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
LAST_ERROR_MAX = 500


def backoff_seconds(*, attempts: int) -> float:
    """How long to wait after the ``attempts``-th failed attempt: exponential, capped, with
    jitter (half to all of the step) so that many alerts failing together spread out."""
    step = min(BACKOFF_CAP_SECONDS, settings.ALERT_DELIVERY_BACKOFF_SECONDS * 2 ** max(0, attempts - 1))
    return step * random.uniform(0.5, 1.0)


def deliver_alert(*, alert_id: int, now: datetime | None = None) -> float | None:
    """Try each pending notifier of one alert once and record every outcome on the alert.

    Returns the seconds to wait before the next attempt while a delivery is still pending
    (and moves the alert's lease past it), or None when nothing is left to do. A notifier
    that keeps failing is recorded as failed after ``ALERT_DELIVERY_MAX_ATTEMPTS``."""
    now = now or timezone.now()
    alert = Alert.objects.select_related("chain").filter(pk=alert_id).first()
    if alert is None:
        log.warning("alert %s to deliver does not exist", alert_id)
        return None
    outcomes: dict[str, str | None] = {}
    for name in alert.pending_deliveries():
        notifier = NOTIFIERS.get(name)
        try:
            if notifier is None:
                raise DeliveryFailed(f"no notifier named {name!r}")
            notifier.send(alert)
        except DeliveryFailed as exc:
            outcomes[name] = str(exc)
        except Exception as exc:  # a notifier's bug must not cost the others or the alert
            log.exception("notifier %s failed on alert %s", name, alert_id)
            outcomes[name] = f"{exc.__class__.__name__}: {exc}"
        else:
            outcomes[name] = None
    with transaction.atomic():
        alert = Alert.objects.select_for_update().get(pk=alert_id)
        for name, error in outcomes.items():
            record = alert.deliveries[name]
            if record["state"] != DeliveryState.PENDING:
                continue  # another delivery task recorded this notifier meanwhile
            record["attempts"] += 1
            if error is None:
                record.update(state=DeliveryState.DELIVERED, last_error="", delivered_at=format_time(now))
                continue
            record["last_error"] = error[:LAST_ERROR_MAX]
            given_up = record["attempts"] >= settings.ALERT_DELIVERY_MAX_ATTEMPTS
            if given_up:
                record["state"] = DeliveryState.FAILED
            what = "delivery failed for good after %d attempts" if given_up else "delivery attempt %d failed"
            log.log(
                logging.ERROR if given_up else logging.WARNING,
                f"alert %s on %s v%d: %s {what}: %s",
                *(alert.kind, alert.chain.name, alert.version, name, record["attempts"], error),
            )
        pending = alert.pending_deliveries()
        retry_in = None
        if pending:
            retry_in = backoff_seconds(attempts=max(alert.deliveries[n]["attempts"] for n in pending))
            alert.delivery_due_at = now + timedelta(seconds=retry_in) + DELIVERY_LEASE
        else:
            alert.delivery_due_at = None
        alert.save(update_fields=["deliveries", "delivery_due_at"])
    return retry_in


def next_retry_at(alert: Alert) -> datetime | None:
    """When a worker tries ``alert``'s pending deliveries again after a failed attempt (the
    failure moved its lease past the backoff: the retry runs where the lease starts), or None."""
    if alert.delivery_due_at is None:
        return None
    return alert.delivery_due_at - DELIVERY_LEASE


def first_attempt_overdue(alert: Alert, *, now: datetime) -> bool:
    """Whether a delivery never tried is late: a worker tries a new alert within seconds, and
    a sweep queues it again once its lease has run out."""
    return alert.created_at < now - DELIVERY_LEASE


def queue_delivery(*, alert_id: int, now: datetime | None = None) -> bool:
    """Hand an alert's due deliveries to a worker. False when none is due, another task
    holds them, or the broker refused (the alert then stays due for the next sweep)."""
    now = now or timezone.now()
    return _claim(alert_id, now) and _publish(alert_id, now)


def queue_due_deliveries(*, now: datetime | None = None) -> int:
    """Queue the deliveries that are due: never queued (the broker was down) or whose task
    was lost. Returns how many were queued; stops at the first broker failure."""
    now = now or timezone.now()
    due = Alert.objects.filter(delivery_due_at__lte=now).order_by("delivery_due_at")
    queued = 0
    for alert_id in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
        if not _claim(alert_id, now):
            continue
        if not _publish(alert_id, now):
            break  # the broker is down: the rest stay due as they are
        queued += 1
    return queued


def deliver_due_alerts(*, now: datetime | None = None) -> int:
    """Deliver the due alerts in this process, one attempt each (for cron setups without a
    worker). Returns how many alerts were attempted."""
    now = now or timezone.now()
    due = Alert.objects.filter(delivery_due_at__lte=now).order_by("delivery_due_at")
    attempted = 0
    for alert_id in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
        if _claim(alert_id, now):
            deliver_alert(alert_id=alert_id, now=now)
            attempted += 1
    return attempted


def _claim(alert_id: int, now: datetime) -> bool:
    # A conditional update: of two sweeps (or a sweep and a commit hook) only one takes it.
    return bool(
        Alert.objects.filter(pk=alert_id, delivery_due_at__lte=now).update(delivery_due_at=now + DELIVERY_LEASE)
    )


def _publish(alert_id: int, now: datetime) -> bool:
    try:
        # Looked up by name: the task module (an interface) calls into this one, not back.
        current_app.tasks[DELIVER_TASK].apply_async((alert_id,), retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception as exc:  # whatever the broker raises, the caller (a sweep) goes on
        log.warning(
            "could not queue delivery of alert %s (%s: %s); it stays due and the next sweep queues it",
            alert_id,
            exc.__class__.__name__,
            exc,
        )
        Alert.objects.filter(pk=alert_id, delivery_due_at=now + DELIVERY_LEASE).update(delivery_due_at=now)
        return False
    return True
