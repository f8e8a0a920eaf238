"""Notifications of changes and of alerts' resolutions (docs/notifications.md):
recorded inside the transaction that made the change or resolved the alert, handed to a
worker when it commits (``audit.delivery``), and read by the alerts page and
GET /api/v1/notifications.

A notification is recorded only when some notifier takes it (``notifiers.planned_deliveries``),
and recording it can never cost the change: it is written in a savepoint, and a failure is
logged and dropped. Queuing happens after the commit, where a broker that is down leaves the
notification due for the next sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, TypedDict

from django.db import transaction
from django.utils import timezone

from audit import delivery
from audit.messages import ALERT_RESOLVED, CHANGE
from audit.models import Alert, Deliverable, Notification, NotificationKind
from audit.notifiers import planned_deliveries
from presets import environments, services
from presets.documents import Help, Time, format_time
from presets.history import HistoryEntry, entry
from presets.models import Chain, Selection

log = logging.getLogger(__name__)


# What the API says of an error kept from its reader (docs/notifications.md, "The webhook
# rules").
LAST_ERROR_HELP = (
    "why the last attempt failed (the status or the network failure, never what the target answered); "
    "empty once delivered; null unless the reader is a signed-in on-call engineer or staff "
    "(service tokens and viewers see the state and attempts only)"
)


class DeliveryDocument(TypedDict):
    """One notifier's delivery of a notification."""

    state: Annotated[str, Help("pending (tried again with backoff), delivered, or failed (given up)")]
    attempts: int
    last_error: Annotated[str | None, Help(LAST_ERROR_HELP)]
    delivered_at: Time | None


class NotificationEntry(TypedDict):
    """A change or an alert's resolution, and its delivery to each notifier."""

    id: Annotated[str, Help("the event id receivers see (X-Controlplane-Event-Id), the same on every retry")]
    type: Annotated[str, Help("change, or alert.resolved")]
    chain: str
    version: Annotated[int, Help("the change's version; alert.resolved: the alert's")]
    created_at: Time
    change: Annotated[HistoryEntry | None, Help("the change, as its history entry; null for alert.resolved")]
    alert_id: Annotated[int | None, Help("alert.resolved: the alert (GET /api/v1/alerts); null for a change")]
    deliveries: Annotated[
        dict[str, DeliveryDocument], Help("per notifier (webhook, slack, pagerduty, email) that takes it")
    ]


# --- recording ----------------------------------------------------------------------------------


def notify_change(*, selection: Selection) -> Notification | None:
    """Record the change ``selection`` was just saved with, for the notifiers that take
    changes; called inside the change's transaction (the ``selection_changed`` receiver)."""
    deliveries = planned_deliveries(CHANGE)
    if not deliveries:
        return None
    return _record(
        kind=NotificationKind.CHANGE,
        chain=selection.chain,
        version=selection.version,
        details=dict(entry(selection)),
        deliveries=deliveries,
        now=selection.updated_at,
    )


def notify_resolved(*, alert: Alert, now: datetime) -> Notification | None:
    """Record that ``alert`` was resolved, for the notifiers that take alerts; called inside
    the transaction that resolved it."""
    deliveries = planned_deliveries(ALERT_RESOLVED, alert_kind=alert.kind)
    if not deliveries:
        return None
    return _record(
        kind=NotificationKind.ALERT_RESOLVED,
        chain=alert.chain,
        version=alert.version,
        details={},
        deliveries=deliveries,
        now=now,
        alert=alert,
    )


def _record(
    *,
    kind: str,
    chain: Chain,
    version: int,
    details: dict[str, Any],
    deliveries: dict[str, Any],
    now: datetime,
    alert: Alert | None = None,
) -> Notification | None:
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                kind=kind,
                chain=chain,
                version=version,
                alert=alert,
                details=details,
                created_at=now,
                deliveries=deliveries,
                delivery_due_at=now,
            )
    except Exception:  # the change (or the sweep) matters more than telling about it
        log.exception("could not record the %s notification of %s v%d; it is not sent", kind, chain.name, version)
        return None
    transaction.on_commit(lambda: _queue(notification), robust=True)
    return notification


def _queue(notification: Notification) -> None:
    due = notification.delivery_due_at or notification.created_at
    delivery.queue_notification(notification_id=notification.pk, now=max(timezone.now(), due))


# --- reads ----------------------------------------------------------------------------------------


def changes_notified() -> bool:
    """Whether any notifier takes changes now (else the alerts page says how to set one up)."""
    return bool(planned_deliveries(CHANGE))


def recent_notifications(
    *, limit: int = 100, chain: str | None = None, kind: str | None = None, environment: str | None = None
) -> list[Notification]:
    """Notifications newest first, with their chain loaded: the alerts page and
    GET /api/v1/notifications; of ``environment``'s chains (None: every environment's; a ``chain``
    without one: the default's)."""
    notifications = Notification.objects.select_related("chain").order_by("-created_at", "-id")
    if chain is not None:
        environment = environments.resolve(environment)
        if not Chain.objects.filter(name=chain, environment=environment).exists():
            raise services.unknown_chain(chain, environment)
        notifications = notifications.filter(chain__name=chain)
    if environment is not None:
        notifications = notifications.filter(chain__environment=environment)
    if kind is not None:
        notifications = notifications.filter(kind=kind)
    return list(notifications[:limit])


def notification_entry(notification: Notification, *, errors: bool) -> NotificationEntry:
    """One notification as the API shows it; with ``errors`` (``roles.can_see_delivery_errors``) the
    deliveries' last errors, else null in their place."""
    change = notification.details if notification.kind == NotificationKind.CHANGE else None
    return {
        "id": str(notification.event_id),
        "type": notification.kind,
        "chain": notification.chain.name,
        "version": notification.version,
        "created_at": format_time(notification.created_at),
        "change": change,
        "alert_id": notification.alert_id,
        "deliveries": deliveries_of(notification, errors=errors),
    }


def deliveries_of(row: Deliverable, *, errors: bool) -> dict[str, DeliveryDocument]:
    """The delivery records of an alert or a notification, as documents; without ``errors``
    each ``last_error`` is null (``roles.can_see_delivery_errors``)."""
    if not errors:
        return without_errors(row.deliveries)
    return {
        name: {
            "state": record["state"],
            "attempts": record["attempts"],
            "last_error": record["last_error"],
            "delivered_at": record["delivered_at"],
        }
        for name, record in row.deliveries.items()
    }


def without_errors(deliveries: Mapping[str, Mapping[str, Any]]) -> dict[str, DeliveryDocument]:
    """Delivery records with each ``last_error`` null: for a reader who may not see them."""
    return {
        name: {
            "state": record["state"],
            "attempts": record["attempts"],
            "last_error": None,
            "delivered_at": record["delivered_at"],
        }
        for name, record in deliveries.items()
    }


def resolution_deliveries(alert: Alert, *, errors: bool = True) -> dict[str, DeliveryDocument] | None:
    """Where ``alert``'s resolution was sent and how that went; None while it is open, for an
    event, or when no notifier took it."""
    notification = getattr(alert, "resolution_notification", None)
    return deliveries_of(notification, errors=errors) if notification is not None else None
