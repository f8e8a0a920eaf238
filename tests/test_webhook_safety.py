"""The webhook rules (docs/notifications.md, "The webhook rules"), for every notifier that POSTs
over HTTP (the webhooks, Slack, PagerDuty), against real local HTTP servers: a redirect is a
failed attempt and is never followed; what a target answers (its body, its headers, its own
reason phrase) is recorded and shown nowhere; why a delivery failed is shown to on-call
engineers and staff only; link-local and cloud metadata addresses are refused unless allowed; an
attempt ends by its deadline; and the lease that keeps two workers from delivering one row twice
is renewed while an attempt runs, handed from task to task, and taken over only when it ran
out."""

from __future__ import annotations

import functools
import http.server
import ipaddress
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from http import HTTPStatus
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.test import Client
from django.utils import timezone

from audit import delivery
from audit.models import Alert, Notification
from audit.notifiers import is_refused_address
from controlplane.celery import app
from tests import settings_env
from tests.servers import wait_for
from tests.test_alert_delivery import T0, stale_alert
from worker import tasks

SECRET = "s3cr3t-internal-page-7f2a"
SIGNING_SECRET = "test-secret-for-signing-webhooks-0123456789"
ROUTING_KEY = "R0UT1NGK3Y0123456789abcdefABCDEF"


