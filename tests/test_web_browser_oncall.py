"""On-call pages without dead ends, in a real Chromium at 390 px, in both themes: each flow an
on-call engineer found stopping or misleading them, tried again the way they tried it."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from presets import services
from presets.models import Selection
from tests.browser import PHONE, Clicks, sign_in_on_the_page
from tests.health_reports import vendor_a_failing

REASON = "INC-4411 vendor_a returns 200s with garbage"
# The confirm button's background in each theme (the stylesheet's --danger-bg / --primary-bg).
DANGER = {"light": "rgb(180, 35, 24)", "dark": "rgb(255, 138, 128)"}
PRIMARY = {"light": "rgb(11, 87, 208)", "dark": "rgb(138, 180, 248)"}


@pytest.fixture(params=["light", "dark"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_as(open_page: Callable[..., Any], alice: User, scheme: str) -> Callable[..., Any]:
    """open_as(path, **options): alice's page at 390x844 in the test's theme."""

    def open_(path: str = "/", **options: Any) -> Any:
        return open_page(alice, path, color_scheme=scheme, viewport=PHONE, **options)

    return open_


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def pin(preset: str = "pin_secondary", *, chain: str = "chat", actor: str = "carol", **kwargs: Any) -> Selection:
    kwargs.setdefault("reason", REASON)
    return services.select_preset(chain=chain, preset=preset, actor=actor, **kwargs)


def background(locator: Any) -> str:
    return str(locator.evaluate("el => getComputedStyle(el).backgroundColor"))


# 1. Signing in again after the session expired mid-change


def test_signing_in_again_mid_change_lands_on_the_chain_page_not_an_error(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    page.keyboard.type(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.context.clear_cookies(name=settings.SESSION_COOKIE_NAME)  # the session expires meanwhile
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    sign_in_on_the_page(page)

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "Nothing was changed" in page.get_by_role("status").first.inner_text()
    assert page.get_by_role("heading", name="chat", exact=True).is_visible()
    assert live().version == 1


# 3. Extend never shortens; ending a pin earlier is a separate, clearly worded change


def test_extend_cannot_shorten_and_ending_earlier_is_its_own_change(open_as: Callable[..., Any]) -> None:
    pin(expires_at=timedelta(hours=8))
    page = open_as("/chains/chat/")
    page.get_by_label("Keep it pinned for").select_option("30")
    page.locator("#extend_reason").fill("keep it")
    page.get_by_role("button", name="Extend pin…").click()
    assert "extending never shortens a pin" in page.locator("#extend").inner_text()
    assert live().version == 2

    page.get_by_label("End it in").select_option("30")
    page.locator("#shorten_reason").fill("INC-4411 resolved by the vendor")
    page.get_by_role("button", name="End the pin earlier…").click()
    assert page.get_by_role("heading", name="End the pin of pin_secondary on chat earlier?").is_visible()
    page.get_by_role("button", name=re.compile(r"^End the pin at ")).click()

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "expires in 30 min" in page.locator("[data-chain=chat] .countdown").first.inner_text()
    assert (live().version, live().action, live().reason) == (3, "extend", "INC-4411 resolved by the vendor")


def test_plus_one_hour_from_the_dashboard_is_one_click_and_a_confirm(open_as: Callable[..., Any]) -> None:
    pin(expires_at=timedelta(hours=2))
    until = live().expires_at
    assert until is not None
    page = open_as("/")
    click = Clicks()
    click(page.locator("section[data-chain=chat]").get_by_role("button", name="Extend the pin of chat by 1 h"))
    click(page.get_by_role("button", name=re.compile(r"^Extend until .* \(\+1 h\)$")))

    assert click.count == 2
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert live().expires_at == until + timedelta(hours=1)


# 4. Who pinned it and why stay on the card after an extension


def test_the_card_still_says_who_pinned_and_why_after_an_extension(open_as: Callable[..., Any]) -> None:
    pin(actor="carol", reason="INC-4411 vendor_a garbage")
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="dave", reason="still bad")
    card = open_as("/").locator("section[data-chain=chat]")

    meta = card.locator(".meta").inner_text()
    assert "carol" in meta and "INC-4411 vendor_a garbage" in meta and "dave" not in meta
    assert re.search(r"Then extended by dave .*still bad", card.locator(".latest-change").inner_text())


# 5. A crafted select of the default preset reviews as what it does


def test_a_crafted_select_of_the_default_reviews_as_a_revert(open_as: Callable[..., Any]) -> None:
    pin()
    page = open_as("/chains/chat/")
    radio = page.get_by_role("radio", name="drop_vendor_b")
    radio.evaluate("el => { el.value = 'normal'; }")  # what a crafted form would post
    radio.check()
    page.locator("#id_reason").fill("back to normal")
    page.get_by_role("button", name="Review and pin…").click()

    assert page.get_by_role("heading", name="Serve chat's default, normal, again?").is_visible()
    assert page.get_by_role("button", name="Revert to normal").is_visible()
    assert "No expiry." in page.locator(".card-target").inner_text()
    assert page.get_by_role("button", name=re.compile("^Pin normal")).count() == 0


# 6. Back after confirming does not offer the change again from the cache


def test_back_after_confirming_does_not_show_the_review_from_the_cache(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    page.keyboard.type(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))

    try:
        page.go_back()
    except Exception as error:  # Chromium refuses to show a POST's page it may not store
        assert "ERR_CACHE_MISS" in str(error)
    assert page.get_by_role("button", name="Pin pin_secondary for 4 h").count() == 0
    assert live().version == 2


# 7. Every chain above the fold on a phone


def test_every_chain_is_above_the_fold_at_390x844(open_as: Callable[..., Any], reader: Client) -> None:
    vendor_a_failing(reader)  # a "failing now" line above the cards too
    pin(reason="INC-4411 " + "a long incident description " * 6)
    pin("local_only", chain="incident-summary")
    page = open_as("/")

    items = page.locator(".now-strip li")
    assert items.count() == 2
    for index in range(items.count()):
        box = items.nth(index).bounding_box()
        assert box is not None and box["y"] + box["height"] <= PHONE["height"], box
    assert "pinned by carol" in items.nth(0).inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]


# 8. Dangerous changes look dangerous


def test_a_degraded_preset_that_drops_vendors_has_a_danger_confirm(open_as: Callable[..., Any], scheme: str) -> None:
    page = open_as("/chains/chat/")
    page.get_by_role("radio", name="local_only").check()
    page.locator("#id_reason").fill("INC-9 both vendors down")
    page.get_by_role("button", name="Review and pin…").click()

    button = page.get_by_role("button", name="Pin local_only for 4 h")
    assert background(button) == DANGER[scheme]
    assert "vendor_a, vendor_b will get no chat traffic" in page.locator(".danger-note").inner_text()
    page.get_by_role("link", name="Cancel").click()
    page.get_by_role("radio", name="pin_secondary").check()
    page.locator("#id_reason").fill(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    assert background(page.get_by_role("button", name="Pin pin_secondary for 4 h")) == PRIMARY[scheme]


def test_reverting_is_not_styled_as_a_plain_confirm(open_as: Callable[..., Any], scheme: str) -> None:
    pin()
    page = open_as("/")
    page.locator("section[data-chain=chat]").get_by_role("button", name="Revert to normal…").click()
    button = page.get_by_role("button", name="Revert to normal", exact=True)
    assert background(button) not in (PRIMARY[scheme], DANGER[scheme])
    assert "vendor_a/large serves first again" in page.locator(".caution-note").inner_text()


# 9. No idle-head warning on a fresh install, ticking "ago" times, a notice that stays in view


def test_a_fresh_install_warns_about_nothing_and_ago_times_tick(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/", fake_clock=True)
    assert page.locator(".warning-note").count() == 0

    when = page.locator(".card .meta time[data-since]")
    page.clock.run_for(1_000)
    assert re.fullmatch(r"\d+ s ago", when.inner_text())
    page.clock.run_for(125_000)
    assert when.inner_text() == "2 min ago"


def test_the_changed_elsewhere_notice_stays_in_view_while_scrolling(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/", fake_clock=True)
    page.locator("#id_reason").fill("half typed")
    with time_machine.travel(timezone.now()):
        pin("local_only", actor="carol", reason="INC-9")
    page.clock.run_for(10_000)
    notice = page.locator("#changed-notice")
    notice.filter(has_text="chat is now v2").wait_for()

    page.mouse.wheel(0, 5000)
    page.wait_for_function("() => window.scrollY > 200")
    box = notice.bounding_box()
    assert box is not None and 0 <= box["y"] < 50, box


# 9. "Healthier now… Review <preset>" lands in the reason box: typing goes there

# A warning's background in each theme (the stylesheet's --caution-bg), not a success's.
CAUTION = {"light": "rgb(255, 241, 199)", "dark": "rgb(69, 49, 11)"}


def test_following_the_healthier_now_suggestion_puts_typing_in_the_reason_box(
    open_as: Callable[..., Any], reader: Client
) -> None:
    vendor_a_failing(reader)
    page = open_as("/")
    page.get_by_role("link", name="Review pin_secondary…").first.click()
    page.wait_for_url(re.compile(r"/chains/chat/\?preset=pin_secondary$"))

    page.keyboard.type(REASON)

    assert page.locator("#id_reason").input_value() == REASON
    page.get_by_role("button", name="Review and pin…").click()
    page.get_by_role("button", name="Pin pin_secondary for 4 h").wait_for()


# 10. After the session expired mid-change: the sign-in page says why, the reason is kept


def test_signing_in_again_mid_change_warns_and_keeps_the_typed_reason(open_as: Callable[..., Any], scheme: str) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    page.keyboard.type(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.context.clear_cookies(name=settings.SESSION_COOKIE_NAME)  # the session expires meanwhile
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()

    page.wait_for_url(re.compile(r"/accounts/login/"))
    assert "Your session had expired, so nothing was changed" in page.get_by_role("status").first.inner_text()
    sign_in_on_the_page(page)

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert background(page.locator(".message", has_text="Nothing was changed")) == CAUTION[scheme]
    assert page.locator("#id_reason").input_value() == REASON
    assert page.evaluate("document.activeElement.id") == "id_reason"
    assert live().version == 1


# 11. Back after confirming is a normal page: no "Confirm Form Resubmission", nothing made twice


def test_back_after_confirming_is_a_normal_page_and_makes_nothing_again(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    page.keyboard.type(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(r"/chains/chat/select\?review="))  # the review is a GET
    page.reload()  # and reloading it sends nothing either
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))

    response = page.go_back()  # a POST in the history would stop here (ERR_CACHE_MISS)

    assert response is not None and response.ok
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "chat is already pinned to pin_secondary" in page.get_by_role("status").first.inner_text()
    assert page.get_by_role("heading", name="chat", exact=True).is_visible()
    assert (live().version, Selection.history.filter(chain__name="chat").count()) == (2, 2)
