"""Delivering to the notifiers: at least once per notifier, with backoff.

Two tables hold what is delivered (``Deliverable`` rows): alerts being raised (``Alert``) and
notifications of changes and of alerts' resolutions (``Notification``). Each row records, per
notifier, ``pending``, ``delivered`` or ``failed`` (after ``ALERT_DELIVERY_MAX_ATTEMPTS``) with
the attempts and the last error. The deliveries are sent by a Celery task per row
(``worker.tasks.deliver_alert``, ``worker.tasks.deliver_notification``), retried with
exponential backoff and jitter. A broker that is down when a delivery is queued leaves the row
due (``delivery_due_at``), and the next alert sweep (every 15 s) queues it again; so does a
delivery task that got lost. Nothing here can fail the change or the sweep that made the row.

Who delivers a row is decided by its lease, the row's ``delivery_due_at`` while a task has it:
queuing a task takes it (``_claim``) and hands the task its value; the task starts only if
the row still holds that value, and renews it while its attempt runs (``Renewal``). A worker
that dies stops renewing, its lease runs out within ``DELIVERY_LEASE`` and the next sweep
queues the row again: within 30 s of the death. A live worker keeps its lease however long its
attempt takes, so no second task delivers the row meanwhile; a task that finds its lease gone
(a sweep queued the row again while it waited in the queue) leaves the row to the newer one.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from audit import messages
from audit.messages import Event
from audit.models import Alert, Deliverable, DeliveryState, Notification
from audit.notifiers import NOTIFIERS, DeliveryFailed
from presets.documents import format_time

log = logging.getLogger(__name__)

# How long a delivery task owns a row's pending deliveries past its last renewal before a
# sweep assumes it was lost and queues another. The worker attempting it renews it every
# LEASE_RENEWAL, so a lease runs out only when its worker died (or could not reach the
# database for DELIVERY_LEASE - LEASE_RENEWAL): a lost delivery is queued again by the first
# sweep after DELIVERY_LEASE, 10 + 15 s after the death at most.
DELIVERY_LEASE = timedelta(seconds=10)
LEASE_RENEWAL = timedelta(seconds=3)
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
    task="worker.tasks.deliver_alert",
    related=("chain",),
    event=messages.raised,
    describe=lambda alert: f"alert {alert.kind} on {alert.chain.name} v{alert.version}",
)
NOTIFICATIONS = Outbox(
    model=Notification,
    task="worker.tasks.deliver_notification",
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


@dataclass(frozen=True)
class Retry:
    """A row's pending deliveries are tried again in ``seconds`` by the task that holds
    ``lease`` (the row's ``delivery_due_at``, which the failed attempt moved past the backoff)."""

    seconds: float
    lease: datetime


def deliver_alert(*, alert_id: int, now: datetime | None = None, lease: datetime | None = None) -> float | None:
    """Deliver one alert's raising to its pending notifiers (``deliver``)."""
    return deliver(ALERTS, pk=alert_id, now=now, lease=lease)


def deliver_notification(
    *, notification_id: int, now: datetime | None = None, lease: datetime | None = None
) -> float | None:
    """Deliver one change or resolution to its pending notifiers (``deliver``)."""
    return deliver(NOTIFICATIONS, pk=notification_id, now=now, lease=lease)


def deliver(outbox: Outbox, *, pk: int, now: datetime | None = None, lease: datetime | None = None) -> float | None:
    """``attempt``, returning only the seconds to wait before the next attempt, or None."""
    retry = attempt(outbox, pk=pk, now=now, lease=lease)
    return None if retry is None else retry.seconds


def attempt(outbox: Outbox, *, pk: int, now: datetime | None = None, lease: datetime | None = None) -> Retry | None:
    """Try each pending notifier of one row once and record every outcome on the row.

    ``lease`` is the one the row was queued with (``queue``): when the row no longer holds it
    (another task took the row over, or it was delivered), nothing is tried. Without one the
    caller says it holds the row (a direct call, or a task queued before tasks carried
    leases), and the row is taken as it is. The lease is renewed while the notifiers are
    tried (``Renewal``).

    Returns when to try again while a delivery is still pending (and moves the row's lease
    past it, for the retry to take), or None when nothing is left to do here. A notifier that
    keeps failing is recorded as failed after ``ALERT_DELIVERY_MAX_ATTEMPTS``."""
    started = now or timezone.now()
    held = take_lease(outbox, pk=pk, lease=lease, now=started)
    if held is None:
        return None
    row = outbox.model.objects.select_related(*outbox.related).filter(pk=pk).first()
    if row is None:
        return None
    event = outbox.event(row)
    outcomes: dict[str, str | None] = {}
    with Renewal(outbox, pk=pk, lease=held) as renewal:
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
    now = now or timezone.now()
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
        retry = None
        fields = ["deliveries"]
        if not pending:
            locked.delivery_due_at = None
            fields.append("delivery_due_at")
        elif locked.delivery_due_at == renewal.lease:
            seconds = backoff_seconds(attempts=max(locked.deliveries[n]["attempts"] for n in pending))
            locked.delivery_due_at = now + timedelta(seconds=seconds) + DELIVERY_LEASE
            fields.append("delivery_due_at")
            retry = Retry(seconds=seconds, lease=locked.delivery_due_at)
        # else another task took the row over while this one tried: its lease is left to it.
        locked.save(update_fields=fields)
    return retry


def take_lease(outbox: Outbox, *, pk: int, lease: datetime | None, now: datetime) -> datetime | None:
    """Start an attempt at a row: move its lease to ``now`` + ``DELIVERY_LEASE`` if it still
    holds ``lease`` (any lease when None). Returns the new lease, or None when the row is
    gone, delivered or held by another task."""
    renewed = now + DELIVERY_LEASE
    rows = outbox.model.objects.filter(pk=pk)
    if lease is not None:
        rows = rows.filter(delivery_due_at=lease)
    if rows.update(delivery_due_at=renewed):
        return renewed
    if lease is None:
        log.warning("%s %s to deliver does not exist", outbox.model._meta.model_name, pk)
    else:
        log.info(
            "%s %s: its deliveries are done or another task holds them; this one stops",
            outbox.model._meta.model_name,
            pk,
        )
    return None


def renew_lease(outbox: Outbox, *, pk: int, lease: datetime, now: datetime) -> datetime | None:
    """Move a lease held by an attempt in progress ``DELIVERY_LEASE`` past ``now``. Returns the
    new lease, or None when the row no longer holds ``lease``."""
    renewed = now + DELIVERY_LEASE
    if outbox.model.objects.filter(pk=pk, delivery_due_at=lease).update(delivery_due_at=renewed):
        return renewed
    return None


class Renewal:
    """Keeps a row's lease while its notifiers are tried: a thread renews it every
    ``LEASE_RENEWAL`` (``renew_lease``) until the attempt ends. ``lease`` is the latest held.

    Not inside a transaction (a caller's, or a test's): there the lease just taken is seen by
    no one else until it commits, and the thread's renewal would wait for that row lock while
    the attempt waits for the thread."""

    def __init__(self, outbox: Outbox, *, pk: int, lease: datetime) -> None:
        self.outbox, self.pk, self.lease = outbox, pk, lease
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> Renewal:
        if not transaction.get_connection().in_atomic_block:
            name = f"lease-{self.outbox.model._meta.model_name}-{self.pk}"
            self.thread = threading.Thread(target=self._run, name=name, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def _run(self) -> None:
        what = f"{self.outbox.model._meta.model_name} {self.pk}"
        try:
            while not self.stopped.wait(LEASE_RENEWAL.total_seconds()):
                try:
                    renewed = renew_lease(self.outbox, pk=self.pk, lease=self.lease, now=timezone.now())
                except DatabaseError as exc:
                    # Tried again at the next renewal: the lease outlasts two missed ones.
                    log.warning("could not renew the delivery lease of %s (%s)", what, exc.__class__.__name__)
                    connections.close_all()
                    continue
                if renewed is None:
                    log.warning("the delivery lease of %s ran out and another task took it over", what)
                    return
                self.lease = renewed
        finally:
            connections.close_all()  # this thread's own connections


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
    lease = _claim(outbox, pk, now)
    return lease is not None and _publish(outbox, pk, lease, now)


def _claim_due(now: datetime) -> Iterator[tuple[Outbox, int, datetime]]:
    """The due rows of every outbox, the longest due first (``SWEEP_BATCH`` a table), each
    claimed as it is reached: its lease taken, or skipped when another process holds it."""
    for outbox in OUTBOXES:
        due = outbox.model.objects.filter(delivery_due_at__lte=now).order_by("delivery_due_at")
        for pk in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
            lease = _claim(outbox, pk, now)
            if lease is not None:
                yield outbox, pk, lease


def queue_due_deliveries(*, now: datetime | None = None) -> int:
    """Queue the deliveries that are due, alerts' and notifications': never queued (the broker
    was down) or whose task was lost. Returns how many were queued; stops at the first broker
    failure."""
    now = now or timezone.now()
    queued = 0
    for outbox, pk, lease in _claim_due(now):
        if not _publish(outbox, pk, lease, now):
            return queued  # the broker is down: the rest stay due as they are
        queued += 1
    return queued


def deliver_due_alerts(*, now: datetime | None = None) -> int:
    """Deliver the due alerts and notifications in this process, one attempt each (for cron
    setups without a worker). Returns how many rows were attempted."""
    now = now or timezone.now()
    attempted = 0
    for outbox, pk, lease in _claim_due(now):
        deliver(outbox, pk=pk, now=now, lease=lease)
        attempted += 1
    return attempted


def lease_of(raw: str | None) -> datetime | None:
    """A lease as a task carries it (``_publish``: ISO 8601), or None."""
    return None if raw is None else datetime.fromisoformat(raw)


def _claim(outbox: Outbox, pk: int, now: datetime) -> datetime | None:
    # A conditional update: of two sweeps (or a sweep and a commit hook) only one takes it.
    lease = now + DELIVERY_LEASE
    return lease if outbox.model.objects.filter(pk=pk, delivery_due_at__lte=now).update(delivery_due_at=lease) else None


def _publish(outbox: Outbox, pk: int, lease: datetime, now: datetime) -> bool:
    try:
        current_app.tasks[outbox.task].apply_async(
            (pk,), {"lease": lease.isoformat()}, retry=True, retry_policy=PUBLISH_RETRY_POLICY
        )
    except Exception as exc:  # whatever the broker raises, the caller (a sweep, a commit) goes on
        log.warning(
            "could not queue delivery of %s %s (%s: %s); it stays due and the next sweep queues it",
            outbox.model._meta.model_name,
            pk,
            exc.__class__.__name__,
            exc,
        )
        outbox.model.objects.filter(pk=pk, delivery_due_at=lease).update(delivery_due_at=now)
        return False
    return True
