"""What the notifiers say (docs/notifications.md): each event (a change, an alert
raised, an alert resolved) as the signed webhook's JSON, a Slack message, a PagerDuty Events
v2 event and a mail. Pure: no network, no writes; ``audit.notifiers`` sends what this builds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from audit import actions
from audit.models import Alert, AlertKind, Notification, NotificationKind
from presets import environments
from presets.documents import format_time

CHANGE = "change"
ALERT_RAISED = "alert.raised"
ALERT_RESOLVED = "alert.resolved"
EVENT_TYPES = (CHANGE, ALERT_RAISED, ALERT_RESOLVED)

# PagerDuty's severities (critical, error, warning, info) for each alert kind.
SEVERITY: dict[str, str] = {
    AlertKind.STALE_PIN: "warning",
    AlertKind.PIN_EXPIRED: "info",
    AlertKind.PROVIDER_FAILING: "error",
    AlertKind.PROVIDER_CREDENTIALS: "critical",
    AlertKind.PLAN_SUSPENDED: "warning",
    AlertKind.PLAN_MISSED: "info",
    AlertKind.GUARD_RESTORED: "info",
    AlertKind.PUBLISH_FORGED: "critical",
    AlertKind.DRILL_FAILED: "warning",
    AlertKind.DRILL_PASSED: "info",
    AlertKind.SPEND: "warning",
}
# PagerDuty refuses a summary longer than this.
SUMMARY_MAX = 1024


@dataclass(frozen=True)
class Event:
    """One thing to tell the notifiers. ``id`` is the same on every retry of its delivery, so
    a receiver can drop a repeat. A change carries ``change`` (a history entry), an alert
    event its ``alert``."""

    id: str
    type: str
    chain: str  # its label: staging/chat outside the default environment
    environment: str
    version: int
    url: str
    occurred_at: datetime
    change: dict[str, Any] | None = None
    alert: Alert | None = None


def raised(alert: Alert) -> Event:
    """The event "``alert`` was raised" (the delivery of ``Alert.deliveries``)."""
    return Event(
        id=alert.raised_event_id,
        type=ALERT_RAISED,
        chain=alert.chain.label,
        environment=alert.chain.environment,
        version=alert.version,
        url=alert.chain_url,
        occurred_at=alert.created_at,
        alert=alert,
    )


def of_notification(notification: Notification) -> Event:
    """The event a notification tells: its change, or its alert's resolution."""
    if notification.kind == NotificationKind.CHANGE:
        return Event(
            id=str(notification.event_id),
            type=CHANGE,
            chain=notification.chain.label,
            environment=notification.chain.environment,
            version=notification.version,
            url=notification.chain_url,
            occurred_at=notification.created_at,
            change=notification.details,
        )
    alert = notification.alert
    assert alert is not None, "a resolution's alert is kept (PROTECT)"
    return Event(
        id=str(notification.event_id),
        type=ALERT_RESOLVED,
        chain=notification.chain.label,
        environment=notification.chain.environment,
        version=alert.version,
        url=alert.chain_url,
        occurred_at=alert.resolved_at or notification.created_at,
        alert=alert,
    )


# --- words ------------------------------------------------------------------------------------


