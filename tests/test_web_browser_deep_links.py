"""Deep links in a real Chromium on a phone (390x844): the link each notifier (Slack, PagerDuty,
email, the webhook) carries for an alert opens the right review, prefilled, in one tap (after
signing in when needed); confirming makes the change as the person signed in; a viewer who
follows one is refused and nothing changes. Each review without horizontal scrolling or any
axe violation (docs/on-call.md, "Acting from the alert")."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from audit import delivery
from audit.alerts import raise_alert
from audit.models import Alert, AlertKind
from presets import services
from presets.models import Chain
from tests.browser import PHONE, reads_well, sign_in_on_the_page
from tests.notify_targets import ROUTING_KEY, SECRET, Capture

REASON = "INC-7 vendor_a returns garbage"


@pytest.fixture
def targets(settings: Any, live_server: Any, mailoutbox: list[Any]) -> dict[str, Capture]:
    """Every notifier set up, sending to local receivers; links point at the live server."""
    servers = {name: Capture() for name in ("slack", "pagerduty", "webhook")}
    settings.PUBLIC_BASE_URL = live_server.url
    settings.SLACK_WEBHOOK_URL = servers["slack"].url()
    settings.PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.PAGERDUTY_EVENTS_URL = servers["pagerduty"].url("/v2/enqueue")
    settings.PAGERDUTY_CHANGE_EVENTS = False
    settings.NOTIFY_WEBHOOK_URL = servers["webhook"].url()
    settings.NOTIFY_WEBHOOK_SECRET = SECRET
    settings.ALERT_EMAILS = ["oncall@example.com"]
    yield servers
    for server in servers.values():
        server.close()


def raised(kind: str, **details: Any) -> Alert:
    """An alert on chat at its live version, delivered to every notifier."""
    live = services.revert_expired_and_read(chain="chat")
    alert, _ = raise_alert(
        kind=kind,
        chain=Chain.objects.get(name="chat"),
        version=live.version,
        message="vendor_a/large on chat: 48 % errors" if kind != AlertKind.STALE_PIN else "pinned for 1 h 1 min",
        details=details,
        now=timezone.now(),
        subject="vendor_a/large" if kind != AlertKind.STALE_PIN else "",
    )
    assert delivery.deliver_alert(alert_id=alert.pk) is None
    return alert


def links_by_notifier(targets: dict[str, Capture], mailoutbox: list[Any], label: str) -> dict[str, str]:
    """The link labelled ``label`` in the last message each notifier got, as a path."""
    slack = targets["slack"].requests[-1].json
    [button] = [b for b in slack["blocks"][1]["elements"] if b["text"]["text"] == label]
    [pagerduty] = [
        link["href"] for link in targets["pagerduty"].requests[-1].json["links"] if link["text"].startswith(label)
    ]
    [webhook] = [a["url"] for a in targets["webhook"].requests[-1].json["actions"] if a["label"] == label]
    [mail] = re.findall(rf"^{re.escape(label)}: (\S+)$", mailoutbox[-1].body, re.MULTILINE)
    links = {"slack": button["url"], "pagerduty": pagerduty, "webhook": webhook, "email": mail}
    return {name: urlsplit(url).path for name, url in links.items()}


def stale_pin_links(targets: dict[str, Capture], mailoutbox: list[Any], label: str) -> dict[str, str]:
    """chat pinned (v2) and its stale_pin alert delivered: each notifier's link labelled ``label``."""
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON)
    raised(AlertKind.STALE_PIN, preset="pin_secondary", age_seconds=3660)
    return links_by_notifier(targets, mailoutbox, label)


