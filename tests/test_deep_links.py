"""Acting from where the page arrives (docs/on-call.md, "Acting from the alert"): every notifier
(Slack, PagerDuty, email, the webhook) carries a deep link per suggested action (pin the
healthiest preset, extend the pin, revert it) that opens that change's review, prefilled.
Links carry no authority: the review and the confirmation check the person's role and the
chain's version; a link the control plane did not sign, or an old one, opens nothing."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import time_machine
from django.test import Client

from audit import actions, alerts, provider_alerts
from audit.models import Alert
from presets import services
from presets.models import Selection
from tests.notify_targets import BASE
from tests.test_change_notifications import T0, deliver_notifications, pin, stale_alert
from tests.test_provider_alerts import report as report_health

LINK = re.compile(r"https://cp\.example\.com(/act/[^/\s|>]+/)")


def path_of(url: str) -> str:
    assert url.startswith(BASE), url
    return urlsplit(url).path


def action_of(url: str) -> actions.Action:
    """The action a deep link carries (its token is the path's second part: /act/<token>/)."""
    return actions.read_link(path_of(url).split("/")[2])


def live() -> Selection:
    return services.revert_expired_and_read(chain="chat")


def review(client: Client, link: str) -> Any:
    """Follow a deep link as the browser does: the redirect to the review, then the review."""
    response = client.get(path_of(link) if link.startswith("http") else link)
    assert response.status_code == 302, response.content
    assert "?review=" in response["Location"]
    return client.get(response["Location"])


def confirm(client: Client, page: Any) -> Any:
    """Press the review's confirm button: the form it shows, as it is."""
    html = page.content.decode()
    action = re.search(r'<form method="post" action="([^"]+)" class="confirm-bar"', html)
    assert action is not None, html
    form = html[action.start() : html.index("</form>", action.start())]
    fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken", None)
    return client.post(action.group(1), fields | {"confirmed": "yes"})  # the confirm button's


# --- each notifier carries the links ----------------------------------------------------------------


def test_a_stale_pin_s_notifiers_each_carry_extend_and_revert_links(
    synced, settings, capture, pagerduty, webhook_target, mailoutbox
) -> None:
    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    settings.ALERT_EMAILS = ["oncall@example.com"]
    settings.PAGERDUTY_CHANGE_EVENTS = False
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        from audit import delivery

        delivery.deliver_alert(alert_id=alert.pk)

    [slack_message] = [r.json for r in slack.requests if "stale_pin" in r.json["text"]]
    buttons = slack_message["blocks"][1]["elements"]
    assert [b["text"]["text"] for b in buttons] == ["Extend 1 h", "Revert to default"]
    [trigger] = [r.json for r in pagerduty.requests if r.json.get("event_action") == "trigger"]
    assert [link["text"] for link in trigger["links"]] == [
        "chat on the control plane",
        "Extend 1 h on chat (review)",
        "Revert to default on chat (review)",
    ]
    [webhook] = [r.json for r in webhook_target.requests if r.json["type"] == "alert.raised"]
    assert [(a["kind"], a["label"]) for a in webhook["actions"]] == [
        ("extend", "Extend 1 h"),
        ("revert", "Revert to default"),
    ]
    [mail] = [m for m in mailoutbox if "stale_pin" in m.subject]
    assert "Extend 1 h: https://cp.example.com/act/" in mail.body
    assert "Revert to default: https://cp.example.com/act/" in mail.body
    # The four carry the same two actions (read while the links are fresh).
    each = (
        [b["url"] for b in buttons],
        [link["href"] for link in trigger["links"][1:]],
        [a["url"] for a in webhook["actions"]],
        [BASE.rstrip("/") + path for path in LINK.findall(mail.body)],
    )
    with time_machine.travel(T0 + timedelta(minutes=62), tick=False):
        for links in each:
            read = [action_of(link) for link in links]
            assert [(a.kind, a.chain, a.version) for a in read] == [("extend", "chat", 2), ("revert", "chat", 2)]


def test_a_failing_provider_s_alert_links_the_healthiest_preset_s_pin(synced, settings, reader, capture) -> None:
    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        for n in range(4):
            report_health(reader, f"i{n}", {"served": 5, "server_error": 5})
        provider_alerts.sweep()
        alert = Alert.objects.get(kind="provider_failing")
        [action] = actions.for_alert(alert)
    assert (action.kind, action.chain, action.version) == ("pin", "chat", 1)
    assert action.preset != "normal"
    assert action.reason.startswith("vendor_a/large failing on chat; ")
    assert action.label == f"Pin {action.preset}"


def test_a_pinning_change_offers_extend_and_revert_and_a_revert_offers_nothing(synced, settings) -> None:
    settings.PUBLIC_BASE_URL = BASE
    settings.SLACK_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # changes are recorded for a target
    pin()
    from audit.models import Notification

    notification = Notification.objects.get()
    offered = actions.for_change(notification.details, at=notification.created_at)
    assert [(a.kind, a.version) for a in offered] == [("extend", 2), ("revert", 2)]
    services.revert_to_default(chain="chat", actor="bob", reason="INC-7 fixed")
    revert = Notification.objects.first()
    assert actions.for_change(revert.details, at=revert.created_at) == []


# --- following a link ----------------------------------------------------------------------------------


def link_for(kind: str, **fields: Any) -> str:
    from django.utils import timezone

    action = actions.Action(kind, "chat", live().version, at=int(timezone.now().timestamp()), **fields)
    return actions.deep_link(action)


def test_an_extend_link_opens_its_review_prefilled_and_confirming_extends_as_the_person(
    synced, settings, oncall: Client
) -> None:
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False):
        pin()
        until = live().expires_at
        page = review(oncall, link_for("extend", minutes=60, reason="INC-7 still open"))
        html = page.content.decode()
        assert page.status_code == 200
        assert "Extend the pin of pin_secondary on chat?" in html
        assert 'value="INC-7 still open"' in html
        assert "Nothing has changed yet" in html
        assert live().version == 2  # opening the link changed nothing
        response = confirm(oncall, page)
        assert response.status_code == 302
        selection = live()
        assert (selection.version, selection.updated_by, selection.reason) == (3, "alice", "INC-7 still open")
        assert selection.expires_at == until + timedelta(hours=1)


