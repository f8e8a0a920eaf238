"""Change notifications: every change and every alert raised and resolved go to the signed
webhook, Slack, PagerDuty Events v2 and email, each checked against a local HTTP server (or
Django's locmem mail); retried with backoff, never failing the change; shown in the API and
on the alerts page (docs/notifications.md)."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from audit import actions, alerts, delivery, provider_alerts
from audit.actions import deep_link
from audit.models import Alert, Notification
from controlplane.celery import app
from presets import plans, services
from presets.models import Selection
from tests import settings_env
from tests.notify_targets import BASE, ROUTING_KEY, SECRET
from tests.servers import free_port, wait_for
from tests.test_provider_alerts import report as report_health

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
REASON = "INC-7 vendor_a returns garbage"
TASK = "worker.tasks.deliver_notification"


@pytest.fixture
def taken() -> Iterator[Callable[[], list[tuple[str, int]]]]:
    """The delivery tasks queued on the (in-memory) broker so far: (task name, row id)."""
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery")
        queue.clear()

        def take() -> list[tuple[str, int]]:
            messages = []
            while len(queue):
                message = queue.get(timeout=1)
                messages.append((message.headers["task"], message.decode()[0][0]))
                message.ack()
            return messages

        yield take
        queue.clear()


def verify(secret: str, headers: Any, body: bytes, tolerance: int = 300) -> bool:
    """The receiver's check, as docs/notifications.md ("Verifying the signature") says to write
    it."""
    timestamp = headers["X-Controlplane-Timestamp"]
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Controlplane-Signature"], "v1=" + expected)


# --- making changes and alerts --------------------------------------------------------------------


def pin(preset: str = "pin_secondary", **kwargs: Any) -> Selection:
    return services.select_preset(chain="chat", preset=preset, actor="alice", reason=REASON, **kwargs)


def stale_alert(clock: Any) -> Alert:
    """Pin chat (v2) and sweep 61 minutes later: its stale_pin alert, open."""
    pin()
    clock.shift(timedelta(minutes=61))
    assert alerts.sweep_stale_pins().raised == 1
    return Alert.objects.get(kind="stale_pin")


def deliver_notifications() -> int:
    """One attempt at every notification that has a delivery pending, as a worker would."""
    due = Notification.objects.filter(delivery_due_at__isnull=False).order_by("id")
    ids = list(due.values_list("id", flat=True))
    for notification_id in ids:
        delivery.deliver_notification(notification_id=notification_id)
    return len(ids)


def record(row: Alert | Notification, target: str) -> dict[str, Any]:
    row.refresh_from_db()
    return row.deliveries[target]


# --- Slack ------------------------------------------------------------------------------------------


def test_a_select_goes_to_slack_naming_chain_preset_who_why_expiry_and_link(synced, settings, capture) -> None:
    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False):
        pin()
        assert deliver_notifications() == 1

    [request] = slack.requests
    assert request.headers["Content-Type"] == "application/json"
    extend, revert = actions.for_change(Notification.objects.get().details, at=T0)
    assert request.json == {
        "text": "*alice selected pin_secondary on chat (v2)*\n"
        "Why: INC-7 vendor_a returns garbage\n"
        "Expiry: pinned until 2026-11-29 06:00 UTC\n"
        "<https://cp.example.com/chains/chat/|Open chat on the control plane>",
        "unfurl_links": False,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": request.json["text"]}},
            {
                "type": "actions",
                "block_id": "controlplane.actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Extend 1 h"},
                        "action_id": "act.extend",
                        "url": deep_link(extend),
                    },
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Revert to default"},
                        "action_id": "act.revert",
                        "url": deep_link(revert),
                        "style": "danger",
                    },
                ],
            },
        ],
    }
    assert record(Notification.objects.get(), "slack") == {
        "state": "delivered",
        "attempts": 1,
        "last_error": "",
        "delivered_at": "2026-11-29T02:00:00Z",
    }


def test_slack_shows_a_reason_as_written_not_as_a_mention_or_a_link(synced, settings, capture) -> None:
    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="<!channel> see <http://x|y> & z"
    )
    deliver_notifications()
    assert "Why: &lt;!channel&gt; see &lt;http://x|y&gt; &amp; z\n" in slack.requests[0].json["text"]


def test_every_kind_of_change_is_told_in_words(db, example_file, settings, capture) -> None:
    from presets.presets_file import load_presets_file
    from presets.providers import get_registry

    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    with time_machine.travel(T0, tick=False) as clock:
        services.sync_presets(presets_file=load_presets_file(example_file, registry=get_registry()))
        pin()
        services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="alice", reason="INC-7 still open")
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        services.restore(chain="chat", version=4, actor="carol", reason="INC-7 is back")
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed again")
        pin("local_only", expires_at=timedelta(minutes=30))
        clock.shift(timedelta(minutes=31))
        assert services.expire_pins() == 1
        services.raise_epoch(actor="dave", reason="restored the database")  # not a change of what is served
        deliver_notifications()

    heads = [r.json["text"].split("\n")[0] for r in slack.requests if "chat" in r.json["text"].split("\n")[0]]
    assert heads == [
        "*the presets file was synced: chat serves normal (v1)*",
        "*alice selected pin_secondary on chat (v2)*",
        "*alice changed the expiry of the pin pin_secondary on chat (v3)*",
        "*bob reverted chat to its default normal (v4)*",
        "*carol restored pin_secondary on chat (v5)*",
        "*bob reverted chat to its default normal (v6)*",
        "*alice selected local_only on chat (v7)*",
        "*the pin local_only on chat expired; it serves its default normal again (v8)*",
    ]
    assert Notification.objects.filter(kind="change", chain__name="chat").count() == 8  # none for the epoch


def test_alerts_go_to_slack_with_their_title_and_a_link_raised_and_resolved(synced, settings, capture) -> None:
    slack = capture()
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        settings.SLACK_WEBHOOK_URL = slack.url()  # from here on: the pin's change is not told
        alert = Alert.objects.get(pk=alert.pk)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        alerts.sweep_stale_pins()
        # The alert was raised before Slack was set up: only its resolution (and the revert) go.
        assert set(alert.deliveries) == {"log"}
        deliver_notifications()

    texts = [r.json["text"] for r in slack.requests]
    assert texts[0].startswith("*bob reverted chat to its default normal (v3)*")
    assert texts[1] == (
        ":white_check_mark: *Resolved: chat pinned to pin_secondary for 1 h 1 min*\n"
        "pin ended by v3: revert to normal by bob: INC-7 fixed\n"
        "<https://cp.example.com/chains/chat/|Open chat on the control plane>"
    )


# --- PagerDuty ------------------------------------------------------------------------------------


def test_pagerduty_triggers_on_an_alert_and_resolves_it_with_the_same_dedup_key(synced, settings, pagerduty) -> None:
    settings.PAGERDUTY_CHANGE_EVENTS = False
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        assert set(alert.deliveries) == {"log", "pagerduty"}
        assert delivery.deliver_alert(alert_id=alert.pk) is None
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        clock.shift(timedelta(minutes=1))
        assert alerts.sweep_stale_pins().resolved == 1
        assert deliver_notifications() == 1  # the resolution; the revert is not sent without change events

    trigger, resolve = pagerduty.requests
    assert (trigger.path, resolve.path) == ("/v2/enqueue", "/v2/enqueue")
    extend, revert = actions.for_alert(alert)
    assert trigger.json == {
        "routing_key": ROUTING_KEY,
        "event_action": "trigger",
        "dedup_key": f"controlplane-alert-{alert.pk}",
        "payload": {
            "summary": f"chat pinned to pin_secondary for 1 h 1 min: {alert.message}",
            "source": "cp.example.com",
            "severity": "warning",
            "timestamp": "2026-11-29T03:01:00Z",
            "component": "chat",
            "class": "stale_pin",
            "custom_details": json.loads(json.dumps(alert.to_document())),
        },
        "links": [
            {"href": "https://cp.example.com/chains/chat/", "text": "chat on the control plane"},
            {"href": deep_link(extend), "text": "Extend 1 h on chat (review)"},
            {"href": deep_link(revert), "text": "Revert to default on chat (review)"},
        ],
    }
    assert (extend.kind, extend.version, revert.kind, revert.version) == ("extend", 2, "revert", 2)
    assert resolve.json == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": f"controlplane-alert-{alert.pk}",
    }
    resolution = Notification.objects.get(kind="alert.resolved")
    assert record(resolution, "pagerduty")["state"] == "delivered"


def test_a_suspended_plan_pages_as_a_warning_and_resolves_when_it_is_cancelled(synced, settings, pagerduty) -> None:
    settings.PAGERDUTY_CHANGE_EVENTS = False
    with time_machine.travel(T0, tick=False) as clock:
        planned = plans.plan_pin(
            chain="chat",
            preset="pin_secondary",
            starts_at=T0 + timedelta(hours=1),
            ends_at=T0 + timedelta(hours=2),
            actor="alice",
            reason="CHG-1 vendor_a maintenance",
        )
        pin("drop_vendor_b", expires_at=timedelta(hours=3))  # a person's change after the plan
        clock.shift(timedelta(hours=1, seconds=3))
        assert plans.run_plans().suspended == [planned.pk]
        alert = Alert.objects.get(kind="plan_suspended")
        assert set(alert.deliveries) == {"log", "pagerduty"}
        assert delivery.deliver_alert(alert_id=alert.pk) is None
        plans.cancel_plan(chain="chat", plan=planned.pk, actor="bob", reason="INC-7 needs drop_vendor_b")
        assert deliver_notifications() == 1

    trigger, resolve = pagerduty.requests
    assert trigger.json["payload"]["severity"] == "warning"
    assert trigger.json["payload"]["class"] == "plan_suspended"
    assert trigger.json["payload"]["summary"].startswith(
        "chat: planned pin pin_secondary did not start; start it anyway or cancel it: chat: planned pin #"
    )
    assert "changed by alice" in trigger.json["payload"]["summary"]
    assert resolve.json["event_action"] == "resolve"
    assert resolve.json["dedup_key"] == trigger.json["dedup_key"]


def test_a_missed_plan_is_an_event_that_pages_nobody(synced, settings, pagerduty) -> None:
    settings.PAGERDUTY_CHANGE_EVENTS = False
    with time_machine.travel(T0, tick=False) as clock:
        plans.plan_pin(
            chain="chat",
            preset="pin_secondary",
            starts_at=T0 + timedelta(hours=1),
            ends_at=T0 + timedelta(hours=2),
            actor="alice",
            reason="CHG-1",
        )
        clock.shift(timedelta(hours=3))
        assert len(plans.run_plans().missed) == 1
    missed = Alert.objects.get(kind="plan_missed")
    assert set(missed.deliveries) == {"log"} and not missed.is_open  # an event: PagerDuty is not paged


def test_a_failing_provider_pages_as_an_error_and_resolves_when_it_recovers(
    synced, settings, pagerduty, reader: Client
) -> None:
    settings.PAGERDUTY_CHANGE_EVENTS = False
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False) as clock:
        for n in range(4):
            report_health(reader, f"i{n}", {"served": 5, "server_error": 5})
        provider_alerts.sweep()
        alert = Alert.objects.get(kind="provider_failing")
        assert delivery.deliver_alert(alert_id=alert.pk) is None
        clock.shift(timedelta(minutes=6))  # the failures leave the window
        assert provider_alerts.sweep().resolved == 1
        assert deliver_notifications() == 1

    trigger, resolve = pagerduty.requests
    payload = trigger.json["payload"]
    assert (payload["severity"], payload["class"], payload["component"]) == ("error", "provider_failing", "chat")
    assert payload["summary"] == f"chat: vendor_a/large is failing: {alert.message}"
    assert trigger.json["dedup_key"] == resolve.json["dedup_key"] == f"controlplane-alert-{alert.pk}"
    assert resolve.json["event_action"] == "resolve"


def test_changes_go_to_pagerduty_as_change_events_unless_turned_off(synced, settings, pagerduty) -> None:
    with time_machine.travel(T0, tick=False):
        pin()
        deliver_notifications()
        settings.PAGERDUTY_CHANGE_EVENTS = False
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
    [change] = pagerduty.requests
    assert change.path == "/v2/change/enqueue"
    body = change.json
    assert (body["routing_key"], body["links"][0]["href"]) == (ROUTING_KEY, "https://cp.example.com/chains/chat/")
    assert body["payload"]["summary"] == f"alice selected pin_secondary on chat (v2): {REASON}"
    assert (body["payload"]["timestamp"], body["payload"]["source"]) == ("2026-11-29T02:00:00Z", "cp.example.com")
    assert body["payload"]["custom_details"]["action"] == "select"
    assert Notification.objects.count() == 1  # the revert: no target took it


def test_an_expired_pin_pages_nobody_its_expiry_is_a_change_event(synced, settings, pagerduty) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(minutes=30))
        clock.shift(timedelta(minutes=31))
        services.expire_pins()
    expired = Alert.objects.get(kind="pin_expired")
    assert set(expired.deliveries) == {"log"}
    assert [n.details["action"] for n in Notification.objects.order_by("version")] == ["select", "expire"]


# --- the signed webhook ------------------------------------------------------------------------------


def test_the_webhook_signature_verifies_and_fails_with_a_wrong_secret_an_old_time_or_another_body(
    synced, webhook_target
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        deliver_notifications()
        [request] = webhook_target.requests
        headers, body = request.headers, request.body
        assert headers["X-Controlplane-Timestamp"] == str(int(T0.timestamp()))
        assert headers["X-Controlplane-Signature"].startswith("v1=")

        assert verify(SECRET, headers, body)
        assert not verify(SECRET + "x", headers, body)
        assert not verify(SECRET, headers, body.replace(b"pin_secondary", b"pin_primary"))
        clock.shift(timedelta(seconds=299))
        assert verify(SECRET, headers, body)
        clock.shift(timedelta(seconds=2))  # 5 min and 1 s later: a replay
        assert not verify(SECRET, headers, body)


def test_the_webhook_gets_the_change_as_its_history_entry_under_a_stable_event_id(
    synced, settings, webhook_target, reader: Client
) -> None:
    settings.ALERT_DELIVERY_BACKOFF_SECONDS = 10
    webhook_target.answers = [500]
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        notification = Notification.objects.get()
        retry_in = delivery.deliver_notification(notification_id=notification.pk)
        assert retry_in is not None
        clock.shift(timedelta(seconds=retry_in))
        assert delivery.deliver_notification(notification_id=notification.pk) is None
        first, second = webhook_target.requests
        assert verify(SECRET, second.headers, second.body)  # each attempt is signed anew

    event_id = str(notification.event_id)
    assert first.headers["X-Controlplane-Event-Id"] == second.headers["X-Controlplane-Event-Id"] == event_id
    assert first.headers["X-Controlplane-Event"] == "change"
    assert first.body == second.body
    assert int(second.headers["X-Controlplane-Timestamp"]) - int(first.headers["X-Controlplane-Timestamp"]) == int(
        retry_in
    )
    [history_v2] = [e for e in reader.get("/api/v1/chains/chat/history").json()["entries"] if e["version"] == 2]
    assert first.json == {
        "id": event_id,
        "type": "change",
        "occurred_at": "2026-11-29T02:00:00Z",
        "chain": "chat",
        "environment": "production",
        "version": 2,
        "summary": "alice selected pin_secondary on chat (v2)",
        "url": "https://cp.example.com/chains/chat/",
        "change": history_v2,
        "alert": None,
        "actions": [
            {"kind": "extend", "label": "Extend 1 h", "preset": "", "url": first.json["actions"][0]["url"]},
            {"kind": "revert", "label": "Revert to default", "preset": "", "url": first.json["actions"][1]["url"]},
        ],
    }
    assert all(action["url"].startswith("https://cp.example.com/act/") for action in first.json["actions"])


def test_the_webhook_gets_alerts_raised_and_resolved(synced, webhook_target, reader: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        delivery.deliver_alert(alert_id=alert.pk)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        alerts.sweep_stale_pins()
        deliver_notifications()

    types = [(r.headers["X-Controlplane-Event"], r.json["type"]) for r in webhook_target.requests]
    assert types == [("alert.raised",) * 2, ("change",) * 2, ("change",) * 2, ("alert.resolved",) * 2]
    raised, resolved = webhook_target.requests[0].json, webhook_target.requests[3].json
    assert raised["id"] == alert.raised_event_id and raised["summary"] == "chat pinned to pin_secondary for 1 h 1 min"
    assert (raised["alert"]["id"], raised["alert"]["resolved_at"], raised["change"]) == (alert.pk, None, None)
    assert resolved["summary"] == "resolved: chat pinned to pin_secondary for 1 h 1 min"
    assert (resolved["alert"]["id"], resolved["alert"]["resolved_at"]) == (alert.pk, "2026-11-29T03:01:00Z")
    assert resolved["alert"]["resolution"] == "pin ended by v3: revert to normal by bob: INC-7 fixed"
    assert resolved["id"] != raised["id"]
    [entry] = reader.get("/api/v1/alerts").json()["alerts"]
    assert entry["deliveries"]["webhook"]["state"] == "delivered"
    assert entry["resolution_deliveries"] == {  # a read token sees no error text (docs/notifications.md)
        "webhook": {"state": "delivered", "attempts": 1, "last_error": None, "delivered_at": "2026-11-29T03:01:00Z"}
    }


def test_the_older_alert_webhook_keeps_its_body_gets_resolutions_and_no_changes(synced, settings, capture) -> None:
    hook = capture()
    settings.ALERT_WEBHOOK_URL = hook.url()
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        delivery.deliver_alert(alert_id=alert.pk)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        alerts.sweep_stale_pins()
        assert deliver_notifications() == 1  # the resolution only

    raised, resolved = hook.requests
    assert raised.json["id"] == resolved.json["id"] == alert.pk  # the alert document, as before
    assert (raised.json["resolved_at"], resolved.json["resolved_at"]) == (None, "2026-11-29T03:01:00Z")
    assert raised.headers["X-Controlplane-Event"] == "alert.raised"
    assert resolved.headers["X-Controlplane-Event"] == "alert.resolved"
    assert "X-Controlplane-Signature" not in raised.headers  # no secret set: unsigned, as before


# --- email ------------------------------------------------------------------------------------------


def test_email_gets_changes_only_with_notify_email_changes(synced, settings, mailoutbox) -> None:
    settings.ALERT_EMAILS = ["oncall@example.com"]
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False):
        pin()
        assert not Notification.objects.exists()  # alerts only, by default
        settings.NOTIFY_EMAIL_CHANGES = True
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        assert deliver_notifications() == 1

    [mail] = mailoutbox
    assert mail.to == ["oncall@example.com"]
    assert mail.subject == "[change] bob reverted chat to its default normal (v3)"
    assert mail.body.startswith(
        "bob reverted chat to its default normal (v3).\nWhy: INC-7 fixed\nExpiry: no expiry (the chain's default)\n"
    )
    assert "previous_preset: pin_secondary\n" in mail.body
    assert mail.body.endswith("Open the chain: https://cp.example.com/chains/chat/\n")


def test_email_tells_an_alert_s_resolution(synced, settings, mailoutbox) -> None:
    settings.ALERT_EMAILS = ["oncall@example.com"]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        delivery.deliver_alert(alert_id=alert.pk)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        alerts.sweep_stale_pins()
        deliver_notifications()
    raised, resolved = mailoutbox
    assert raised.subject == "[stale_pin] chat pinned to pin_secondary for 1 h 1 min"
    assert resolved.subject == "[resolved] [stale_pin] chat pinned to pin_secondary for 1 h 1 min"
    assert resolved.body.startswith("Resolved: pin ended by v3: revert to normal by bob: INC-7 fixed\n")


# --- a target that is down, a broker that is down -------------------------------------------------------


def test_a_target_that_is_down_is_retried_with_backoff_and_the_change_is_committed(
    transactional_db, synced, settings, capture, taken, writer: Client
) -> None:
    port = free_port()  # nothing listens there yet: connections are refused
    settings.SLACK_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
    settings.ALERT_DELIVERY_BACKOFF_SECONDS = 10
    with time_machine.travel(T0, tick=False) as clock:
        response = writer.post(
            "/api/v1/chains/chat/select",
            {"preset": "pin_secondary", "reason": REASON},
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
        assert Selection.objects.get(chain__name="chat").version == 2  # committed: no test transaction here
        notification = Notification.objects.get()
        assert taken() == [(TASK, notification.pk)]  # queued when the change committed

        first = delivery.deliver_notification(notification_id=notification.pk)  # the worker's attempt
        assert first is not None and 5 <= first <= 10
        refused = record(notification, "slack")
        assert (refused["state"], refused["attempts"]) == ("pending", 1)
        assert refused["last_error"].startswith("slack unreachable:") and "refused" in refused["last_error"]
        assert str(port) not in refused["last_error"]

        slack = capture(port=port, answers=[500])  # the target is back, failing once more
        # The worker holding the retry dies; the sweep queues it again once its lease runs out.
        clock.shift(timedelta(seconds=first))
        assert delivery.queue_due_deliveries() == 0
        clock.shift(delivery.DELIVERY_LEASE)
        assert delivery.queue_due_deliveries() == 1
        assert taken() == [(TASK, notification.pk)]
        second = delivery.deliver_notification(notification_id=notification.pk)
        assert second is not None and 10 <= second <= 20
        assert record(notification, "slack")["last_error"] == "slack answered HTTP 500 Internal Server Error"

        clock.shift(timedelta(seconds=second))
        assert delivery.deliver_notification(notification_id=notification.pk) is None

    done = record(notification, "slack")
    assert (done["state"], done["attempts"], done["last_error"]) == ("delivered", 3, "")
    assert notification.delivery_due_at is None
    assert len(slack.requests) == 2 and slack.requests[0].body == slack.requests[1].body


SELECT_SCRIPT = (
    "from presets import services; "
    "print(services.select_preset(chain='chat', preset='pin_secondary', actor='alice', reason='INC-7').version)"
)


def run_select(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A pin selected by another process (as a web process would), with its own environment."""
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", SELECT_SCRIPT],
        env=env,
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.postgres
def test_a_broker_that_is_down_fails_no_change_and_the_sweep_queues_its_notification(
    synced, settings, subprocess_env, capture, taken
) -> None:
    slack = capture()
    done = run_select(subprocess_env | {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "SLACK_WEBHOOK_URL": slack.url()})

    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr
    [line] = [line for line in done.stderr.splitlines() if "could not queue delivery of notification" in line]
    assert "refused" in line  # the broker's refusal, nothing else
    notification = Notification.objects.get()
    assert notification.delivery_due_at <= timezone.now()  # still due
    assert notification.deliveries["slack"]["state"] == "pending"
    settings.SLACK_WEBHOOK_URL = slack.url()
    assert delivery.queue_due_deliveries() == 1  # the next sweep, with the broker back
    assert taken() == [(TASK, notification.pk)]