def test_each_notifier_s_link_opens_the_prefilled_review_and_confirming_extends_the_pin(
    open_page: Callable[..., Any], alice: User, targets: dict[str, Capture], mailoutbox: list[Any]
) -> None:
    links = stale_pin_links(targets, mailoutbox, "Extend 1 h")
    assert len(set(links.values())) == 1  # the same action, so the same address

    page = open_page(None, links["slack"], color_scheme="dark", viewport=PHONE)
    sign_in_on_the_page(page)  # one tap, then signing in, lands on the review
    page.wait_for_url(re.compile(r"/chains/chat/extend\?review="))
    assert page.get_by_role("heading", level=1).inner_text() == "Extend the pin of pin_secondary on chat?"
    assert page.get_by_label("Reason").input_value() == "Extended chat still pinned to pin_secondary after 1 h 1 min"
    assert "Nothing has changed yet" in page.locator(".messages").inner_text()
    reads_well(page, "deep-link-extend")
    for name in ("pagerduty", "webhook", "email"):
        other = open_page(alice, links[name], color_scheme="dark", viewport=PHONE)
        other.wait_for_url(re.compile(r"/chains/chat/extend\?review="))
        assert other.get_by_role("heading", level=1).inner_text() == "Extend the pin of pin_secondary on chat?"
    assert services.revert_expired_and_read(chain="chat").version == 2  # opening them changed nothing

    page.get_by_role("button", name=re.compile(r"^Extend until")).click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    live = services.revert_expired_and_read(chain="chat")
    assert (live.version, live.updated_by, live.action) == (3, "alice", "extend")


def test_a_failing_provider_s_link_opens_the_suggested_pin_s_review(
    open_page: Callable[..., Any], alice: User, targets: dict[str, Capture], mailoutbox: list[Any]
) -> None:
    raised(AlertKind.PROVIDER_FAILING, suggested={"preset": "pin_secondary", "reason": "its head 0.0 % errors"})
    links = links_by_notifier(targets, mailoutbox, "Pin pin_secondary")
    page = open_page(alice, links["pagerduty"], color_scheme="dark", viewport=PHONE)
    page.wait_for_url(re.compile(r"/chains/chat/select\?review="))
    assert page.get_by_role("heading", level=1).inner_text() == "Pin pin_secondary on chat?"
    assert page.get_by_label("Reason").input_value().startswith("vendor_a/large failing on chat; pin_secondary's")
    reads_well(page, "deep-link-pin")


def test_a_pin_link_to_the_preset_live_already_opens_the_review_of_extending_that_pin(
    open_page: Callable[..., Any], alice: User, targets: dict[str, Capture], mailoutbox: list[Any]
) -> None:
    raised(AlertKind.PROVIDER_FAILING, suggested={"preset": "pin_secondary", "reason": "its head 0.0 % errors"})
    links = links_by_notifier(targets, mailoutbox, "Pin pin_secondary")
    services.select_preset(chain="chat", preset="pin_secondary", actor="bob", reason="INC-7 pinned from Slack")
    page = open_page(alice, links["email"], color_scheme="dark", viewport=PHONE)
    page.wait_for_url(re.compile(r"/chains/chat/extend\?review="))
    assert page.get_by_role("heading", level=1).inner_text() == "Extend the pin of pin_secondary on chat?"
    assert "pinning it again would change nothing" in page.locator(".messages").inner_text()
    assert page.get_by_role("button", name=re.compile("^Pin ")).count() == 0  # no button that can only fail
    assert page.get_by_role("button", name=re.compile("^Extend until")).is_visible()
    reads_well(page, "deep-link-pin-live")
    assert services.revert_expired_and_read(chain="chat").version == 2  # opening it changed nothing


def test_a_viewer_following_a_link_sees_a_refusal_and_nothing_changes(
    open_page: Callable[..., Any], bob: User, targets: dict[str, Capture], mailoutbox: list[Any]
) -> None:
    links = stale_pin_links(targets, mailoutbox, "Revert to default")
    page = open_page(bob, links["email"], color_scheme="dark", viewport=PHONE)
    assert "on-call role. Nothing was changed." in page.locator("main").inner_text()
    assert page.get_by_role("button", name=re.compile("Revert")).count() == 0
    reads_well(page, "deep-link-refused")
    assert services.revert_expired_and_read(chain="chat").version == 2