# --- local targets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Target:
    """A threaded HTTP server on 127.0.0.1 recording every request, whatever its method, and
    answering each with ``status`` (and the reason phrase, headers and body given); with
    ``hold`` it answers nothing until ``release()``."""

    def __init__(
        self,
        status: int = 200,
        *,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        hold: bool = False,
    ) -> None:
        self.requests: list[Request] = []
        self.arrived = threading.Event()
        self.released = threading.Event()
        if not hold:
            self.released.set()
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                target.requests.append(
                    Request(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                )
                target.arrived.set()
                target.released.wait(60)
                self.send_response(status, reason)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = answer  # noqa: N815 - http.server's naming

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = self.base + "/hooks/controlplane"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def target() -> Iterator[Callable[..., Target]]:
    """Start local targets as the test asks; all are stopped after it."""
    started: list[Target] = []

    def start(*args: Any, **kwargs: Any) -> Target:
        started.append(Target(*args, **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.close()


# Each notifier that POSTs over HTTP, pointed at a URL: (the name its delivery is kept under,
# the settings that send alerts to ``url``).
NOTIFIERS: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "older-webhook": ("webhook", lambda url: {"ALERT_WEBHOOK_URL": url}),
    "signed-webhook": (
        "webhook",
        lambda url: {"NOTIFY_WEBHOOK_URL": url, "NOTIFY_WEBHOOK_SECRET": SIGNING_SECRET},
    ),
    "slack": ("slack", lambda url: {"SLACK_WEBHOOK_URL": url}),
    "pagerduty": ("pagerduty", lambda url: {"PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "PAGERDUTY_EVENTS_URL": url}),
}


def send_alerts_to(settings: Any, notifier: str, url: str) -> str:
    """Point ``notifier`` at ``url``; returns the name its delivery is kept under."""
    name, targets = NOTIFIERS[notifier]
    for setting, value in targets(url).items():
        setattr(settings, setting, value)
    return name


def attempt_once(clock: Any) -> Alert:
    """A stale_pin alert, raised and tried once by this process; returns it, reloaded."""
    alert = stale_alert(clock)
    delivery.deliver_alert(alert_id=alert.pk)
    alert.refresh_from_db()
    return alert


def page_text(client: Client) -> str:
    response = client.get("/alerts/")
    assert response.status_code == 200
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", response.content.decode()))


# --- redirects ----------------------------------------------------------------------------------


@pytest.mark.parametrize("notifier", list(NOTIFIERS))
def test_a_redirect_is_a_failed_attempt_and_its_location_gets_nothing(
    synced: None, settings: Any, target: Callable[..., Target], notifier: str
) -> None:
    internal = target(500, body=f"<h1>admin</h1><p>{SECRET}</p>".encode())
    redirecting = target(302, headers={"Location": internal.base + "/admin/keys"})
    name = send_alerts_to(settings, notifier, redirecting.url)
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)

    assert [r.method for r in redirecting.requests] == ["POST"]
    assert internal.requests == []
    record = alert.deliveries[name]
    assert (record["state"], record["attempts"]) == ("pending", 1)
    assert record["last_error"] == f"{name} answered HTTP 302 Found (redirects are not followed)"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_no_kind_of_redirect_is_followed(
    synced: None, settings: Any, target: Callable[..., Target], status: int
) -> None:
    internal = target(200)
    redirecting = target(status, headers={"Location": internal.url})
    settings.ALERT_WEBHOOK_URL = redirecting.url
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)

    assert internal.requests == []
    record = alert.deliveries["webhook"]
    assert (record["state"], record["attempts"]) == ("pending", 1)
    assert record["last_error"] == (
        f"webhook answered HTTP {status} {HTTPStatus(status).phrase} (redirects are not followed)"
    )


# --- what a target answers -----------------------------------------------------------------------


@pytest.mark.parametrize("notifier", list(NOTIFIERS))
def test_nothing_a_failing_target_answers_is_recorded_or_shown(
    synced: None,
    settings: Any,
    target: Callable[..., Target],
    oncall: Client,
    caplog: pytest.LogCaptureFixture,
    notifier: str,
) -> None:
    leaking = target(
        500,
        reason=f"Internal {SECRET}",
        headers={"X-Debug": SECRET},
        body=f'{{"error": "db password is {SECRET}", "trace": "..."}}'.encode(),
    )
    name = send_alerts_to(settings, notifier, leaking.url)
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
        row = repr(Alert.objects.filter(pk=alert.pk).values().get())
        api = oncall.get("/api/v1/alerts").content.decode()
        text = page_text(oncall)

    assert len(leaking.requests) == 1
    assert alert.deliveries[name]["last_error"] == f"{name} answered HTTP 500 Internal Server Error"
    assert f"{name} answered HTTP 500 Internal Server Error" in text  # on call: the reason is shown
    for where, words in (("row", row), ("API", api), ("page", text), ("log", caplog.text)):
        assert SECRET not in words, f"the target's answer is in the {where}"


def test_a_network_failure_is_told_in_fixed_words_without_the_url(synced: None, settings: Any) -> None:
    closing = socket.socket()
    closing.bind(("127.0.0.1", 0))
    port = closing.getsockname()[1]
    closing.close()  # nothing listens there: the connection is refused
    settings.SLACK_WEBHOOK_URL = f"http://127.0.0.1:{port}/services/T0/B0/{SECRET}"
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
    assert alert.deliveries["slack"]["last_error"] == "slack unreachable: Connection refused"


class Dripping(socketserver.ThreadingTCPServer):
    """A target that starts a 200 answer and then sends one byte of a header every 0.2 s
    for 30 s: each read gets something before any per-read timeout."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.stop = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.recv(65536)
                try:
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(150):
                        if server.stop.wait(0.2):
                            return
                        self.request.sendall(b"a")
                    self.request.sendall(b"\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.shutdown()
        self.server_close()


def test_an_attempt_ends_by_its_deadline_however_slowly_the_target_answers(synced: None, settings: Any) -> None:
    dripping = Dripping()
    settings.ALERT_WEBHOOK_URL = f"http://127.0.0.1:{dripping.server_address[1]}/hook"
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 1
    try:
        with time_machine.travel(T0, tick=False) as clock:
            alert = stale_alert(clock)
            started = time.monotonic()
            delivery.deliver_alert(alert_id=alert.pk)
            took = time.monotonic() - started
    finally:
        dripping.close()
    alert.refresh_from_db()
    assert alert.deliveries["webhook"]["last_error"] == "webhook failed: timed out"
    assert took < 10, f"the attempt took {took:.1f} s with a 1 s deadline"


# --- a forward proxy from the environment ------------------------------------------------------


def proxied(monkeypatch: pytest.MonkeyPatch, *, http: str = "", https: str = "", no_proxy: str = "") -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("http_proxy", http), ("https_proxy", https), ("no_proxy", no_proxy)):
        if value:
            monkeypatch.setenv(name, value)


def test_a_plain_http_target_is_reached_through_the_environment_s_proxy(
    synced: None, settings: Any, target: Callable[..., Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    destination, proxy = target(200), target(200)  # the proxy answers for the destination
    settings.ALERT_WEBHOOK_URL = destination.url
    proxied(monkeypatch, http=proxy.base)
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
    assert alert.deliveries["webhook"]["state"] == "delivered"
    assert destination.requests == []
    [forwarded] = proxy.requests
    assert (forwarded.method, forwarded.path) == ("POST", destination.url)  # the whole URL, for the proxy
    assert forwarded.headers["Host"] == destination.base.removeprefix("http://")


def test_a_host_no_proxy_names_is_reached_directly(
    synced: None, settings: Any, target: Callable[..., Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    destination, proxy = target(200), target(200)
    settings.ALERT_WEBHOOK_URL = destination.url
    proxied(monkeypatch, http=proxy.base, no_proxy="127.0.0.1")
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
    assert alert.deliveries["webhook"]["state"] == "delivered"
    assert (len(destination.requests), proxy.requests) == (1, [])


class TunnellingProxy(socketserver.ThreadingTCPServer):
    """A forward proxy's CONNECT: answers ``status`` and records the authority asked for and
    the first bytes sent through the tunnel (then closes it: nothing is behind it)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, status: int) -> None:
        self.asked: list[str] = []
        self.tunnelled = b""
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline().decode("latin-1")
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass
                proxy.asked.append(line.strip())
                self.wfile.write(f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n\r\n".encode())
                if status == 200:
                    proxy.tunnelled = self.rfile.read1(5)

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(200, "webhook unreachable: TLS failed"), (403, "webhook unreachable: the proxy refused the tunnel (HTTP 403)")],
    ids=["tunnel", "tunnel_refused"],
)
def test_an_https_target_is_tunnelled_through_the_environment_s_proxy(
    synced: None, settings: Any, monkeypatch: pytest.MonkeyPatch, status: int, error: str
) -> None:
    proxy = TunnellingProxy(status)
    try:
        # A name only the proxy could resolve: this process never looks it up.
        settings.ALERT_WEBHOOK_URL = "https://hooks.example.invalid/controlplane"
        proxied(monkeypatch, https=proxy.url)
        with time_machine.travel(T0, tick=False) as clock:
            alert = attempt_once(clock)
    finally:
        proxy.close()
    assert proxy.asked == ["CONNECT hooks.example.invalid:443 HTTP/1.1"]
    if status == 200:
        assert proxy.tunnelled[:1] == b"\x16"  # a TLS handshake, sent through the tunnel
    assert alert.deliveries["webhook"]["last_error"] == error


