"""Delivering to the notifiers: at least once per notifier, with backoff.

Two tables hold what is delivered (``Deliverable`` rows): alerts being raised (``Alert``) and
notifications of changes and of alerts' resolutions (``Notification``). Each row records, per
notifier, ``pending``, ``delivered`` or ``failed`` (after ``ALERT_DELIVERY_MAX_ATTEMPTS``) with
the attempts and the last error. The deliveries are sent by a Celery task per row
(``audit.tasks.deliver_alert``, ``audit.tasks.deliver_notification``), retried with
exponential backoff and jitter. A broker that is down when a delivery is queued leaves the row
due (``delivery_due_at``), and the next alert sweep (every 15 s) queues it again; so does a
delivery task that got lost. Nothing here can fail the change or the sweep that made the row.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import messages
from audit.messages import Event
from audit.models import Alert, Deliverable, DeliveryState, Notification
from audit.notifiers import NOTIFIERS, DeliveryFailed
from presets.documents import format_time

log = logging.getLogger(__name__)

# How long a queued delivery task owns a row's pending deliveries before a sweep assumes it
# was lost and queues another (a worker that is merely slow may then deliver twice).
DELIVERY_LEASE = timedelta(minutes=5)
BACKOFF_CAP_SECONDS = 900
SWEEP_BATCH = 100
# Publishing to the broker retries briefly, then gives up: the row stays due for the next
# sweep instead of holding a sweep (or the web request that made a change).
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
LAST_ERROR_MAX = 500


@dataclass(frozen=True)
class Outbox:
    """A table of things to deliver: how to read a row, the event it tells, the task that
    delivers it (looked up by name: the task module, an interface, calls into this one)."""

    model: type[Alert] | type[Notification]
    task: str
    related: tuple[str, ...]
    event: Callable[[Any], Event]
    describe: Callable[[Any], str]


ALERTS = Outbox(
    model=Alert,
    task="audit.tasks.deliver_alert",
    related=("chain",),
    event=messages.raised,
    describe=lambda alert: f"alert {alert.kind} on {alert.chain.name} v{alert.version}",
)
NOTIFICATIONS = Outbox(
    model=Notification,
    task="audit.tasks.deliver_notification",
    related=("chain", "alert", "alert__chain"),
    event=messages.of_notification,
    describe=lambda notification: (
        f"{notification.kind} notification on {notification.chain.name} v{notification.version}"
    ),
)
OUTBOXES = (ALERTS, NOTIFICATIONS)
DELIVER_TASK = ALERTS.task


def backoff_seconds(*, attempts: int) -> float:
    """How long to wait after the ``attempts``-th failed attempt: exponential, capped, with
    jitter (half to all of the step) so that many deliveries failing together spread out."""
    step = min(BACKOFF_CAP_SECONDS, settings.ALERT_DELIVERY_BACKOFF_SECONDS * 2 ** max(0, attempts - 1))
    return step * random.uniform(0.5, 1.0)


def deliver_alert(*, alert_id: int, now: datetime | None = None) -> float | None:
    """Deliver one alert's raising to its pending notifiers (``deliver``)."""
    return deliver(ALERTS, pk=alert_id, now=now)


def deliver_notification(*, notification_id: int, now: datetime | None = None) -> float | None:
    """Deliver one change or resolution to its pending notifiers (``deliver``)."""
    return deliver(NOTIFICATIONS, pk=notification_id, now=now)


def deliver(outbox: Outbox, *, pk: int, now: datetime | None = None) -> float | None:
    """Try each pending notifier of one row once and record every outcome on the row.

    Returns the seconds to wait before the next attempt while a delivery is still pending
    (and moves the row's lease past it), or None when nothing is left to do. A notifier that
    keeps failing is recorded as failed after ``ALERT_DELIVERY_MAX_ATTEMPTS``."""
    now = now or timezone.now()
    row = outbox.model.objects.select_related(*outbox.related).filter(pk=pk).first()
    if row is None:
        log.warning("%s %s to deliver does not exist", outbox.model._meta.model_name, pk)
        return None
    event = outbox.event(row)
    outcomes: dict[str, str | None] = {}
    for name in row.pending_deliveries():
        notifier = NOTIFIERS.get(name)
        try:
            if notifier is None:
                raise DeliveryFailed(f"no notifier named {name!r}")
            notifier.send(event)
        except DeliveryFailed as exc:
            outcomes[name] = str(exc)
        except Exception as exc:  # a notifier's bug must not cost the others or the row
            log.exception("notifier %s failed on %s", name, outbox.describe(row))
            outcomes[name] = f"{exc.__class__.__name__}: {exc}"
        else:
            outcomes[name] = None
    with transaction.atomic():
        locked: Deliverable = outbox.model.objects.select_for_update().get(pk=pk)
        for name, error in outcomes.items():
            record = locked.deliveries[name]
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
                f"%s: %s {what}: %s",
                *(outbox.describe(row), name, record["attempts"], error),
            )
        pending = locked.pending_deliveries()
        retry_in = None
        if pending:
            retry_in = backoff_seconds(attempts=max(locked.deliveries[n]["attempts"] for n in pending))
            locked.delivery_due_at = now + timedelta(seconds=retry_in) + DELIVERY_LEASE
        else:
            locked.delivery_due_at = None
        locked.save(update_fields=["deliveries", "delivery_due_at"])
    return retry_in


