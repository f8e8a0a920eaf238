"""Delivering alerts: a log line always, a webhook and email when configured; retried with
backoff, recorded per notifier on the alert, never lost and never blocking a sweep."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone
from kombu.exceptions import OperationalError

from audit import alerts
from audit import delivery as alert_delivery
from audit.models import Alert
from controlplane.celery import app
from presets import services
from worker import tasks

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


@pytest.fixture
def queued() -> Any:
    """The delivery tasks the code under test queued on the (in-memory) broker: a function
    returning the alert ids of the messages taken off the queue so far."""
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery")
        queue.clear()

        def take() -> list[int]:
            ids = []
            while len(queue):
                message = queue.get(timeout=1)
                assert message.headers["task"] == "worker.tasks.deliver_alert"
                ids.append(message.decode()[0][0])
                message.ack()
            return ids

        yield take
        queue.clear()


@pytest.fixture
def refused_url() -> str:
    """A local URL where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/alerts"


def stale_alert(clock: Any) -> Alert:
    """Pin chat at T0 (alice) and sweep 61 minutes later: one stale_pin alert, v2."""
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7 vendor_a returns garbage")
    clock.shift(timedelta(minutes=61))
    assert alerts.sweep_stale_pins().raised == 1
    return Alert.objects.get(kind="stale_pin")


def delivery(alert: Alert, notifier: str) -> dict[str, Any]:
    alert.refresh_from_db()
    return alert.deliveries[notifier]


# --- the webhook -----------------------------------------------------------------------------


def test_the_webhook_receives_the_documented_json(synced, settings, webhook) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.PUBLIC_BASE_URL = "https://cp.example.com/"
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        assert alert_delivery.deliver_alert(alert_id=alert.pk) is None

    assert webhook.bodies == [
        {
            "id": alert.pk,
            "kind": "stale_pin",
            "chain": "chat",
            "environment": "production",
            "version": 2,
            "preset": "pin_secondary",
            "actor": "alice",
            "reason": "INC-7 vendor_a returns garbage",
            "pin_version": 2,
            "pinned_by": "alice",
            "pinned_at": "2026-11-29T02:00:00Z",
            "expires_at": "2026-11-29T06:00:00Z",
            "age_seconds": 3660,
            "age": "1 h 1 min",
            "subject": "",
            "message": alert.message,
            "url": "https://cp.example.com/chains/chat/",
            "created_at": "2026-11-29T03:01:00Z",
            "resolved_at": None,
            "resolution": "",
        }
    ]
    assert delivery(alert, "webhook") == {
        "state": "delivered",
        "attempts": 1,
        "last_error": "",
        "delivered_at": "2026-11-29T03:01:00Z",
    }
    assert alert.delivery_due_at is None


def test_a_pin_expired_alert_names_the_pin_and_the_revert(synced, settings, webhook) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    with time_machine.travel(T0, tick=False) as clock:
        services.select_preset(
            chain="chat",
            preset="local_only",
            actor="alice",
            reason="INC-9 both vendors down",
            expires_at=timedelta(minutes=30),
        )
        clock.shift(timedelta(minutes=31))
        services.expire_pins()
        alert_delivery.deliver_alert(alert_id=Alert.objects.get().pk)

    [body] = webhook.bodies
    assert {
        key: body[key]
        for key in ("kind", "chain", "version", "preset", "actor", "pin_version", "pinned_by", "expires_at", "age")
    } == {
        "kind": "pin_expired",
        "chain": "chat",
        "version": 3,
        "preset": "local_only",
        "actor": "system:expiry",
        "pin_version": 2,
        "pinned_by": "alice",
        "expires_at": "2026-11-29T02:30:00Z",
        "age": "30 min",
    }
    assert "INC-9" in body["reason"] and "local_only" in body["reason"]
    assert body["url"] == "http://localhost:8000/chains/chat/"