@pytest.mark.postgres
def test_a_real_worker_delivers_a_change_to_the_signed_webhook(
    synced, subprocess_env, redis_url, start_worker, capture
):
    hook = capture()
    targets = {"NOTIFY_WEBHOOK_URL": hook.url(), "NOTIFY_WEBHOOK_SECRET": SECRET}
    log = start_worker(**targets)
    done = run_select(subprocess_env | {"CELERY_BROKER_URL": redis_url, **targets})
    assert done.returncode == 0, done.stderr

    assert wait_for(lambda: bool(hook.requests), 30), "nothing delivered; worker log:\n" + log.read_text()[-4000:]
    [request] = hook.requests
    assert verify(SECRET, request.headers, request.body)
    body = request.json
    assert (body["type"], body["chain"], body["version"], body["change"]["action"]) == ("change", "chat", 2, "select")

    def delivered() -> bool:
        return Notification.objects.get().deliveries["webhook"]["state"] == "delivered"

    assert wait_for(delivered, 10)


# --- where delivery state is shown: the API and the alerts page -------------------------------------------

NOTIFICATION_FIELDS = {"id", "type", "chain", "version", "created_at", "change", "alert_id", "deliveries"}


def test_get_notifications_lists_changes_newest_first_with_their_delivery(
    synced, settings, capture, reader: Client
) -> None:
    settings.SLACK_WEBHOOK_URL = capture(answers=[500]).url()
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=1))
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        deliver_notifications()  # the select's delivery fails once, the revert's goes through

    response = reader.get("/api/v1/notifications")
    assert (response.status_code, response["Cache-Control"]) == (200, "no-cache")
    entries = response.json()["notifications"]
    assert [(e["type"], e["version"], e["change"]["action"]) for e in entries] == [
        ("change", 3, "revert"),
        ("change", 2, "select"),
    ]
    assert all(set(e) == NOTIFICATION_FIELDS for e in entries)
    revert, select = entries
    assert revert["deliveries"] == {  # a read token sees no error text (docs/notifications.md)
        "slack": {"state": "delivered", "attempts": 1, "last_error": None, "delivered_at": "2026-11-29T02:01:00Z"}
    }
    assert select["deliveries"]["slack"] == {
        "state": "pending",
        "attempts": 1,
        "last_error": None,
        "delivered_at": None,
    }
    assert select["id"] == str(Notification.objects.get(version=2).event_id)
    assert (select["created_at"], select["alert_id"]) == ("2026-11-29T02:00:00Z", None)
    [history_v2] = [e for e in reader.get("/api/v1/chains/chat/history").json()["entries"] if e["version"] == 2]
    assert select["change"] == history_v2

    assert reader.get("/api/v1/notifications?type=alert.resolved").json() == {"notifications": []}
    assert reader.get("/api/v1/notifications?chain=incident-summary").json() == {"notifications": []}
    assert [e["version"] for e in reader.get("/api/v1/notifications?limit=1&type=change").json()["notifications"]] == [
        3
    ]