def test_a_pin_link_opens_the_pin_s_review_guarded_and_a_revert_link_the_revert_s(
    synced, settings, oncall: Client
) -> None:
    settings.PUBLIC_BASE_URL = BASE
    page = review(oncall, link_for("pin", preset="pin_secondary", minutes=240, reason="vendor_a failing"))
    html = page.content.decode()
    assert "pin_secondary" in html and 'value="vendor_a failing"' in html
    assert confirm(oncall, page).status_code == 302
    selection = live()
    assert (selection.preset.name, selection.updated_by) == ("pin_secondary", "alice")
    from presets.guards import live_guard

    assert live_guard(chain="chat") is not None  # a pin from an alert is guarded

    page = review(oncall, link_for("revert", reason="vendor_a is back"))
    assert "Revert chat to its default, normal?" in page.content.decode()
    assert confirm(oncall, page).status_code == 302
    assert live().is_default


def test_a_pin_link_to_the_preset_live_already_offers_extending_that_pin_not_a_pin_that_would_fail(
    synced, settings, oncall: Client
) -> None:
    settings.PUBLIC_BASE_URL = BASE
    link = link_for("pin", preset="pin_secondary", minutes=240, reason="vendor_a failing")
    pin()  # someone pinned it since the alert: v2, until T0 + 4 h
    until = live().expires_at
    page = review(oncall, link)
    html = re.sub(r"\s+", " ", page.content.decode())
    assert "Extend the pin of pin_secondary on chat?" in html
    assert "pinning it again would change nothing, so here is extending its pin by 4 h instead" in html
    assert "Pin pin_secondary" not in html  # no button that can only be refused
    assert 'value="vendor_a failing"' in html
    assert confirm(oncall, page).status_code == 302
    selection = live()
    assert (selection.version, selection.action, selection.updated_by) == (3, "extend", "alice")
    assert selection.expires_at == until + timedelta(hours=4)


def test_a_pin_link_to_the_default_live_already_says_there_is_nothing_to_pin(synced, settings, oncall: Client) -> None:
    settings.PUBLIC_BASE_URL = BASE
    response = oncall.get(path_of(link_for("pin", preset="normal", minutes=60, reason="x")), follow=True)
    assert response.redirect_chain[-1][0] == "/chains/chat/"
    assert "chat already serves normal, its default (v1 by" in response.content.decode()
    assert "there is nothing to pin" in response.content.decode() and live().version == 1


def test_a_viewer_following_a_link_is_refused_and_nothing_changes(synced, settings, viewer: Client) -> None:
    settings.PUBLIC_BASE_URL = BASE
    pin()
    response = viewer.get(path_of(link_for("revert", reason="x")))
    assert response.status_code == 403
    assert "on-call role. Nothing was changed." in response.content.decode()
    assert live().version == 2


def test_signing_in_first_then_the_review(synced, settings, client: Client, alice) -> None:
    settings.PUBLIC_BASE_URL = BASE
    pin()
    path = path_of(link_for("revert", reason="INC-7 fixed"))
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    signed_in = client.post(response["Location"], {"username": "alice", "password": "alice-pass-123"})
    assert signed_in["Location"] == path  # back to the link once signed in
    page = review(client, path)
    assert "Revert chat to its default, normal?" in page.content.decode()


