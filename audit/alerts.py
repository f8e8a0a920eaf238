"""Alerts (DESIGN §9): raising and resolving them, the stale-pin sweep, and the read the API
and the alerts page share (``recent_alerts``). Delivery to the notifiers is ``audit.delivery``;
a resolution is told to them too (``audit.notifications.notify_resolved``).

Which pin an alert is about: a pin *episode* starts with the select or restore that made a
non-default preset live and lasts through extensions (and syncs of its definition), which
are new versions of the same pin. It ends when the chain stops serving that pin: a revert,
an expiry, another preset selected or restored over it, or a sync that made the preset the
default. ``stale_pin`` is keyed by the version where the episode started, so it is raised once
per pin however many sweeps run and however often the pin is extended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit import messages
from audit.delivery import queue_delivery
from audit.models import SUBJECT_ALERTS, Alert, AlertKind, DeliveryState
from audit.notifications import notify_resolved, resolution_deliveries
from audit.notifiers import LOG, planned_deliveries
from audit.provider_health import Failing, failing_steps
from presets import environments, plans, services
from presets.documents import format_duration, format_time
from presets.models import Action, Chain, PlannedPin, PlanState, Selection, lock_selection
from presets.selectors import PinStart, live_pin_start, pin_start

log = logging.getLogger(__name__)


# --- reads ------------------------------------------------------------------------------


def recent_alerts(
    *, limit: int = 100, open_only: bool = False, chain: str | None = None, environment: str | None = None
) -> list[Alert]:
    """Alerts newest first, with their chain loaded: the alerts page and GET /api/v1/alerts;
    of ``environment``'s chains (None: every environment's; a ``chain`` without one: the default's).

    ``open_only`` keeps the conditions still going on (a stale pin not yet ended)."""
    alerts = Alert.objects.select_related("chain", "resolution_notification").order_by("-created_at", "-id")
    if open_only:
        alerts = alerts.filter(resolved_at__isnull=True)
    if chain is not None:
        environment = environments.resolve(environment)
        if not Chain.objects.filter(name=chain, environment=environment).exists():
            raise services.unknown_chain(chain, environment)
        alerts = alerts.filter(chain__name=chain)
    if environment is not None:
        alerts = alerts.filter(chain__environment=environment)
    return list(alerts[:limit])


def open_alert_count(*, environment: str | None = None) -> int:
    """How many alerts report a condition still going on: the count in the pages' top nav; of
    ``environment``'s chains (None: every environment's)."""
    alerts = Alert.objects.filter(resolved_at__isnull=True)
    if environment is not None:
        alerts = alerts.filter(chain__environment=environment)
    return alerts.count()


def alert_texts(alerts: list[Alert], *, now: datetime) -> dict[int, str]:
    """Each alert's words as shown at ``now`` (``alert_text``), by id: two reads, the fleet's
    failing steps and the live pins of the stale alerts' chains, whatever the count; and for
    open suspended plans, two more and one per plan (``_plans_waiting``)."""
    failing: dict[tuple[str, str], Failing] = {}
    if any(a.kind == AlertKind.PROVIDER_FAILING and a.is_open for a in alerts):
        failing = {(f.chain, f"{f.provider}/{f.model}"): f for f in failing_steps(now=now)}
    stale = {a.chain_id for a in alerts if a.kind == AlertKind.STALE_PIN and a.is_open}
    pins: dict[int, tuple[datetime | None, str | None]] = {}
    if stale:
        live = Selection.objects.filter(chain_id__in=stale)
        pins = {c: (e, d) for c, e, d in live.values_list("chain_id", "expires_at", "chain__default_preset__name")}
    waiting = _plans_waiting([a for a in alerts if a.kind == AlertKind.PLAN_SUSPENDED and a.is_open], now=now)
    return {
        a.pk: alert_text(a, now=now, failing=failing, pin=pins.get(a.chain_id), waiting=waiting.get(a.pk))
        for a in alerts
    }


def _plans_waiting(suspended: list[Alert], *, now: datetime) -> dict[int, str]:
    """Why the plan of each open ``plan_suspended`` alert still waits, worked out on its chain
    as served now (``plans.why_waiting``), by alert id; none for a plan no longer suspended."""
    if not suspended:
        return {}
    held = (
        PlannedPin.objects.filter(pk__in=[a.details.get("plan") for a in suspended], state=PlanState.SUSPENDED)
        .select_related("chain", "preset")
        .in_bulk()
    )
    live = {
        s.chain_id: s
        for s in Selection.objects.filter(chain_id__in={p.chain_id for p in held.values()}).select_related(
            "chain", "preset"
        )
    }
    return {
        alert.pk: plans.why_waiting(plan, live[plan.chain_id], now=now)
        for alert in suspended
        if (plan := held.get(alert.details.get("plan"))) is not None and plan.chain_id in live
    }


def alert_text(
    alert: Alert,
    *,
    now: datetime,
    failing: Mapping[tuple[str, str], Failing] | None = None,
    pin: tuple[datetime | None, str | None] | None = None,
    waiting: str | None = None,
) -> str:
    """What ``alert`` says as it is shown at ``now``, from its data: how long its condition
    has lasted and, for a step failing still, the fleet's figures now (``failing``: the
    ``provider_health.failing_steps`` read, by chain and step), as the dashboard's "failing
    now" says them; for a stale pin still open, its expiry now and the chain's default
    (``pin``: an extension moves the expiry); for a plan still suspended, why it waits now
    (``waiting``: ``plans.why_waiting``), the chain may have changed since. ``message`` stays
    as it was raised: what the notifiers were sent."""
    until = alert.resolved_at if alert.resolved_at is not None else now
    lasted = format_duration(until - alert.created_at)
    details = alert.details or {}
    if alert.kind == AlertKind.STALE_PIN:
        pinned_at = _parsed(details.get("pinned_at"))
        if pinned_at is None:
            return alert.message
        preset = details.get("preset")
        by = f"(pinned at v{details.get('pin_version')} by {details.get('pinned_by')}: {details.get('reason')})"
        if not alert.is_open:
            return f"{alert.chain.name} served pin {preset} for {format_duration(until - pinned_at)} {by}."
        expires_at, default = pin if pin is not None else (_parsed(details.get("expires_at")), None)
        expiry = f"; it expires at {format_time(expires_at)}" if expires_at is not None else ""
        return (
            f"{alert.chain.name} has served pin {preset} for {format_duration(now - pinned_at)} {by}{expiry}. "
            f"Keep it on purpose (extend) or revert to {default or 'the default'}."
        )
    if alert.kind == AlertKind.PROVIDER_FAILING:
        if not alert.is_open:
            return f"{alert.subject} on {alert.chain.name} was failing for {lasted}. When raised: {alert.message}"
        step = (failing or {}).get((alert.chain.name, alert.subject))
        if step is None:
            return (
                f"{alert.subject} on {alert.chain.name} is below the failing threshold now (open for {lasted}, "
                f"until the next check resolves it). When raised: {alert.message}"
            )
        return f"{step.describe()}; failing for {lasted}, since {format_time(alert.created_at)}."
    if alert.kind == AlertKind.PLAN_SUSPENDED and alert.is_open and waiting:
        return f"{waiting} When raised: {alert.message}"
    if alert.kind == AlertKind.PROVIDER_CREDENTIALS:
        span = f"for {lasted}" if alert.is_open else f"for {lasted}, until {format_time(until)}"
        return f"{alert.message} (seen {span}, since {format_time(alert.created_at)})."
    return alert.message  # an event: what happened, as it happened


def _parsed(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def alert_entry(alert: Alert) -> dict[str, Any]:
    """One alert as the API shows it: its document, and the delivery state per notifier of
    its raising and of its resolution."""
    return {
        **alert.to_document(),
        "deliveries": alert.deliveries,
        "resolution_deliveries": resolution_deliveries(alert),
    }


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
    subject: str = "",
) -> tuple[Alert, bool]:
    """Record an alert once per (kind, chain, version), or for a provider or plan alert once
    while one is open for (kind, chain, subject); returns it and whether it is new.

    A new alert gets a delivery record for the log and every notifier that takes it. When
    the caller's transaction commits its log line is written and its delivery is queued. An
    event that leaves nothing open is raised with its ``resolution``."""
    deliveries = {
        LOG.name: {"state": DeliveryState.DELIVERED, "attempts": 1, "last_error": "", "delivered_at": format_time(now)},
        **planned_deliveries(messages.ALERT_RAISED, alert_kind=kind),
    }
    pending = len(deliveries) > 1
    # The unique constraint makes this a conditional insert: of two sweeps racing, one
    # creates the alert and the other gets it back.
    if kind in SUBJECT_ALERTS:
        key: dict[str, Any] = {"kind": kind, "chain": chain, "subject": subject, "resolved_at__isnull": True}
        once: dict[str, Any] = {"version": version}
    else:
        key, once = {"kind": kind, "chain": chain, "version": version}, {"subject": subject}
    alert, created = Alert.objects.get_or_create(
        **key,
        defaults={
            **once,
            "message": message,
            "details": details,
            "created_at": now,
            "resolved_at": now if resolution is not None else None,
            "resolution": resolution or "",
            "deliveries": deliveries,
            "delivery_due_at": now if pending else None,
        },
    )
    if created:
        transaction.on_commit(lambda: _announce(alert))
    return alert, created


def _announce(alert: Alert) -> None:
    LOG.send(messages.raised(alert))
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
    pinned = f"v{start.version} by {start.actor}" if start else f"v{pin_version}"
    details = {
        "preset": preset,
        "actor": selection.updated_by,
        "reason": selection.reason,
        "pin_version": start.version if start else pin_version,
        "pinned_by": start.actor if start else None,
        "pinned_at": format_time(start.at) if start else None,
        "expires_at": format_time(expired_at),
        "age_seconds": int(start.age(expired_at).total_seconds()) if start else None,
        "reverted_to": selection.preset.name,
    }
    message = (
        f"{chain.name}: pin {preset} ({pinned}) expired at {format_time(expired_at)}; "
        f"reverted to {selection.preset.name} as v{selection.version}."
    )
    alert, _ = raise_alert(
        kind=AlertKind.PIN_EXPIRED,
        chain=chain,
        version=selection.version,
        message=message,
        details=details,
        now=now,
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
            alert.resolution = (
                f"pin ended by v{ended.version}: {ended.action} to "
                f"{ended.preset.name} by {ended.updated_by}: {ended.reason}"
            )[:600]
            alert.resolved_at = ended.updated_at
        alert.save(update_fields=["resolution", "resolved_at"])
        notify_resolved(alert=alert, now=now)
        log.info("alert %s on %s v%d resolved: %s", alert.kind, chain.name, alert.version, alert.resolution)
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
    open_chains = Alert.objects.filter(kind=AlertKind.STALE_PIN, resolved_at__isnull=True).values("chain_id")
    candidates = Selection.objects.filter(Q(expires_at__isnull=False) | Q(chain_id__in=open_chains))
    raised = resolved = 0
    for selection_id in list(candidates.values_list("id", flat=True)):
        with transaction.atomic():
            # Locked without joins (see lock_selection): a select committing while this
            # waits for the lock would otherwise make the row vanish.
            selection = lock_selection(selection_id)
            start = live_pin_start(selection)
            resolved += _resolve_ended_stale_alerts(
                chain=selection.chain, live_pin_version=start.version if start else None, now=now
            )
            # A pin past its expiry is about to be reverted (by the expiry sweep or the read
            # path), which reports it; it is not "kept".
            if start is None or selection.is_expired(now) or start.age(now) <= alert_after:
                continue
            _, created = raise_alert(
                kind=AlertKind.STALE_PIN,
                chain=selection.chain,
                version=start.version,
                message=_stale_message(selection, start, age=start.age(now)),
                details=_stale_details(selection, start, age=start.age(now)),
                now=now,
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
    return (
        f"{selection.chain.name} has served pin {selection.preset.name} for "
        f"{format_duration(age)} (pinned at v{start.version} by {start.actor}: "
        f"{start.reason}); it expires at {format_time(selection.expires_at)}. Keep it on "
        f"purpose (extend) or revert to {default}."
    )


def resolve_ended(kind: str, *, still: set[tuple[str, str]], now: datetime, resolution: Callable[[Alert], str]) -> int:
    """Resolve the open alerts of ``kind`` whose (chain label, subject) is no longer in
    ``still``, each with ``resolution(alert)`` saying how it ended, and tell the notifiers;
    returns how many. Inside the sweep's transaction: the rows are locked as they are read."""
    resolved = 0
    for alert in Alert.objects.select_for_update().filter(kind=kind, resolved_at__isnull=True).select_related("chain"):
        if (alert.chain.label, alert.subject) in still:
            continue
        alert.resolution = resolution(alert)
        alert.resolved_at = now
        alert.save(update_fields=["resolution", "resolved_at"])
        notify_resolved(alert=alert, now=now)
        resolved += 1
    return resolved