def readable_time(value: datetime | str | None) -> str:
    """'2026-11-29 06:00 UTC': a time people read in a chat or a mail, whatever their zone."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return format_time(value).replace("T", " ")[:16] + " UTC"


def title_of(alert: Alert) -> str:
    """One line naming what happened, for a log line, a mail subject or a chat message."""
    details = alert.details
    if alert.kind == AlertKind.STALE_PIN:
        return f"{alert.chain.label} pinned to {details.get('preset')} for {alert.age}"
    if alert.kind == AlertKind.PIN_EXPIRED:
        return f"{alert.chain.label}: pin {details.get('preset')} expired, reverted to the default"
    if alert.kind == AlertKind.PROVIDER_FAILING:
        return f"{alert.chain.label}: {alert.subject} is failing"
    if alert.kind == AlertKind.PROVIDER_CREDENTIALS:
        return f"{alert.chain.label}: {alert.subject} rejects the fleet's credentials"
    if alert.kind == AlertKind.PLAN_SUSPENDED:
        return f"{alert.chain.label}: planned pin {details.get('preset')} did not start; start it anyway or cancel it"
    if alert.kind == AlertKind.PLAN_MISSED:
        return f"{alert.chain.label}: planned pin {details.get('preset')} was missed"
    if alert.kind == AlertKind.GUARD_RESTORED:
        return f"{alert.chain.label}: the guard undid pin {details.get('preset')}, restored {details.get('restored')}"
    if alert.kind == AlertKind.PUBLISH_FORGED:
        return f"{alert.chain.label}: {alert.subject} held a document the control plane did not make; replaced"
    if alert.kind in (AlertKind.DRILL_FAILED, AlertKind.DRILL_PASSED):
        return f"{alert.chain.label}: {alert.subject} {details.get('verdict')} (report: {details.get('url')})"
    if alert.kind == AlertKind.SPEND:
        return f"{alert.chain.label}: {alert.subject} spend runs at {details.get('words', 'past its bound')}"
    return f"{alert.kind} on {alert.chain.label}"


def change_summary(change: dict[str, Any]) -> str:
    """The change in one sentence naming who, what, which chain and version:
    'alice selected pin_secondary on chat (v2)', on staging/chat in another environment than
    the default (a change recorded before environments names none: the default's)."""
    chain = environments.label(change.get("environment") or "", change["chain_name"])
    preset, actor, version = change["preset"], change["actor"], change["version"]
    previous = change.get("previous_preset")
    action = change["action"]
    if action == "select":
        return f"{actor} selected {preset} on {chain} (v{version})"
    if action == "revert":
        return f"{actor} reverted {chain} to its default {preset} (v{version})"
    if action == "extend":
        return f"{actor} changed the expiry of the pin {preset} on {chain} (v{version})"
    if action == "restore":
        return f"{actor} restored {preset} on {chain} (v{version})"
    if action == "expire":
        return f"the pin {previous} on {chain} expired; it serves its default {preset} again (v{version})"
    if action == "sync":
        return f"the presets file was synced: {chain} serves {preset} (v{version})"
    return f"{actor}: {action} {preset} on {chain} (v{version})"


def expiry_words(change: dict[str, Any]) -> str:
    """'pinned until 2026-11-29 06:00 UTC', or that the default never expires."""
    if change.get("expires_at"):
        return f"pinned until {readable_time(change['expires_at'])}"
    return "no expiry (the chain's default)"


def summary_of(event: Event) -> str:
    """The event in one line."""
    if event.change is not None:
        return change_summary(event.change)
    assert event.alert is not None
    if event.type == ALERT_RESOLVED:
        return f"resolved: {title_of(event.alert)}"
    return title_of(event.alert)


def suggested_actions(event: Event) -> list[actions.Action]:
    """The actions a notification offers (``audit.actions``): a raised alert's, or a pinning change's."""
    if event.change is not None:
        return actions.for_change(event.change, at=event.occurred_at)
    if event.alert is not None and event.type == ALERT_RAISED:
        return actions.for_alert(event.alert)
    return []


# --- the signed webhook ---------------------------------------------------------------------------


def webhook_document(event: Event) -> dict[str, Any]:
    """The JSON body ``NOTIFY_WEBHOOK_URL`` receives: the same envelope for every type, with
    ``change`` (a history entry) or ``alert`` (the alert document) filled in."""
    return {
        "id": event.id,
        "type": event.type,
        "occurred_at": format_time(event.occurred_at),
        "chain": event.chain,
        "environment": event.environment,
        "version": event.version,
        "summary": summary_of(event),
        "url": event.url,
        "change": event.change,
        "alert": event.alert.to_document() if event.alert is not None else None,
        "actions": [action_document(action) for action in suggested_actions(event)],
    }


def action_document(action: actions.Action) -> dict[str, Any]:
    """A suggested action as the webhook tells it: what it does and the link to its review."""
    return {"kind": action.kind, "label": action.label, "preset": action.preset, "url": actions.deep_link(action)}


# --- Slack ------------------------------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Text Slack shows as written: its three control characters escaped (its mrkdwn rules)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(event: Event) -> dict[str, Any]:
    """An incoming-webhook message: readable ``text`` with a link to the chain's page."""
    link = f"<{event.url}|Open {event.chain} on the control plane>"
    if event.change is not None:
        change = event.change
        lines = [
            f"*{slack_escape(change_summary(change))}*",
            f"Why: {slack_escape(change['reason'])}",
            f"Expiry: {expiry_words(change)}",
            link,
        ]
    else:
        alert = event.alert
        assert alert is not None
        if event.type == ALERT_RESOLVED:
            head = f":white_check_mark: *Resolved: {slack_escape(title_of(alert))}*"
            lines = [head, slack_escape(alert.resolution), link]
        else:
            mark = ":information_source:" if alert.is_event else ":rotating_light:"
            lines = [f"{mark} *{alert.kind}: {slack_escape(title_of(alert))}*", slack_escape(alert.message), link]
    text = "\n".join(lines)
    suggested = suggested_actions(event)
    if not suggested:
        return {"text": text, "unfurl_links": False}
    return {"text": text, "unfurl_links": False, "blocks": slack_blocks(text, suggested)}


# A Slack button's action_id: ``act.<kind>`` (the ``chatops`` interface answers it).
SLACK_ACTION_PREFIX = "act."


def slack_blocks(text: str, suggested: list[actions.Action]) -> list[dict[str, Any]]:
    """The message as blocks with a button per suggested action. With the Slack app set up
    (``SLACK_SIGNING_SECRET``) a button opens the action's review in Slack (a modal); without
    it, it opens the review page (the deep link)."""
    interactive = bool(settings.SLACK_SIGNING_SECRET)
    buttons: list[dict[str, Any]] = []
    for action in suggested:
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": action.label[:75]},
            "action_id": SLACK_ACTION_PREFIX + action.kind,
        }
        if interactive:
            button["value"] = json.dumps(action.to_value())[:2000]
        else:
            button["url"] = actions.deep_link(action)
        if action.kind == actions.REVERT:
            button["style"] = "danger"
        elif action.kind == actions.PIN:
            button["style"] = "primary"
        buttons.append(button)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {"type": "actions", "block_id": "controlplane.actions", "elements": buttons},
    ]
    if interactive:  # the same reviews on the pages, for whoever would rather use a browser
        links = " · ".join(f"<{actions.deep_link(action)}|{slack_escape(action.label)}>" for action in suggested)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"In the browser: {links}"}]})
    return blocks


