"""Where alerts and changes go (DESIGN §9; README, "Change notifications"): a log line for
every alert; the signed webhook, Slack, PagerDuty Events v2 and email when configured.

A notifier says which events it takes (``takes``) and delivers one event or raises
``DeliveryFailed`` with a message fit for the delivery record. It records nothing itself:
``audit.delivery`` keeps the state of each delivery and decides when to try again. The HTTP
notifiers are small ``urllib`` clients rather than a notification library's: the webhook's
signature covers the exact bytes sent, PagerDuty needs its ``dedup_key`` and ``resolve``, and
a delivery record wants the answer's status and words, which such libraries keep to
themselves.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any, Protocol

from django.conf import settings
from django.core.mail import send_mail

from audit import messages
from audit.messages import ALERT_RAISED, ALERT_RESOLVED, CHANGE, Event
from audit.models import EVENT_KINDS, DeliveryState

log = logging.getLogger(__name__)

USER_AGENT = "controlplane-notify/1"
# The webhook's headers (README, "Verifying the webhook's signature").
EVENT_ID_HEADER = "X-Controlplane-Event-Id"
EVENT_TYPE_HEADER = "X-Controlplane-Event"
TIMESTAMP_HEADER = "X-Controlplane-Timestamp"
SIGNATURE_HEADER = "X-Controlplane-Signature"
# How much of a refusal's body a delivery record keeps (Slack and PagerDuty say why there).
ANSWER_WORDS_MAX = 200


class DeliveryFailed(Exception):
    """The notifier could not deliver the event this time; the message says why."""


class Notifier(Protocol):
    name: str

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool: ...

    def send(self, event: Event) -> None: ...


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value: ``v1=`` and the hex HMAC-SHA256, keyed with the shared
    secret, of the timestamp, a full stop and the exact body."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def post_json(name: str, url: str, document: Any, *, headers: dict[str, str] | None = None, secret: str = "") -> None:
    """POST ``document`` as JSON; any 2xx answer is a delivery. With ``secret`` the request is
    signed (``sign``) with the current time. Errors name the status or the network failure,
    never the URL: it may carry a secret (Slack's does)."""
    body = json.dumps(document, separators=(",", ":")).encode()
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
    if secret:
        timestamp = str(int(time.time()))
        sent |= {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)}
    request = urllib.request.Request(url, data=body, method="POST", headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        words = _answer_words(exc)
        raise DeliveryFailed(f"{name} answered HTTP {exc.code} {exc.reason}{words}") from None
    except urllib.error.URLError as exc:
        raise DeliveryFailed(f"{name} unreachable: {exc.reason}") from None
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed answer
        raise DeliveryFailed(f"{name} failed: {exc.__class__.__name__}: {exc}") from None
    if not 200 <= status < 300:
        raise DeliveryFailed(f"{name} answered HTTP {status}")


def _answer_words(error: urllib.error.HTTPError) -> str:
    try:
        words = error.read(ANSWER_WORDS_MAX + 1).decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""
    words = " ".join(words.split())
    if len(words) > ANSWER_WORDS_MAX:
        words = words[:ANSWER_WORDS_MAX] + "…"
    return f": {words}" if words else ""


class LogNotifier:
    """Always on: one warning line per alert raised, in the process that raised it."""

    name = "log"

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool:
        return event_type == ALERT_RAISED

    def send(self, event: Event) -> None:
        alert = event.alert
        if alert is None:
            return
        log.warning(
            "alert %s on %s v%d: %s (%s)", alert.kind, alert.chain.name, alert.version, alert.message, alert.chain_url
        )


class WebhookNotifier:
    """POSTs every event to ``NOTIFY_WEBHOOK_URL`` as the envelope of
    ``messages.webhook_document``, signed with ``NOTIFY_WEBHOOK_SECRET``.

    ``ALERT_WEBHOOK_URL``, the older alerts-only webhook, still works when
    ``NOTIFY_WEBHOOK_URL`` is not set: it receives alerts raised and resolved, as the alert
    document it always received (signed too when a secret is set), and no changes."""

    name = "webhook"

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool:
        if settings.NOTIFY_WEBHOOK_URL:
            return True
        return bool(settings.ALERT_WEBHOOK_URL) and event_type != CHANGE

    def send(self, event: Event) -> None:
        headers = {EVENT_ID_HEADER: event.id, EVENT_TYPE_HEADER: event.type}
        secret = settings.NOTIFY_WEBHOOK_SECRET
        if settings.NOTIFY_WEBHOOK_URL:
            post_json(
                "webhook", settings.NOTIFY_WEBHOOK_URL, messages.webhook_document(event), headers=headers, secret=secret
            )
        elif settings.ALERT_WEBHOOK_URL and event.alert is not None:
            post_json("webhook", settings.ALERT_WEBHOOK_URL, event.alert.to_document(), headers=headers, secret=secret)
        else:
            raise DeliveryFailed("NOTIFY_WEBHOOK_URL is no longer set")


class SlackNotifier:
    """POSTs every event to a Slack incoming webhook (``SLACK_WEBHOOK_URL``) as a message."""

    name = "slack"

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool:
        return bool(settings.SLACK_WEBHOOK_URL)

    def send(self, event: Event) -> None:
        if not settings.SLACK_WEBHOOK_URL:
            raise DeliveryFailed("SLACK_WEBHOOK_URL is no longer set")
        post_json("slack", settings.SLACK_WEBHOOK_URL, messages.slack_message(event))


class PagerDutyNotifier:
    """PagerDuty Events v2 with ``PAGERDUTY_ROUTING_KEY``: ``trigger`` when a condition is
    raised, ``resolve`` when it ends (one ``dedup_key`` per alert); changes as change events
    unless ``PAGERDUTY_CHANGE_EVENTS`` is off. An alert that reports an event already over
    (``pin_expired``) pages nobody: its change went as a change event."""

    name = "pagerduty"

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool:
        if not settings.PAGERDUTY_ROUTING_KEY:
            return False
        if event_type == CHANGE:
            return bool(settings.PAGERDUTY_CHANGE_EVENTS)
        return alert_kind not in EVENT_KINDS

    def send(self, event: Event) -> None:
        key = settings.PAGERDUTY_ROUTING_KEY
        if not key:
            raise DeliveryFailed("PAGERDUTY_ROUTING_KEY is no longer set")
        if event.type == CHANGE:
            post_json(
                "pagerduty",
                settings.PAGERDUTY_CHANGE_EVENTS_URL,
                messages.pagerduty_change_event(event, routing_key=key),
            )
        else:
            post_json(
                "pagerduty", settings.PAGERDUTY_EVENTS_URL, messages.pagerduty_alert_event(event, routing_key=key)
            )


class EmailNotifier:
    """Mails ``ALERT_EMAILS`` (or ``NOTIFY_EMAILS``) through Django's mail backend (SMTP
    settings ``EMAIL_*``): alerts raised and resolved; changes too with ``NOTIFY_EMAIL_CHANGES``."""

    name = "email"

    def takes(self, event_type: str, *, alert_kind: str | None = None) -> bool:
        if not settings.ALERT_EMAILS:
            return False
        return event_type in (ALERT_RAISED, ALERT_RESOLVED) or settings.NOTIFY_EMAIL_CHANGES

    def send(self, event: Event) -> None:
        recipients = list(settings.ALERT_EMAILS)
        if not recipients:
            raise DeliveryFailed("ALERT_EMAILS is no longer set")
        subject, body = messages.email_message(event)
        try:
            send_mail(subject, body, None, recipients)
        except OSError as exc:  # smtplib's errors are OSErrors too
            raise DeliveryFailed(f"mail not sent: {exc.__class__.__name__}: {exc}") from None


LOG = LogNotifier()
# Every notifier by the name its delivery state is kept under, in the order pages list them.
NOTIFIERS: dict[str, Notifier] = {
    n.name: n for n in (LOG, WebhookNotifier(), SlackNotifier(), PagerDutyNotifier(), EmailNotifier())
}


def planned_deliveries(event_type: str, *, alert_kind: str | None = None) -> dict[str, dict[str, Any]]:
    """A pending delivery record for each notifier but the log that takes this event now."""
    return {
        name: {"state": DeliveryState.PENDING, "attempts": 0, "last_error": "", "delivered_at": None}
        for name, notifier in NOTIFIERS.items()
        if notifier is not LOG and notifier.takes(event_type, alert_kind=alert_kind)
    }