def next_retry_at(row: Deliverable) -> datetime | None:
    """When a worker tries ``row``'s pending deliveries again after a failed attempt (the
    failure moved its lease past the backoff: the retry runs where the lease starts), or None."""
    if row.delivery_due_at is None:
        return None
    return row.delivery_due_at - DELIVERY_LEASE


def first_attempt_overdue(row: Deliverable, *, now: datetime) -> bool:
    """Whether a delivery never tried is late: a worker tries a new row within seconds, and a
    sweep queues it again once its lease has run out."""
    return row.created_at < now - DELIVERY_LEASE


def queue_delivery(*, alert_id: int, now: datetime | None = None) -> bool:
    """Hand an alert's due deliveries to a worker (``queue``)."""
    return queue(ALERTS, pk=alert_id, now=now)


def queue_notification(*, notification_id: int, now: datetime | None = None) -> bool:
    """Hand a notification's due deliveries to a worker (``queue``)."""
    return queue(NOTIFICATIONS, pk=notification_id, now=now)


def queue(outbox: Outbox, *, pk: int, now: datetime | None = None) -> bool:
    """Hand a row's due deliveries to a worker. False when none is due, another task holds
    them, or the broker refused (the row then stays due for the next sweep)."""
    now = now or timezone.now()
    return _claim(outbox, pk, now) and _publish(outbox, pk, now)


def queue_due_deliveries(*, now: datetime | None = None) -> int:
    """Queue the deliveries that are due, alerts' and notifications': never queued (the broker
    was down) or whose task was lost. Returns how many were queued; stops at the first broker
    failure."""
    now = now or timezone.now()
    queued = 0
    for outbox in OUTBOXES:
        due = outbox.model.objects.filter(delivery_due_at__lte=now).order_by("delivery_due_at")
        for pk in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
            if not _claim(outbox, pk, now):
                continue
            if not _publish(outbox, pk, now):
                return queued  # the broker is down: the rest stay due as they are
            queued += 1
    return queued


def deliver_due_alerts(*, now: datetime | None = None) -> int:
    """Deliver the due alerts and notifications in this process, one attempt each (for cron
    setups without a worker). Returns how many rows were attempted."""
    now = now or timezone.now()
    attempted = 0
    for outbox in OUTBOXES:
        due = outbox.model.objects.filter(delivery_due_at__lte=now).order_by("delivery_due_at")
        for pk in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
            if _claim(outbox, pk, now):
                deliver(outbox, pk=pk, now=now)
                attempted += 1
    return attempted


def _claim(outbox: Outbox, pk: int, now: datetime) -> bool:
    # A conditional update: of two sweeps (or a sweep and a commit hook) only one takes it.
    return bool(
        outbox.model.objects.filter(pk=pk, delivery_due_at__lte=now).update(delivery_due_at=now + DELIVERY_LEASE)
    )


def _publish(outbox: Outbox, pk: int, now: datetime) -> bool:
    try:
        current_app.tasks[outbox.task].apply_async((pk,), retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception as exc:  # whatever the broker raises, the caller (a sweep, a commit) goes on
        log.warning(
            "could not queue delivery of %s %s (%s: %s); it stays due and the next sweep queues it",
            outbox.model._meta.model_name,
            pk,
            exc.__class__.__name__,
            exc,
        )
        outbox.model.objects.filter(pk=pk, delivery_due_at=now + DELIVERY_LEASE).update(delivery_due_at=now)
        return False
    return True