def test_a_changed_or_foreign_link_opens_nothing(synced, settings, oncall: Client) -> None:
    settings.PUBLIC_BASE_URL = BASE
    pin()
    path = path_of(link_for("revert", reason="INC-7 fixed"))
    token = path.split("/")[2]
    for bad in (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "not-a-link", token.replace(":", ".")):
        response = oncall.get(f"/act/{bad}/", follow=True)
        html = response.content.decode()
        assert response.redirect_chain[0][0] == "/"
        assert "Nothing was prefilled: this link was not made by this control plane" in html
    assert live().version == 2


def test_an_old_link_opens_nothing_and_says_so(synced, settings, oncall: Client) -> None:
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        path = path_of(link_for("revert", reason="INC-7 fixed"))
        clock.shift(timedelta(hours=settings.DEEP_LINK_MAX_AGE_HOURS, seconds=1))
        html = oncall.get(path, follow=True).content.decode()
    assert "Nothing was prefilled: this link is older than 24 hours" in html


def test_a_link_to_a_chain_changed_since_shows_the_conflict_and_confirming_asks_about_what_is_live(
    synced, settings, oncall: Client
) -> None:
    settings.PUBLIC_BASE_URL = BASE
    pin()
    link = link_for("revert", reason="INC-7 fixed")
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="bob", reason="INC-7 still open")
    page = review(oncall, link)
    assert page.status_code == 200
    html = page.content.decode()
    assert "INC-7 still open" in html  # bob's change, shown before anything is confirmed
    assert live().version == 3


def test_a_link_to_an_unknown_chain_is_a_404(db, settings, oncall: Client) -> None:
    settings.PUBLIC_BASE_URL = BASE
    path = path_of(actions.deep_link(actions.Action("revert", "nope", 1, at=int(time.time()))))
    assert oncall.get(path).status_code == 404


@pytest.mark.parametrize(
    "value",
    [None, {}, {"kind": "delete", "chain": "chat", "version": 1}, {"kind": "pin", "chain": "chat", "version": 1}],
)
def test_only_whole_actions_are_read_from_a_value(value: Any) -> None:
    with pytest.raises(ValueError):
        actions.Action.from_value(value)


# --- PagerDuty: changes on the incident's timeline -----------------------------------------------------


def test_a_change_on_a_chain_with_an_open_incident_lands_on_its_timeline(synced, settings, pagerduty) -> None:
    from audit import delivery

    with time_machine.travel(T0, tick=False) as clock:
        pin()
        deliver_notifications()
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        alert = Alert.objects.get(kind="stale_pin")
        assert delivery.deliver_alert(alert_id=alert.pk) is None
        services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="bob", reason="INC-7 still open")
        deliver_notifications()

    paths = [(r.path, r.json.get("event_action")) for r in pagerduty.requests]
    # The pin (before the alert), the alert's trigger, then the extension: its change event and
    # an event under the incident's dedup_key.
    assert paths == [
        ("/v2/change/enqueue", None),
        ("/v2/enqueue", "trigger"),
        ("/v2/change/enqueue", None),
        ("/v2/enqueue", "trigger"),
    ]
    change, timeline = pagerduty.requests[2].json, pagerduty.requests[3].json
    assert change["payload"]["custom_details"]["incident_keys"] == [alert.dedup_key]
    assert timeline["dedup_key"] == alert.dedup_key == pagerduty.requests[1].json["dedup_key"]
    assert timeline["payload"]["custom_details"]["change"] == (
        "bob changed the expiry of the pin pin_secondary on chat (v3): INC-7 still open"
    )
    assert timeline["payload"]["summary"] == pagerduty.requests[1].json["payload"]["summary"]  # not renamed
    # The first change went before any incident was open: no timeline event, no keys.
    assert pagerduty.requests[0].json["payload"]["custom_details"]["incident_keys"] == []


def test_with_the_slack_app_the_buttons_carry_the_action_and_the_links_stay_below(synced, settings, capture) -> None:
    slack = capture()
    settings.SLACK_WEBHOOK_URL = slack.url()
    settings.SLACK_SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
    settings.PUBLIC_BASE_URL = BASE
    with time_machine.travel(T0, tick=False):
        pin()
        deliver_notifications()
        message = slack.requests[0].json
        section, buttons, context = message["blocks"]
        values = [json.loads(button["value"]) for button in buttons["elements"]]
        assert [button["action_id"] for button in buttons["elements"]] == ["act.extend", "act.revert"]
        assert all("url" not in button for button in buttons["elements"])
        assert [actions.Action.from_value(value).kind for value in values] == ["extend", "revert"]
        assert [v["version"] for v in values] == [2, 2]
        links = re.findall(r"<(https://cp\.example\.com/act/[^|]+)\|([^>]+)>", context["elements"][0]["text"])
        assert [(action_of(url).kind, label) for url, label in links] == [
            ("extend", "Extend 1 h"),
            ("revert", "Revert to default"),
        ]
