"""Where alerts and changes go (DESIGN §9; docs/notifications.md): a log line for
every alert; the signed webhook, Slack, PagerDuty Events v2 and email when configured.

A notifier says which events it takes (``takes``) and delivers one event or raises
``DeliveryFailed`` with a message fit for the delivery record. It records nothing itself:
``audit.delivery`` keeps the state of each delivery and decides when to try again. The HTTP
notifiers share one small ``http.client`` POST (``post_json``) rather than a notification
library's: the webhook's signature covers the exact bytes sent, PagerDuty needs its
``dedup_key`` and ``resolve``, and the webhook rules (docs/notifications.md, "The webhook
rules") need a client that follows no redirect, reads nothing of the answer but its status,
connects only to the address it checked, and ends each attempt by a deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import smtplib
import socket
import ssl
import threading
import time
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import urlsplit
from urllib.request import getproxies_environment, proxy_bypass

from django.conf import settings
from django.core.mail import send_mail

from audit import messages
from audit.messages import ALERT_RAISED, ALERT_RESOLVED, CHANGE, Event
from audit.models import EVENT_KINDS, Alert, DeliveryState
from presets import environments

log = logging.getLogger(__name__)

USER_AGENT = "controlplane-notify/1"
# The webhook's headers (docs/notifications.md, "Verifying the signature").
EVENT_ID_HEADER = "X-Controlplane-Event-Id"
EVENT_TYPE_HEADER = "X-Controlplane-Event"
TIMESTAMP_HEADER = "X-Controlplane-Timestamp"
SIGNATURE_HEADER = "X-Controlplane-Signature"

# Where no notifier POSTs unless WEBHOOK_ALLOW_LINK_LOCAL=true: link-local addresses, where
# clouds serve each instance its metadata and credentials (169.254.169.254, which
# metadata.google.internal resolves to), and the metadata addresses outside that range
# (AWS's over IPv6, Alibaba Cloud's). controlplane/settings.py refuses them in the URLs it
# is given; here they are refused in whatever a name resolves to when an attempt is made.
REFUSED_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")
)
# IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64's well-known prefix
# reaches 169.254.169.254 as 64:ff9b::a9fe:a9fe (the IPv4-mapped form is ``ipv4_mapped``).
NAT64 = ipaddress.ip_network("64:ff9b::/96")


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


def is_refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is link-local or a cloud's metadata address (IPv4 ones also as
    IPv6 maps them or NAT64 embeds them)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return any(address in network for network in REFUSED_NETWORKS)


class ProxyRefused(OSError):
    """The forward proxy answered a CONNECT with another status than 200 (said in our words)."""


class TargetRefused(Exception):
    """The target resolved to an address no notifier may reach (``is_refused_address``)."""


def target_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """Where ``host`` resolves now (``getaddrinfo``'s entries, TCP only), every address
    checked: one link-local or metadata address refuses the target, unless
    WEBHOOK_ALLOW_LINK_LOCAL. The caller connects to these entries only, so a name that
    resolves elsewhere a moment later (DNS rebinding) gains nothing."""
    entries = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not settings.WEBHOOK_ALLOW_LINK_LOCAL:
        for *_, sockaddr in entries:
            resolved = str(sockaddr[0])
            if is_refused_address(ipaddress.ip_address(resolved.split("%", 1)[0])):
                raise TargetRefused(
                    f"{resolved} is a link-local or cloud metadata address (WEBHOOK_ALLOW_LINK_LOCAL=true allows it)"
                )
    return entries


def proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """The forward proxy the environment names for ``scheme`` (``HTTP_PROXY``,
    ``HTTPS_PROXY``; ``NO_PROXY`` exempts hosts), as (host, port); None to go directly. Only
    ``http://`` proxies: https targets are tunnelled through them (CONNECT)."""
    proxy = getproxies_environment().get(scheme)
    if not proxy or proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.scheme != "http" or not parts.hostname:
        raise DeliveryFailed(f"the {scheme} proxy must be an http://host:port URL")
    return parts.hostname, parts.port or 80


class TargetConnection(http.client.HTTPConnection):
    """One connection to a notifier's target, TLS for https: made to an address
    ``target_addresses`` checked, or through the environment's forward proxy (``proxy``),
    and cut off (``cut``) by the attempt's deadline.

    Through a proxy, the proxy resolves the target's name: refusing link-local and metadata
    addresses is then the proxy's work (an address written in the URL is still refused
    here)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        tls: ssl.SSLContext | None,
        proxy: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self.tls = tls
        self.proxy = proxy
        self.default_port = 443 if tls is not None else 80  # the Host header names other ports
        self.was_cut = False

    def connect(self) -> None:
        if self.proxy is not None:
            self._connect_through(*self.proxy)
            return
        last: OSError = OSError("the name resolved to no address")
        for family, kind, proto, _, sockaddr in target_addresses(self.host, self.port):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout)
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host) if self.tls is not None else sock
            return
        raise last

    def _connect_through(self, proxy_host: str, proxy_port: int) -> None:
        try:
            literal = ipaddress.ip_address(self.host)
        except ValueError:
            literal = None
        if literal is not None and not settings.WEBHOOK_ALLOW_LINK_LOCAL and is_refused_address(literal):
            raise TargetRefused(
                f"{self.host} is a link-local or cloud metadata address (WEBHOOK_ALLOW_LINK_LOCAL=true allows it)"
            )
        sock = socket.create_connection((proxy_host, proxy_port), timeout=self.timeout)
        self.sock = sock
        if self.tls is None:
            return  # plain http: the request names the whole URL (``request_target``)
        authority = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode("ascii"))
        answer = http.client.HTTPResponse(sock, method="CONNECT")
        answer.begin()  # the status line and headers only: a tunnel's answer has no body
        if answer.status != 200:
            raise ProxyRefused(f"the proxy refused the tunnel (HTTP {answer.status})")
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)

    def request_target(self, path: str) -> str:
        """What the request line names: the path, or the whole URL for a plain http target
        through a proxy (which must know where to forward it)."""
        if self.proxy is None or self.tls is not None:
            return path
        authority = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{authority}:{self.port}{path}"

    def cut(self) -> None:
        """End the attempt from another thread: the blocked read or write fails at once."""
        self.was_cut = True
        sock = self.sock
        if sock is not None:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the socket's, not TLS's: no TLS state touched
            except OSError:
                pass


def post_json(name: str, url: str, document: Any, *, headers: dict[str, str] | None = None, secret: str = "") -> None:
    """POST ``document`` as JSON; any 2xx answer is a delivery. With ``secret`` the request is
    signed (``sign``) with the current time.

    The webhook rules: a redirect (3xx) is a failed attempt, never followed; the target must
    not resolve to a link-local or metadata address (``target_addresses``); the whole attempt
    ends within ALERT_WEBHOOK_TIMEOUT_SECONDS however slowly the target answers. Errors say the
    status (with the standard words for it, not the target's) or the network failure in fixed
    words (``network_failure``): never the answer's body or headers, nor the URL, which may
    carry a secret (Slack's does)."""
    body = json.dumps(document, separators=(",", ":")).encode()
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
    if secret:
        timestamp = str(int(time.time()))
        sent |= {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)}
    connection, path = _connection(name, url)
    deadline = threading.Timer(connection.timeout or 0, connection.cut)
    deadline.daemon = True
    deadline.start()
    try:
        try:
            connection.connect()
        except TargetRefused as exc:
            raise DeliveryFailed(f"{name} refused: {exc}") from None
        except (OSError, ValueError) as exc:
            raise DeliveryFailed(f"{name} unreachable: {network_failure(exc, cut=connection.was_cut)}") from None
        if connection.was_cut:  # the deadline passed while connecting
            raise DeliveryFailed(f"{name} unreachable: timed out")
        try:
            connection.request("POST", connection.request_target(path), body=body, headers=sent)
            status = connection.getresponse().status  # its headers and body are never read
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise DeliveryFailed(f"{name} failed: {network_failure(exc, cut=connection.was_cut)}") from None
        if connection.was_cut:  # an answer cut short by the deadline can look whole
            raise DeliveryFailed(f"{name} failed: timed out")
    finally:
        deadline.cancel()
        connection.close()
    if 200 <= status < 300:
        return
    words = f"{name} answered HTTP {status}{_status_words(status)}"
    if 300 <= status < 400:
        raise DeliveryFailed(f"{words} (redirects are not followed)")
    raise DeliveryFailed(words)


def _connection(name: str, url: str) -> tuple[TargetConnection, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise DeliveryFailed(f"{name} URL is not a valid http:// or https:// URL")
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    connection = TargetConnection(
        parts.hostname,
        port or (443 if tls is not None else 80),
        timeout=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS,
        tls=tls,
        proxy=proxy_for(parts.scheme, parts.hostname),
    )
    return connection, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _status_words(status: int) -> str:
    # The standard phrase, never the one in the answer: a target chooses its own.
    try:
        return f" {HTTPStatus(status).phrase}"
    except ValueError:
        return ""


def network_failure(error: BaseException, *, cut: bool = False) -> str:
    """A network failure in a few fixed words: the kind of failure, or the operating
    system's words for its error number; nothing the target sent."""
    if cut or isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, ProxyRefused):
        return str(error)  # its status only
    if isinstance(error, ssl.SSLCertVerificationError):
        return "TLS certificate not accepted"
    if isinstance(error, ssl.SSLError):
        return "TLS failed"
    if isinstance(error, socket.gaierror):
        return f"name not resolved ({error.strerror})" if error.strerror else "name not resolved"
    if isinstance(error, http.client.HTTPException):
        return f"no HTTP answer ({error.__class__.__name__})"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return error.__class__.__name__


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
            incidents = open_incidents(event.chain)
            post_json(
                "pagerduty",
                settings.PAGERDUTY_CHANGE_EVENTS_URL,
                messages.pagerduty_change_event(event, routing_key=key, incidents=incidents),
            )
            # On the timeline of each incident open on this chain: an event under its alert's
            # dedup_key, which PagerDuty adds to that open alert's log (it pages nobody again).
            for alert in incidents:
                post_json(
                    "pagerduty",
                    settings.PAGERDUTY_EVENTS_URL,
                    messages.pagerduty_timeline_event(event, alert, routing_key=key),
                )
        else:
            post_json(
                "pagerduty", settings.PAGERDUTY_EVENTS_URL, messages.pagerduty_alert_event(event, routing_key=key)
            )


def open_incidents(chain: str) -> list[Alert]:
    """The open alerts on ``chain`` that opened a PagerDuty incident (conditions, not events)."""
    environment, name = environments.from_label(chain)
    open_alerts = Alert.objects.filter(
        chain__name=name, chain__environment=environment, resolved_at__isnull=True
    ).exclude(kind__in=EVENT_KINDS)
    return [alert for alert in open_alerts.order_by("id") if "pagerduty" in alert.deliveries]


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
        except smtplib.SMTPResponseException as exc:  # the server's reply code, not its words
            raise DeliveryFailed(f"mail not sent: {exc.__class__.__name__} {exc.smtp_code}") from None
        except smtplib.SMTPException as exc:
            raise DeliveryFailed(f"mail not sent: {exc.__class__.__name__}") from None
        except OSError as exc:
            raise DeliveryFailed(f"mail not sent: {network_failure(exc)}") from None


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