def test_a_link_local_address_written_in_the_url_is_refused_even_through_a_proxy(
    synced: None, settings: Any, target: Callable[..., Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = target(200)
    settings.ALERT_WEBHOOK_URL = "http://169.254.169.254/latest/meta-data/"
    proxied(monkeypatch, http=proxy.base)
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
    assert proxy.requests == []
    assert alert.deliveries["webhook"]["last_error"].startswith("webhook refused: 169.254.169.254 is a link-local")


# --- who sees why a delivery failed --------------------------------------------------------------


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def delivery_errors_seen(client: Client, *, page: bool = True) -> dict[str, Any]:
    """What ``client`` reads of the failed deliveries: the alert's webhook error and the
    change notification's Slack error in the API, and the alert's delivery on the page."""
    [alert] = client.get("/api/v1/alerts").json()["alerts"]
    [change] = client.get("/api/v1/notifications").json()["notifications"]
    return {
        "alert": {name: record["last_error"] for name, record in alert["deliveries"].items()},
        "states": {name: (record["state"], record["attempts"]) for name, record in alert["deliveries"].items()},
        "change": {name: record["last_error"] for name, record in change["deliveries"].items()},
        "page": page_text(client) if page else None,
    }


@pytest.mark.parametrize("who", ["reader", "viewer"])
def test_only_oncall_and_staff_see_why_a_delivery_failed(
    synced: None, settings: Any, target: Callable[..., Target], request: pytest.FixtureRequest, who: str
) -> None:
    failing = target(500)
    settings.ALERT_WEBHOOK_URL = failing.url
    settings.SLACK_WEBHOOK_URL = failing.url + "/slack"
    staff = User.objects.create_user("sam", password="sam-pass-123", is_staff=True)  # not on call
    staff.groups.add(Group.objects.get_or_create(name="viewer")[0])
    root = User.objects.create_superuser("root", password="root-pass-123")
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
        delivery.deliver_notification(notification_id=Notification.objects.get(kind="change").pk)
        hidden = delivery_errors_seen(request.getfixturevalue(who), page=who != "reader")
        shown = {
            "on call": delivery_errors_seen(request.getfixturevalue("oncall")),
            "staff": delivery_errors_seen(signed_in(staff)),
            "superuser": delivery_errors_seen(signed_in(root)),
        }

    webhook_error = "webhook answered HTTP 500 Internal Server Error"
    slack_error = "slack answered HTTP 500 Internal Server Error"
    assert alert.deliveries["webhook"]["last_error"] == webhook_error  # kept on the row either way
    # The state and attempts, to everyone.
    assert hidden["states"] == {"log": ("delivered", 1), "webhook": ("pending", 1), "slack": ("pending", 1)}
    assert set(hidden["alert"].values()) == set(hidden["change"].values()) == {None}
    if hidden["page"] is not None:
        assert "Webhook: pending, attempt 1 failed; next try at about" in hidden["page"]
        assert "answered HTTP" not in hidden["page"]
    for reader, seen in shown.items():
        assert seen["alert"] == {"log": "", "webhook": webhook_error, "slack": slack_error}, reader
        assert seen["change"] == {"slack": slack_error}, reader
        assert f"Webhook: pending, attempt 1 failed: {webhook_error}" in seen["page"], reader


def test_the_openapi_schema_says_who_sees_a_delivery_error(client: Client) -> None:
    components = client.get("/api/schema/?format=json").json()["components"]["schemas"]
    for component in ("AlertDelivery", "Delivery"):  # GET /api/v1/alerts', GET /api/v1/notifications'
        last_error = components[component]["properties"]["last_error"]
        assert last_error.get("nullable") is True or {"type": "null"} in last_error.get("oneOf", [])
        assert "on-call engineer or staff" in last_error["description"]


# --- link-local and cloud metadata addresses -----------------------------------------------------


@pytest.mark.parametrize(
    "address,refused",
    [
        ("169.254.169.254", True),
        ("169.254.0.1", True),
        ("100.100.100.200", True),
        ("fe80::1", True),
        ("febf::1", True),
        ("fd00:ec2::254", True),
        ("::ffff:169.254.169.254", True),
        ("64:ff9b::a9fe:a9fe", True),
        ("127.0.0.1", False),
        ("10.0.0.1", False),
        ("192.0.2.10", False),
        ("100.100.100.201", False),
        ("::1", False),
        ("fd00:ec2::253", False),
        ("2001:db8::1", False),
    ],
)
def test_link_local_and_metadata_addresses_are_the_refused_ones(address: str, refused: bool) -> None:
    assert is_refused_address(ipaddress.ip_address(address)) is refused


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Names this test answers for as DNS would (name -> address); any other name resolves
    as usual."""
    answers: dict[str, str] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real(answers.get(host, host), port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.mark.parametrize(
    "notifier,url,address",
    [
        ("older-webhook", "http://169.254.169.254/latest/meta-data/iam/", "169.254.169.254"),
        ("signed-webhook", "http://[fd00:ec2::254]/latest/api/token", "fd00:ec2::254"),
        ("slack", "http://[::ffff:169.254.169.254]/services/T0/B0/x", "::ffff:169.254.169.254"),
        ("pagerduty", "http://metadata.google.internal/computeMetadata/v1/", "169.254.169.254"),
        ("older-webhook", "https://hooks.example.test/rebound", "169.254.170.2"),
    ],
    ids=["literal", "aws-ipv6", "ipv4-mapped", "gcp-name", "name-resolving-there"],
)
def test_a_target_resolving_to_a_link_local_address_is_refused_at_each_attempt(
    synced: None, settings: Any, resolver: dict[str, str], notifier: str, url: str, address: str
) -> None:
    resolver.update({"metadata.google.internal": "169.254.169.254", "hooks.example.test": "169.254.170.2"})
    name = send_alerts_to(settings, notifier, url)
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
    assert alert.deliveries[name]["last_error"] == (
        f"{name} refused: {address} is a link-local or cloud metadata address (WEBHOOK_ALLOW_LINK_LOCAL=true allows it)"
    )


def test_a_link_local_target_is_tried_only_when_allowed(synced: None, settings: Any, resolver: dict[str, str]) -> None:
    # A link-local address on the loopback interface, where nothing has it: once allowed,
    # the attempt is made and fails in the network stack at once, no packet leaving here.
    resolver["metadata.google.internal"] = "fe80::1%lo"
    settings.ALERT_WEBHOOK_URL = "http://metadata.google.internal/hook"
    with time_machine.travel(T0, tick=False) as clock:
        alert = attempt_once(clock)
        refused = alert.deliveries["webhook"]["last_error"]
        settings.WEBHOOK_ALLOW_LINK_LOCAL = True
        clock.shift(timedelta(minutes=5))
        delivery.deliver_alert(alert_id=alert.pk)
    alert.refresh_from_db()
    assert refused == (
        "webhook refused: fe80::1 is a link-local or cloud metadata address (WEBHOOK_ALLOW_LINK_LOCAL=true allows it)"
    )
    tried = alert.deliveries["webhook"]
    assert tried["attempts"] == 2 and tried["last_error"].startswith("webhook unreachable: ")


TARGET_SETTINGS = ("NOTIFY_", "SLACK_", "PAGERDUTY_", "ALERT_WEBHOOK_URL", "ALERT_EMAILS", "WEBHOOK_")


load_settings = functools.partial(settings_env.load_settings, clear=TARGET_SETTINGS)


@pytest.mark.parametrize(
    "environment,message",
    [
        (
            {"ALERT_WEBHOOK_URL": "http://169.254.169.254/latest/meta-data/"},
            "ALERT_WEBHOOK_URL points at 169.254.169.254",
        ),
        (
            {"SLACK_WEBHOOK_URL": "https://metadata.google.internal/services/T0/B0/slack-secret-part"},
            "SLACK_WEBHOOK_URL points at metadata.google.internal",
        ),
        (
            {"PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "PAGERDUTY_EVENTS_URL": "http://[fe80::1]/v2/enqueue"},
            "PAGERDUTY_EVENTS_URL points at fe80::1,",
        ),
        (
            {"NOTIFY_WEBHOOK_URL": "http://[fd00:ec2::254]/hook", "NOTIFY_WEBHOOK_SECRET": SIGNING_SECRET},
            "NOTIFY_WEBHOOK_URL points at fd00:ec2::254",
        ),
        ({"WEBHOOK_ALLOW_LINK_LOCAL": "maybe"}, "WEBHOOK_ALLOW_LINK_LOCAL='maybe' is not a boolean"),
    ],
    ids=["literal", "metadata-name", "ipv6-link-local", "aws-ipv6", "not-a-boolean"],
)
def test_a_link_local_target_in_the_settings_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(monkeypatch, environment)
    assert str(refused.value).startswith(message)
    assert "WEBHOOK_ALLOW_LINK_LOCAL=true" in str(refused.value) or "boolean" in str(refused.value)
    assert "slack-secret-part" not in str(refused.value)


def test_a_link_local_target_is_taken_when_explicitly_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "http://169.254.169.254/hook"
    assert (
        load_settings(monkeypatch, {"ALERT_WEBHOOK_URL": "https://hooks.example.com/x"})["WEBHOOK_ALLOW_LINK_LOCAL"]
        is False
    )
    loaded = load_settings(monkeypatch, {"ALERT_WEBHOOK_URL": url, "WEBHOOK_ALLOW_LINK_LOCAL": "true"})
    assert (loaded["ALERT_WEBHOOK_URL"], loaded["WEBHOOK_ALLOW_LINK_LOCAL"]) == (url, True)


# --- the lease --------------------------------------------------------------------------------------


@pytest.fixture
def queued() -> Iterator[Callable[[], list[tuple[int, str | None]]]]:
    """The delivery tasks queued on the (in-memory) broker so far: (row id, lease)."""
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery")
        queue.clear()

        def take() -> list[tuple[int, str | None]]:
            taken = []
            while len(queue):
                message = queue.get(timeout=1)
                args, kwargs, _ = message.decode()
                taken.append((args[0], kwargs.get("lease")))
                message.ack()
            return taken

        yield take
        queue.clear()


def test_a_task_whose_lease_ran_out_and_was_taken_over_leaves_the_row_to_the_newer_task(
    synced: None,
    settings: Any,
    target: Callable[..., Target],
    queued: Callable[[], list[tuple[int, str | None]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = target(200)
    settings.ALERT_WEBHOOK_URL = receiver.url
    with time_machine.travel(T0, tick=False) as clock:
        with django_capture_on_commit_callbacks(execute=True):
            alert = stale_alert(clock)
        [(pk, first)] = queued()
        alert.refresh_from_db()
        assert alert.delivery_due_at is not None
        assert first == alert.delivery_due_at.isoformat()  # the task carries the lease it was queued with

        # The task waits in the queue (its worker busy) past its lease; a sweep queues another.
        clock.shift(delivery.DELIVERY_LEASE)
        assert delivery.queue_due_deliveries() == 1
        [(_, second)] = queued()
        assert second != first

        tasks.deliver_alert.apply(args=(pk,), kwargs={"lease": first})
        assert receiver.requests == []  # the older task stops: its lease is gone
        tasks.deliver_alert.apply(args=(pk,), kwargs={"lease": second})
        tasks.deliver_alert.apply(args=(pk,), kwargs={"lease": second})  # a duplicate message: nothing left
    assert len(receiver.requests) == 1
    alert.refresh_from_db()
    assert (alert.deliveries["webhook"]["state"], alert.deliveries["webhook"]["attempts"]) == ("delivered", 1)
    assert alert.delivery_due_at is None


def test_a_retry_carries_the_lease_its_failure_set(
    synced: None, settings: Any, target: Callable[..., Target], queued: Callable[[], list[tuple[int, str | None]]]
) -> None:
    receiver = target(500)
    settings.ALERT_WEBHOOK_URL = receiver.url
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 2
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        assert delivery.queue_delivery(alert_id=alert.pk)
        [(pk, lease)] = queued()
        retry = delivery.attempt(delivery.ALERTS, pk=pk, lease=delivery.lease_of(lease))
        assert retry is not None
        alert.refresh_from_db()
        assert retry.lease == alert.delivery_due_at  # the backoff, then a lease for the retry
        assert retry.lease == timezone.now() + timedelta(seconds=retry.seconds) + delivery.DELIVERY_LEASE
        assert delivery.attempt(delivery.ALERTS, pk=pk, lease=delivery.lease_of(lease)) is None  # spent
        assert len(receiver.requests) == 1
        clock.shift(timedelta(seconds=retry.seconds))
        assert delivery.attempt(delivery.ALERTS, pk=pk, lease=retry.lease) is None  # failed for good
    assert len(receiver.requests) == 2


def test_a_lease_is_renewed_only_while_the_row_still_holds_it(synced: None, settings: Any, webhook: Any) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        held = delivery.take_lease(delivery.ALERTS, pk=alert.pk, lease=None, now=timezone.now())
        assert held == timezone.now() + delivery.DELIVERY_LEASE
        clock.shift(delivery.LEASE_RENEWAL)
        renewed = delivery.renew_lease(delivery.ALERTS, pk=alert.pk, lease=held, now=timezone.now())
        assert renewed == timezone.now() + delivery.DELIVERY_LEASE
        assert delivery.queue_due_deliveries(now=held + timedelta(seconds=1)) == 0  # renewed: not due
        assert delivery.renew_lease(delivery.ALERTS, pk=alert.pk, lease=held, now=timezone.now()) is None
        assert delivery.take_lease(delivery.ALERTS, pk=alert.pk, lease=held, now=timezone.now()) is None


@pytest.mark.django_db(transaction=True)
def test_the_lease_is_renewed_while_an_attempt_runs(
    synced: None, settings: Any, target: Callable[..., Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Renewed every 0.2 s here (every 3 s in production), so the test waits for less.
    monkeypatch.setattr(delivery, "LEASE_RENEWAL", timedelta(seconds=0.2))
    holding = target(200, hold=True)
    settings.ALERT_WEBHOOK_URL = holding.url
    with time_machine.travel(timezone.now() - timedelta(minutes=61)) as clock:
        alert = stale_alert(clock)

    def attempt() -> None:
        try:
            delivery.deliver_alert(alert_id=alert.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=attempt)
    worker.start()
    try:
        assert holding.arrived.wait(10), "the attempt did not reach the target"
        first = Alert.objects.get(pk=alert.pk).delivery_due_at
        assert first is not None

        def renewed() -> bool:
            lease = Alert.objects.get(pk=alert.pk).delivery_due_at
            return lease is not None and lease > first

        assert wait_for(renewed, 10), "never renewed"
    finally:
        holding.release()
        worker.join(30)
    alert.refresh_from_db()
    assert (alert.deliveries["webhook"]["state"], alert.deliveries["webhook"]["attempts"]) == ("delivered", 1)
    assert alert.delivery_due_at is None and len(holding.requests) == 1