@pytest.mark.parametrize(
    "query,status,start",
    [
        ("type=nope", 400, "type: 'nope' is not a notification type: use change or alert.resolved"),
        ("limit=0", 400, "limit: must be 1..500"),
        ("limit=many", 400, "limit: 'many' is not a whole number"),
        ("chain=nope", 404, "unknown chain 'nope'"),
    ],
    ids=["type", "limit-zero", "limit-text", "unknown-chain"],
)
def test_bad_notification_queries_say_what_is_wrong(synced, reader: Client, query: str, status: int, start: str):
    response = reader.get(f"/api/v1/notifications?{query}")
    assert response.status_code == status
    assert response.json()["error"]["message"].startswith(start)


def test_reading_notifications_needs_a_token_or_a_signed_in_person(synced, client: Client) -> None:
    response = client.get("/api/v1/notifications")
    assert (response.status_code, response.json()["error"]["code"]) == (401, "unauthorized")


def test_the_openapi_schema_documents_the_notification_shape(client: Client) -> None:
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/notifications"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"type", "chain", "limit"}
    listing = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    components = schema["components"]["schemas"]
    items = components[listing.rsplit("/", 1)[1]]["properties"]["notifications"]["items"]["$ref"]
    assert set(components[items.rsplit("/", 1)[1]]["properties"]) == NOTIFICATION_FIELDS
    alert = components["Alert"]["properties"]
    assert alert["resolution_deliveries"]["additionalProperties"]["$ref"].endswith("/AlertDelivery")


