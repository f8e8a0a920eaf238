"""Alerts (DESIGN §9): raising and resolving them, the stale-pin sweep, delivery to the
notifiers, and the read the API and the alerts page share (``recent_alerts``).

Which pin an alert is about: a pin *episode* starts with the select or restore that made a
non-default preset live and lasts through extensions (and syncs of its definition), which
are new versions of the same pin. It ends when the chain stops serving that pin: a revert,
an expiry, another preset selected or restored over it, or a sync that made the preset the
default. ``stale_pin`` is keyed by the version where the episode started, so it is raised once
per pin however many sweeps run and however often the pin is extended.

Delivery is at least once per notifier: each alert records, per notifier, ``pending``,
``delivered`` or ``failed`` (after ``ALERT_DELIVERY_MAX_ATTEMPTS``) with the attempts and the
last error. The log line is written when the alert commits; the webhook and email are sent
by the ``audit.tasks.deliver_alert`` task, retried with exponential backoff and jitter. A
broker that is down when a delivery is queued leaves the alert due (``delivery_due_at``), and
the next stale-pin sweep queues it again; so does a delivery task that got lost.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.models import Alert, AlertKind, DeliveryState, format_age
from audit.notifiers import LOG, NOTIFIERS, DeliveryFailed
from presets.exceptions import NotFound
from presets.models import Action, Chain, Selection, format_time, lock_selection

log = logging.getLogger(__name__)

# How long a queued delivery task owns an alert's pending deliveries before a sweep assumes
# it was lost and queues another (a worker that is merely slow may then deliver twice).
DELIVERY_LEASE = timedelta(minutes=5)
BACKOFF_CAP_SECONDS = 900
SWEEP_BATCH = 100
# Publishing to the broker retries briefly, then gives up: the alert stays due for the next
# sweep instead of holding a sweep (or a web request that reverted an expired pin).
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2,
                        "interval_max": 0.2}
LAST_ERROR_MAX = 500


# --- reads ------------------------------------------------------------------------------


def recent_alerts(*, limit: int = 100, open_only: bool = False, chain: str | None = None) -> list[Alert]:
    """Alerts newest first, with their chain loaded: the alerts page and GET /api/v1/alerts.

    ``open_only`` keeps the conditions still going on (a stale pin not yet ended)."""
    alerts = Alert.objects.select_related("chain").order_by("-created_at", "-id")
    if open_only:
        alerts = alerts.filter(resolved_at__isnull=True)
    if chain is not None:
        if not Chain.objects.filter(name=chain).exists():
            raise NotFound(f"unknown chain {chain!r}", details={"chain": chain})
        alerts = alerts.filter(chain__name=chain)
    return list(alerts[:limit])


def alert_entry(alert: Alert) -> dict[str, Any]:
    """One alert as the API shows it: its document and its delivery state per notifier."""
    return {**alert.to_document(), "deliveries": alert.deliveries}


@dataclass(frozen=True)
class PinStart:
    """The change that started a pin episode."""

    version: int
    at: datetime
    actor: str
    reason: str


def pin_start(*, chain: Chain, version: int) -> PinStart | None:
    """The select or restore that started the pin live at ``version`` (extensions and syncs
    keep a pin; any other change ends it, so the latest such change is where it began)."""
    row = (
        Selection.history.filter(chain_id=chain.pk, version__lte=version,
                                 action__in=[Action.SELECT, Action.RESTORE])
        .order_by("-version")
        .values("version", "updated_at", "updated_by", "reason")
        .first()
    )
    if row is None:
        return None
    return PinStart(version=row["version"], at=row["updated_at"], actor=row["updated_by"],
                    reason=row["reason"])


# --- raising and resolving ------------------------------------------------------------------


def raise_alert(
    *,
    kind: str,
    chain: Chain,
    version: int,
    message: str,
    details: dict[str, Any],
    now: datetime,
    resolution: str | None = None,
) -> tuple[Alert, bool]:
    """Record an alert once per (kind, chain, version); returns it and whether it is new.

    A new alert gets a delivery record for the log and every configured notifier. When the
    caller's transaction commits its log line is written and its delivery is queued. An
    event that leaves nothing open is raised with its ``resolution``."""
    deliveries = {
        LOG.name: {"state": DeliveryState.DELIVERED, "attempts": 1, "last_error": "",
                   "delivered_at": format_time(now)},
    }
    for notifier in NOTIFIERS.values():
        if notifier is not LOG and notifier.is_configured():
            deliveries[notifier.name] = {"state": DeliveryState.PENDING, "attempts": 0,
                                         "last_error": "", "delivered_at": None}
    pending = len(deliveries) > 1
    # The unique constraint makes this a conditional insert: of two sweeps racing, one
    # creates the alert and the other gets it back.
    alert, created = Alert.objects.get_or_create(
        kind=kind, chain=chain, version=version,
        defaults={
            "message": message, "details": details, "created_at": now,
            "resolved_at": now if resolution is not None else None,
            "resolution": resolution or "", "deliveries": deliveries,
            "delivery_due_at": now if pending else None,
        },
    )
    if created:
        transaction.on_commit(lambda: _announce(alert))
    return alert, created


def _announce(alert: Alert) -> None:
    LOG.send(alert)
    if alert.delivery_due_at is not None:
        queue_delivery(alert_id=alert.pk, now=max(timezone.now(), alert.delivery_due_at))


def alert_pin_expired(*, selection: Selection, now: datetime) -> Alert:
    """Report an automatic revert and resolve the stale alert of the pin it ended.

    ``services.expire_pins`` calls it inside the revert's transaction, with ``selection``
    just reverted (its ``previous_*`` fields describe the pin)."""
    chain = selection.chain
    preset = selection.previous_preset.name if selection.previous_preset else None
    pin_version = selection.previous_version or selection.version
    start = pin_start(chain=chain, version=pin_version)
    expired_at = selection.previous_expires_at or now
    pinned = (f"v{start.version} by {start.actor}" if start else f"v{pin_version}")
    details = {
        "preset": preset,
        "actor": selection.updated_by,
        "reason": selection.reason,
        "pin_version": start.version if start else pin_version,
        "pinned_by": start.actor if start else None,
        "pinned_at": format_time(start.at) if start else None,
        "expires_at": format_time(expired_at),
        "age_seconds": int((expired_at - start.at).total_seconds()) if start else None,
        "reverted_to": selection.preset.name,
    }
    message = (f"{chain.name}: pin {preset} ({pinned}) expired at {format_time(expired_at)}; "
               f"reverted to {selection.preset.name} as v{selection.version}.")
    alert, _ = raise_alert(
        kind=AlertKind.PIN_EXPIRED, chain=chain, version=selection.version, message=message,
        details=details, now=now,
        resolution=f"reported: reverted to {selection.preset.name} as v{selection.version}",
    )
    _resolve_ended_stale_alerts(chain=chain, live_pin_version=None, now=now)
    return alert


def _resolve_ended_stale_alerts(*, chain: Chain, live_pin_version: int | None, now: datetime) -> int:
    """Resolve the chain's open stale-pin alerts whose pin is no longer live, naming the
    change that ended it. The caller holds the chain's selection row lock."""
    open_alerts = Alert.objects.filter(kind=AlertKind.STALE_PIN, chain=chain, resolved_at__isnull=True)
    if live_pin_version is not None:
        open_alerts = open_alerts.exclude(version=live_pin_version)
    resolved = 0
    for alert in open_alerts:
        ended = (
            Selection.history.filter(chain_id=chain.pk, version__gt=alert.version)
            .exclude(action__in=[Action.EXTEND, Action.SYNC], expires_at__isnull=False)
            .select_related("preset")
            .order_by("version")
            .first()
        )
        if ended is None:
            alert.resolution = "the pin is no longer live"
            alert.resolved_at = now
        else:
            alert.resolution = (f"pin ended by v{ended.version}: {ended.action} to "
                                f"{ended.preset.name} by {ended.updated_by}: {ended.reason}")[:600]
            alert.resolved_at = ended.updated_at
        alert.save(update_fields=["resolution", "resolved_at"])
        log.info("alert %s on %s v%d resolved: %s", alert.kind, chain.name, alert.version,
                 alert.resolution)
        resolved += 1
    return resolved