# --- PagerDuty Events v2 ----------------------------------------------------------------------------


def pagerduty_source() -> str:
    """Where the events come from, as PagerDuty wants it: the control plane's host name."""
    return urlsplit(settings.PUBLIC_BASE_URL).hostname or "controlplane"


def pagerduty_links(event: Event) -> list[dict[str, str]]:
    """The chain's page, then a link to each suggested action's review (on the incident)."""
    links = [{"href": event.url, "text": f"{event.chain} on the control plane"}]
    for action in suggested_actions(event):
        links.append({"href": actions.deep_link(action), "text": f"{action.label} on {event.chain} (review)"})
    return links


def pagerduty_alert_event(event: Event, *, routing_key: str) -> dict[str, Any]:
    """``trigger`` for an alert raised, ``resolve`` for one resolved; the same ``dedup_key``
    (``Alert.dedup_key``), so PagerDuty resolves the incident the trigger opened."""
    alert = event.alert
    assert alert is not None
    if event.type == ALERT_RESOLVED:
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": alert.dedup_key}
    return pagerduty_trigger(event, alert, routing_key=routing_key, at=alert.created_at, details=alert.to_document())


def pagerduty_change_event(event: Event, *, routing_key: str, incidents: Sequence[Alert] = ()) -> dict[str, Any]:
    """A change event (PagerDuty's change-events endpoint): shown next to incidents, never
    paged; ``incident_keys`` names the incidents open on its chain (their ``dedup_key``)."""
    change = event.change
    assert change is not None
    return {
        "routing_key": routing_key,
        "payload": {
            "summary": f"{change_summary(change)}: {change['reason']}"[:SUMMARY_MAX],
            "timestamp": format_time(event.occurred_at),
            "source": pagerduty_source(),
            "custom_details": {**change, "incident_keys": [alert.dedup_key for alert in incidents]},
        },
        "links": pagerduty_links(event),
    }