def page_text(client: Client) -> str:
    response = client.get("/alerts/")
    assert response.status_code == 200
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", response.content.decode()))


def test_the_alerts_page_lists_change_notifications_with_their_delivery(synced, settings, capture, oncall) -> None:
    assert "Changes are told to nobody: set NOTIFY_WEBHOOK_URL, SLACK_WEBHOOK_URL" in page_text(oncall)
    settings.SLACK_WEBHOOK_URL = capture(answers=[500]).url()
    assert "Change notifications No change notified yet." in page_text(oncall)
    with time_machine.travel(T0, tick=False):
        pin()
        deliver_notifications()
        text = page_text(oncall)
    assert (
        "select on chat v2 alice selected pin_secondary on chat (v2), pinned until 2026-11-29 06:00 UTC: "
        f"{REASON} Changed 02:00 UTC Slack: pending, attempt 1 failed: slack answered HTTP 500 Internal Server "
        "Error; next try at about 02:00 UTC"
    ) in text


def test_the_alerts_page_shows_where_a_resolution_was_sent(synced, settings, capture, oncall) -> None:
    settings.SLACK_WEBHOOK_URL = capture().url()
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
        alerts.sweep_stale_pins()
        deliver_notifications()
        text = page_text(oncall)
    assert "Slack: pending, not tried yet Its resolution was sent too: Slack: delivered 03:01 UTC" in text


