"""The alerts page and the CSRF failure page in a real Chromium: on a phone and a laptop, in the
light and the dark theme, without horizontal scrolling or serious accessibility violations."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from audit import alerts
from audit import delivery as alert_delivery
from audit.models import Alert
from presets import services
from presets.models import Selection
from tests.browser import LAPTOP, PHONE, SCREENS, axe_violations, reads_well, sign_in_on_the_page

REASON = "INC-4411 vendor_a returns 200s with garbage"
THEMES = ["light", "dark"]


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def fits_a_phone_and_has_no_serious_violations(page: Any) -> None:
    """No horizontal scroll at 390 px; no serious or critical axe violation at 390 and 1280 px."""
    page.set_viewport_size(PHONE)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{page.url} is {width}px wide"
    found = {"phone": axe_violations(page)}
    page.set_viewport_size(LAPTOP)
    found["laptop"] = axe_violations(page)
    assert {size: violations for size, violations in found.items() if violations} == {}


def raise_alerts(settings: Any, webhook: Any) -> Alert:
    """An open stale pin on incident-summary whose webhook delivery failed once (email
    delivered); chat's pin expired (an event) and its stale alert resolved. Returns the open one."""
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.ALERT_EMAILS = ["oncall@example.com"]
    webhook.answers = [500]
    now = timezone.now()
    with time_machine.travel(now - timedelta(minutes=95), tick=False):
        services.select_preset(chain="incident-summary", preset="local_only", actor="alice", reason=REASON)
        services.select_preset(
            chain="chat", preset="pin_secondary", actor="carol", reason=REASON, expires_at=timedelta(minutes=90)
        )
    with time_machine.travel(now - timedelta(minutes=30), tick=False):
        assert alerts.sweep_stale_pins().raised == 2
    assert services.expire_pins() == 1
    stale = Alert.objects.get(kind="stale_pin", chain__name="incident-summary")
    alert_delivery.deliver_alert(alert_id=stale.pk)
    return stale


@pytest.mark.parametrize("color_scheme", THEMES)
def test_the_alerts_page_reads_well_on_a_phone_in_both_themes(
    open_page: Callable[..., Any], alice: User, settings: Any, webhook: Any, color_scheme: str
) -> None:
    raise_alerts(settings, webhook)
    page = open_page(alice, "/alerts/", color_scheme=color_scheme, viewport=PHONE)

    nav_link = page.get_by_role("link", name="Alerts, 1 open", exact=True)
    assert nav_link.inner_text().split() == ["Alerts", "(1)"] and nav_link.get_attribute("aria-current") == "page"
    assert nav_link.bounding_box()["height"] < 50, "the count wrapped under the word"
    first, second, third = (item.inner_text() for item in page.locator(".alert-item").all())
    assert first.startswith("OPEN") and "incident-summary" in first
    assert "Webhook: pending, attempt 1 failed: webhook answered HTTP 500" in first
    assert "Email: delivered" in first
    assert second.startswith("EVENT") and "pin_expired" in second
    assert third.startswith("RESOLVED") and "stale_pin" in third
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", page.locator("main").inner_text()), "an ISO time is shown"
    fits_a_phone_and_has_no_serious_violations(page)

    page.locator(".alert-item").first.get_by_role("link", name="incident-summary", exact=True).click()
    page.wait_for_url(re.compile(r"/chains/incident-summary/$"))


def test_an_open_stale_pin_offers_extend_and_revert_on_a_phone_and_revert_ends_the_pin(
    open_page: Callable[..., Any], alice: User, bob: User
) -> None:
    now = timezone.now()
    with time_machine.travel(now - timedelta(minutes=95), tick=False):
        services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason=REASON)
    with time_machine.travel(now - timedelta(minutes=30), tick=False):
        assert alerts.sweep_stale_pins().raised == 1
    size, scheme = SCREENS["390x844-dark"]
    page = open_page(alice, "/alerts/", color_scheme=scheme, viewport=size)

    item = page.locator(".alert-item").first
    offered = item.locator(".alert-actions").get_by_role("link")
    assert offered.all_inner_texts() == ["Extend 1 h on chat…", "Revert to default on chat…"]  # as Slack's buttons
    reads_well(page, "alerts-stale-pin-actions")
    viewer = open_page(bob, "/alerts/", color_scheme=scheme, viewport=size)
    assert viewer.locator(".alert-actions").count() == 0  # a viewer is offered no change

    item.get_by_role("link", name="Revert to default on chat…").click()
    page.wait_for_url(re.compile(r"/chains/chat/revert\?review="))
    assert page.get_by_role("heading", level=1).inner_text() == "Revert chat to its default, normal?"
    assert page.get_by_label("Reason").input_value() == "Reverted chat still pinned to pin_secondary after 1 h 5 min"
    reads_well(page, "alerts-stale-pin-revert-review")
    assert live().version == 2  # opening the review changed nothing
    page.get_by_role("button", name="Revert to normal").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert (live().version, live().preset.name, live().updated_by) == (3, "normal", "alice")


def sign_out_and_in_again(page: Any) -> None:
    """What a person does in another tab of the same browser."""
    page.goto("/")
    page.get_by_role("button", name="Sign out").click()
    sign_in_on_the_page(page)
    page.wait_for_url(re.compile(r"/$"))


@pytest.mark.parametrize("color_scheme", THEMES)
def test_confirming_a_change_from_before_signing_in_again_says_nothing_changed_and_leads_back(
    open_page: Callable[..., Any], alice: User, color_scheme: str
) -> None:
    page = open_page(alice, "/chains/chat/", color_scheme=color_scheme, viewport=PHONE)
    page.get_by_role("radio", name="pin_secondary").check()
    page.locator("#id_reason").fill(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    sign_out_and_in_again(page.context.new_page())

    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    assert posted.value.status == 403
    assert page.get_by_role("heading", name="Nothing was changed").is_visible()
    assert "opened before you last signed in" in page.locator("main").inner_text()
    back = page.get_by_role("link", name="Back to chain chat")
    assert back.get_attribute("href") == "/chains/chat/"
    assert (live().version, live().preset.name) == (1, "normal")
    fits_a_phone_and_has_no_serious_violations(page)

    back.click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert page.get_by_role("radio", name="pin_secondary").is_visible()  # ready to try again