def pagerduty_timeline_event(event: Event, alert: Alert, *, routing_key: str) -> dict[str, Any]:
    """A change told on an open incident's timeline: a ``trigger`` under the incident's
    ``dedup_key``, which PagerDuty adds to the open alert's log instead of paging again."""
    change = event.change
    assert change is not None
    details = {"change": f"{change_summary(change)}: {change['reason']}", **change}
    return pagerduty_trigger(event, alert, routing_key=routing_key, at=event.occurred_at, details=details)


def pagerduty_trigger(
    event: Event, alert: Alert, *, routing_key: str, at: datetime, details: dict[str, Any]
) -> dict[str, Any]:
    """A ``trigger`` under ``alert``'s ``dedup_key``: its title and message as the summary."""
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": alert.dedup_key,
        "payload": {
            "summary": f"{title_of(alert)}: {alert.message}"[:SUMMARY_MAX],
            "source": pagerduty_source(),
            "severity": SEVERITY.get(alert.kind, "warning"),
            "timestamp": format_time(at),
            "component": alert.chain.label,
            "class": alert.kind,
            "custom_details": details,
        },
        "links": pagerduty_links(event),
    }


# --- email ------------------------------------------------------------------------------------------

ALERT_FACTS = (
    "chain",
    "preset",
    "version",
    "actor",
    "reason",
    "pinned_by",
    "pinned_at",
    "expires_at",
    "age",
    "created_at",
)
CHANGE_FACTS = ("chain_name", "version", "action", "preset", "previous_preset", "actor", "reason", "expires_at", "at")


def email_message(event: Event) -> tuple[str, str]:
    """The mail's subject and plain-text body."""
    if event.change is not None:
        change = event.change
        facts = "\n".join(f"{key}: {change[key]}" for key in CHANGE_FACTS if change.get(key) is not None)
        summary = change_summary(change)
        body = f"{summary}.\nWhy: {change['reason']}\nExpiry: {expiry_words(change)}\n\n{facts}\n\n"
        return f"[change] {summary}", body + f"Open the chain: {event.url}\n" + email_actions(event)
    alert = event.alert
    assert alert is not None
    document = alert.to_document()
    facts = "\n".join(f"{key}: {document[key]}" for key in ALERT_FACTS if document.get(key) is not None)
    if event.type == ALERT_RESOLVED:
        body = f"Resolved: {alert.resolution}\n\n{alert.message}\n\n{facts}\n\nOpen the chain: {alert.chain_url}\n"
        return f"[resolved] [{alert.kind}] {title_of(alert)}", body
    body = f"{alert.message}\n\n{facts}\n\nOpen the chain: {alert.chain_url}\n" + email_actions(event)
    return f"[{alert.kind}] {title_of(alert)}", body


def email_actions(event: Event) -> str:
    """A line per suggested action with the link to its review ('' when none)."""
    lines = [f"{action.label}: {actions.deep_link(action)}" for action in suggested_actions(event)]
    if not lines:
        return ""
    return "\nOr act from here (each opens its review; nothing changes until you confirm):\n" + "\n".join(lines) + "\n"