# --- the settings' refusals --------------------------------------------------------------------------------

NOTIFY_PREFIXES = ("NOTIFY_", "SLACK_", "PAGERDUTY_", "ALERT_WEBHOOK_URL", "ALERT_EMAILS")


load_settings = functools.partial(settings_env.load_settings, clear=NOTIFY_PREFIXES)


HOOK = "https://hooks.example.com/controlplane"


@pytest.mark.parametrize(
    "environment,message",
    [
        ({"NOTIFY_WEBHOOK_URL": HOOK}, "NOTIFY_WEBHOOK_SECRET must be set, at least 32 characters"),
        ({"NOTIFY_WEBHOOK_URL": HOOK, "NOTIFY_WEBHOOK_SECRET": "short"}, "NOTIFY_WEBHOOK_SECRET must be set"),
        (
            {"NOTIFY_WEBHOOK_URL": HOOK, "NOTIFY_WEBHOOK_SECRET": SECRET, "ALERT_WEBHOOK_URL": HOOK},
            "NOTIFY_WEBHOOK_URL and ALERT_WEBHOOK_URL are both set",
        ),
        (
            {"SLACK_WEBHOOK_URL": "hooks.slack.com/services/T0/B0/x"},
            "SLACK_WEBHOOK_URL='hooks.slack.com/services/T0/B0/x' must be an http:// or https:// URL",
        ),
        ({"PAGERDUTY_CHANGE_EVENTS": "maybe"}, "PAGERDUTY_CHANGE_EVENTS='maybe' is not a boolean"),
        ({"NOTIFY_EMAILS": "oncall"}, "NOTIFY_EMAILS: 'oncall' is not an email address"),
        ({"NOTIFY_EMAILS": "a@example.com", "ALERT_EMAILS": "b@example.com"}, "NOTIFY_EMAILS and ALERT_EMAILS"),
    ],
    ids=["no-secret", "short-secret", "two-webhooks", "slack-url", "change-events", "email", "two-lists"],
)
def test_bad_notification_settings_stop_the_process_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(monkeypatch, environment)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_good_notification_settings_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_settings(
        monkeypatch,
        {
            "NOTIFY_WEBHOOK_URL": HOOK,
            "NOTIFY_WEBHOOK_SECRET": SECRET,
            "NOTIFY_EMAILS": "oncall@example.com, platform@example.com",
            "PAGERDUTY_ROUTING_KEY": ROUTING_KEY,
        },
    )
    assert loaded["ALERT_EMAILS"] == ["oncall@example.com", "platform@example.com"]
    assert (loaded["PAGERDUTY_EVENTS_URL"], loaded["PAGERDUTY_CHANGE_EVENTS"]) == (
        "https://events.pagerduty.com/v2/enqueue",
        True,
    )