@dataclass(frozen=True)
class StaleSweep:
    """What one stale-pin sweep did."""

    raised: int
    resolved: int


def sweep_stale_pins(*, now: datetime | None = None) -> StaleSweep:
    """Raise ``stale_pin`` for every pin live longer than ``PIN_ALERT_AFTER_MINUTES`` (once
    per pin) and resolve those whose pin has ended. Idempotent; safe with several workers.

    Each chain is checked under its selection row lock, so a pin cannot end between the
    check and the alert, and the alert's unique constraint settles any remaining race."""
    now = now or timezone.now()
    alert_after = timedelta(minutes=settings.PIN_ALERT_AFTER_MINUTES)
    open_chains = Alert.objects.filter(kind=AlertKind.STALE_PIN,
                                       resolved_at__isnull=True).values("chain_id")
    candidates = Selection.objects.filter(Q(expires_at__isnull=False) | Q(chain_id__in=open_chains))
    raised = resolved = 0
    for selection_id in list(candidates.values_list("id", flat=True)):
        with transaction.atomic():
            # Locked without joins (see lock_selection): a select committing while this
            # waits for the lock would otherwise make the row vanish.
            selection = lock_selection(selection_id)
            start = None
            if selection.is_pinned:
                start = pin_start(chain=selection.chain, version=selection.version) or PinStart(
                    version=selection.version, at=selection.updated_at,
                    actor=selection.updated_by, reason=selection.reason)
            resolved += _resolve_ended_stale_alerts(
                chain=selection.chain, live_pin_version=start.version if start else None, now=now)
            # A pin past its expiry is about to be reverted (by the expiry sweep or the read
            # path), which reports it; it is not "kept".
            if start is None or selection.is_expired(now) or now - start.at <= alert_after:
                continue
            _, created = raise_alert(
                kind=AlertKind.STALE_PIN, chain=selection.chain, version=start.version,
                message=_stale_message(selection, start, age=now - start.at),
                details=_stale_details(selection, start, age=now - start.at), now=now,
            )
            raised += created
    return StaleSweep(raised=raised, resolved=resolved)


