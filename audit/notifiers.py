"""Where alerts go (DESIGN §9): a log line always; a webhook and email when configured.

A notifier delivers one alert or raises ``DeliveryFailed`` with a message fit for the
alert's delivery record. It records nothing itself: ``audit.alerts`` keeps the state of each
delivery on the alert and decides when to try again.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Protocol

from django.conf import settings
from django.core.mail import send_mail

from audit.models import Alert, AlertKind

log = logging.getLogger(__name__)


class DeliveryFailed(Exception):
    """The notifier could not deliver the alert this time; the message says why."""


class Notifier(Protocol):
    name: str

    def is_configured(self) -> bool: ...

    def send(self, alert: Alert) -> None: ...


def title_of(alert: Alert) -> str:
    """One line naming what happened, for a log line or a mail subject."""
    details = alert.details
    if alert.kind == AlertKind.STALE_PIN:
        return f"{alert.chain.name} pinned to {details.get('preset')} for {alert.age}"
    if alert.kind == AlertKind.PIN_EXPIRED:
        return f"{alert.chain.name}: pin {details.get('preset')} expired, reverted to the default"
    if alert.kind == AlertKind.PROVIDER_FAILING:
        return f"{alert.chain.name}: {alert.subject} is failing"
    if alert.kind == AlertKind.PROVIDER_CREDENTIALS:
        return f"{alert.chain.name}: {alert.subject} rejects the fleet's credentials"
    return f"{alert.kind} on {alert.chain.name}"


class LogNotifier:
    """Always on: one warning line per alert, in the process that raised it."""

    name = "log"

    def is_configured(self) -> bool:
        return True

    def send(self, alert: Alert) -> None:
        log.warning(
            "alert %s on %s v%d: %s (%s)", alert.kind, alert.chain.name, alert.version, alert.message, alert.chain_url
        )


class WebhookNotifier:
    """POSTs the alert document (``Alert.to_document()``) as JSON to ``ALERT_WEBHOOK_URL``;
    any 2xx answer is a delivery."""

    name = "webhook"

    def is_configured(self) -> bool:
        return bool(settings.ALERT_WEBHOOK_URL)

    def send(self, alert: Alert) -> None:
        url = settings.ALERT_WEBHOOK_URL
        if not url:
            raise DeliveryFailed("ALERT_WEBHOOK_URL is no longer set")
        request = urllib.request.Request(
            url,
            data=json.dumps(alert.to_document()).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "controlplane-alerts/1"},
        )
        # Errors name the status or the network failure, never the URL: it may carry a secret.
        try:
            timeout = settings.ALERT_WEBHOOK_TIMEOUT_SECONDS
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            raise DeliveryFailed(f"webhook answered HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise DeliveryFailed(f"webhook unreachable: {exc.reason}") from None
        except (OSError, ValueError) as exc:  # timeouts, resets, a malformed answer
            raise DeliveryFailed(f"webhook failed: {exc.__class__.__name__}: {exc}") from None
        if not 200 <= status < 300:
            raise DeliveryFailed(f"webhook answered HTTP {status}")


class EmailNotifier:
    """Mails ``ALERT_EMAILS`` through Django's mail backend (SMTP settings ``EMAIL_*``)."""

    name = "email"

    def is_configured(self) -> bool:
        return bool(settings.ALERT_EMAILS)

    def send(self, alert: Alert) -> None:
        recipients = list(settings.ALERT_EMAILS)
        if not recipients:
            raise DeliveryFailed("ALERT_EMAILS is no longer set")
        document = alert.to_document()
        facts = "\n".join(
            f"{key}: {document[key]}"
            for key in (
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
            if document.get(key) is not None
        )
        body = f"{alert.message}\n\n{facts}\n\nOpen the chain: {alert.chain_url}\n"
        try:
            send_mail(f"[{alert.kind}] {title_of(alert)}", body, None, recipients)
        except OSError as exc:  # smtplib's errors are OSErrors too
            raise DeliveryFailed(f"mail not sent: {exc.__class__.__name__}: {exc}") from None


LOG = LogNotifier()
# Every notifier by the name its delivery state is kept under on the alert.
NOTIFIERS: dict[str, Notifier] = {n.name: n for n in (LOG, WebhookNotifier(), EmailNotifier())}