def test_a_webhook_answering_500_is_retried_with_exponential_backoff_and_jitter(synced, settings, webhook) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.ALERT_DELIVERY_BACKOFF_SECONDS = 10
    webhook.answers = [500, 503]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)

        first = alert_delivery.deliver_alert(alert_id=alert.pk)
        assert 5 <= first <= 10
        assert delivery(alert, "webhook") == {
            "state": "pending",
            "attempts": 1,
            "delivered_at": None,
            "last_error": "webhook answered HTTP 500 Internal Server Error",
        }
        # A sweep leaves it to the task that will retry it: the lease covers the backoff.
        assert alert.delivery_due_at == timezone.now() + timedelta(seconds=first) + alert_delivery.DELIVERY_LEASE
        assert alert_delivery.queue_due_deliveries() == 0

        clock.shift(timedelta(seconds=first))
        second = alert_delivery.deliver_alert(alert_id=alert.pk)
        assert 10 <= second <= 20
        assert delivery(alert, "webhook")["attempts"] == 2

        clock.shift(timedelta(seconds=second))
        assert alert_delivery.deliver_alert(alert_id=alert.pk) is None

    assert len(webhook.bodies) == 3
    record = delivery(alert, "webhook")
    assert (record["state"], record["attempts"], record["last_error"]) == ("delivered", 3, "")
    assert record["delivered_at"] is not None and alert.delivery_due_at is None


def test_the_backoff_doubles_up_to_a_cap_with_jitter(settings) -> None:
    settings.ALERT_DELIVERY_BACKOFF_SECONDS = 10
    for attempts, step in [(1, 10), (2, 20), (3, 40), (7, 640), (8, 900), (30, 900)]:
        delays = {alert_delivery.backoff_seconds(attempts=attempts) for _ in range(50)}
        assert all(step / 2 <= delay <= step for delay in delays)
        assert len(delays) > 1  # jittered


def test_the_task_retries_a_refused_webhook_until_it_gives_up_and_the_alert_keeps_its_state(
    synced, settings, refused_url
) -> None:
    settings.ALERT_WEBHOOK_URL = refused_url
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 3
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        # Run eagerly: Celery re-runs each retry at once, recording the countdown it was given.
        with mock.patch.object(tasks.deliver_alert, "retry", wraps=tasks.deliver_alert.retry) as retry:
            tasks.deliver_alert.apply(args=[alert.pk])

    countdowns = [call.kwargs["countdown"] for call in retry.call_args_list]
    assert len(countdowns) == 2 and 5 <= countdowns[0] <= 10 and 10 <= countdowns[1] <= 20
    record = delivery(alert, "webhook")
    assert (record["state"], record["attempts"], record["delivered_at"]) == ("failed", 3, None)
    assert "webhook unreachable" in record["last_error"] and "refused" in record["last_error"]
    assert refused_url not in record["last_error"]
    assert alert.is_open and alert.delivery_due_at is None
    assert delivery(alert, "log")["state"] == "delivered"


# --- email and the log line -------------------------------------------------------------------


def test_email_goes_to_every_address_through_django_mail(synced, settings, mailoutbox) -> None:
    settings.ALERT_EMAILS = ["oncall@example.com", "platform@example.com"]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        assert alert_delivery.deliver_alert(alert_id=alert.pk) is None

    [mail] = mailoutbox
    assert mail.to == ["oncall@example.com", "platform@example.com"]
    assert mail.subject == "[stale_pin] chat pinned to pin_secondary for 1 h 1 min"
    assert alert.message in mail.body
    assert "http://localhost:8000/chains/chat/" in mail.body
    assert "reason: INC-7 vendor_a returns garbage" in mail.body
    assert delivery(alert, "email")["state"] == "delivered"
    assert set(alert.deliveries) == {"log", "email"}  # no webhook configured, none planned


def test_a_failing_notifier_does_not_hold_back_the_others(synced, settings, webhook, mailoutbox) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.ALERT_EMAILS = ["oncall@example.com"]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        with mock.patch("audit.notifiers.send_mail", side_effect=ValueError("bad header")):
            assert alert_delivery.deliver_alert(alert_id=alert.pk) is not None
        assert delivery(alert, "webhook")["state"] == "delivered"
        assert delivery(alert, "email")["state"] == "pending"
        assert delivery(alert, "email")["last_error"] == "ValueError: bad header"

        clock.shift(timedelta(minutes=1))
        assert alert_delivery.deliver_alert(alert_id=alert.pk) is None  # only email is tried again
    assert len(webhook.bodies) == 1 and len(mailoutbox) == 1
    assert delivery(alert, "email")["attempts"] == 2


def test_the_log_line_is_written_when_the_alert_commits(synced, caplog, django_capture_on_commit_callbacks) -> None:
    def notifier_lines() -> list[logging.LogRecord]:
        return [record for record in caplog.records if record.name == "audit.notifiers"]

    with time_machine.travel(T0, tick=False) as clock:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        clock.shift(timedelta(minutes=61))
        with caplog.at_level(logging.WARNING, logger="audit.notifiers"):
            with django_capture_on_commit_callbacks(execute=True):
                alerts.sweep_stale_pins()
                assert not notifier_lines()  # nothing is said about an alert that may roll back
    [record] = notifier_lines()
    assert record.getMessage().startswith("alert stale_pin on chat v2: chat has served pin pin_secondary for 1 h 1 min")