def _stale_details(selection: Selection, start: PinStart, *, age: timedelta) -> dict[str, Any]:
    return {
        "preset": selection.preset.name,
        "actor": start.actor,
        "reason": start.reason,
        "pin_version": start.version,
        "pinned_by": start.actor,
        "pinned_at": format_time(start.at),
        "expires_at": format_time(selection.expires_at),
        "age_seconds": int(age.total_seconds()),
        "live_version": selection.version,
    }


def _stale_message(selection: Selection, start: PinStart, *, age: timedelta) -> str:
    default = selection.chain.default_preset.name if selection.chain.default_preset else "default"
    return (f"{selection.chain.name} has served pin {selection.preset.name} for "
            f"{format_age(age.total_seconds())} (pinned at v{start.version} by {start.actor}: "
            f"{start.reason}); it expires at {format_time(selection.expires_at)}. Keep it on "
            f"purpose (extend) or revert to {default}.")


# --- delivery ---------------------------------------------------------------------------


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
                record.update(state=DeliveryState.DELIVERED, last_error="",
                              delivered_at=format_time(now))
                continue
            record["last_error"] = error[:LAST_ERROR_MAX]
            if record["attempts"] >= settings.ALERT_DELIVERY_MAX_ATTEMPTS:
                record["state"] = DeliveryState.FAILED
                log.error("alert %s on %s v%d: %s delivery failed for good after %d attempts: %s",
                          alert.kind, alert.chain.name, alert.version, name, record["attempts"], error)
            else:
                log.warning("alert %s on %s v%d: %s delivery attempt %d failed: %s", alert.kind,
                            alert.chain.name, alert.version, name, record["attempts"], error)
        pending = alert.pending_deliveries()
        retry_in = None
        if pending:
            retry_in = backoff_seconds(attempts=max(alert.deliveries[n]["attempts"] for n in pending))
            alert.delivery_due_at = now + timedelta(seconds=retry_in) + DELIVERY_LEASE
        else:
            alert.delivery_due_at = None
        alert.save(update_fields=["deliveries", "delivery_due_at"])
    return retry_in


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
    return bool(Alert.objects.filter(pk=alert_id, delivery_due_at__lte=now)
                .update(delivery_due_at=now + DELIVERY_LEASE))


def _publish(alert_id: int, now: datetime) -> bool:
    from audit.tasks import deliver_alert as deliver_task  # the task module imports this one

    try:
        deliver_task.apply_async((alert_id,), retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception as exc:  # whatever the broker raises, the caller (a sweep) goes on
        log.warning("could not queue delivery of alert %s (%s: %s); it stays due and the next "
                    "sweep queues it", alert_id, exc.__class__.__name__, exc)
        Alert.objects.filter(pk=alert_id, delivery_due_at=now + DELIVERY_LEASE).update(
            delivery_due_at=now)
        return False
    return True