# --- queuing deliveries: the broker ------------------------------------------------------------


def test_a_new_alert_is_queued_for_delivery_when_it_commits(
    synced, settings, webhook, queued, django_capture_on_commit_callbacks
) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    with time_machine.travel(T0, tick=False) as clock:
        with django_capture_on_commit_callbacks(execute=True):
            alert = stale_alert(clock)
        assert queued() == [alert.pk]
        alert.refresh_from_db()
        assert alert.delivery_due_at == timezone.now() + alert_delivery.DELIVERY_LEASE
        assert alert_delivery.queue_due_deliveries() == 0  # a task holds it: no second one

        tasks.deliver_alert.apply(args=[alert.pk])  # what the worker runs
    assert [body["id"] for body in webhook.bodies] == [alert.pk]


def test_with_the_broker_down_the_sweep_goes_on_and_a_later_sweep_queues_the_delivery(
    synced, settings, webhook, queued, django_capture_on_commit_callbacks
) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    down = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with time_machine.travel(T0, tick=False) as clock:
        with mock.patch.object(tasks.deliver_alert, "apply_async", side_effect=down):
            with django_capture_on_commit_callbacks(execute=True):
                alert = stale_alert(clock)  # queuing at commit fails: no error
            assert tasks.alert_stale_pins() == 0  # the sweep's own re-queue fails too: no error
        alert.refresh_from_db()
        assert alert.delivery_due_at == timezone.now()  # still due
        assert delivery(alert, "webhook") == {"state": "pending", "attempts": 0, "last_error": "", "delivered_at": None}
        assert queued() == []

        clock.shift(timedelta(minutes=1))
        assert tasks.alert_stale_pins() == 0  # the broker is back
        assert queued() == [alert.pk]


def test_a_lost_delivery_task_is_queued_again_once_its_lease_runs_out(
    synced, settings, webhook, queued, django_capture_on_commit_callbacks
) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    with time_machine.travel(T0, tick=False) as clock:
        with django_capture_on_commit_callbacks(execute=True):
            alert = stale_alert(clock)
        assert queued() == [alert.pk]  # ...and the worker holding it dies
        clock.shift(alert_delivery.DELIVERY_LEASE - timedelta(seconds=1))
        assert alert_delivery.queue_due_deliveries() == 0
        clock.shift(timedelta(seconds=1))
        assert alert_delivery.queue_due_deliveries() == 1
        assert queued() == [alert.pk]


def test_the_cron_command_delivers_due_alerts_itself(synced, settings, webhook) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    out = StringIO()
    with time_machine.travel(T0, tick=False) as clock:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        clock.shift(timedelta(minutes=61))
        call_command("alert_stale_pins", stdout=out)
        call_command("alert_stale_pins", stdout=out)
    assert out.getvalue().splitlines() == [
        "raised 1 stale-pin alert(s), resolved 0, attempted delivery of 1",
        "raised 0 stale-pin alert(s), resolved 0, attempted delivery of 0",
    ]
    assert [body["kind"] for body in webhook.bodies] == ["stale_pin"]


@pytest.mark.postgres
def test_an_unreachable_broker_does_not_fail_the_expiry_and_the_alert_stays_due(
    synced, subprocess_env, webhook, queued
) -> None:
    with time_machine.travel(timezone.now() - timedelta(hours=1)):
        services.select_preset(
            chain="chat", preset="pin_secondary", actor="alice", reason="INC-7", expires_at=timedelta(minutes=10)
        )
    env = subprocess_env | {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "ALERT_WEBHOOK_URL": webhook.url}

    done = subprocess.run(
        [sys.executable, "manage.py", "expire_pins"],
        env=env,
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (done.returncode, done.stdout) == (0, "reverted 1 expired pin(s)\n"), done.stderr
    assert "could not queue delivery" in done.stderr
    alert = Alert.objects.get(kind="pin_expired")
    assert alert.delivery_due_at <= timezone.now()
    assert alert.deliveries["webhook"]["state"] == "pending"
    assert alert_delivery.queue_due_deliveries() == 1
    assert queued() == [alert.pk]
