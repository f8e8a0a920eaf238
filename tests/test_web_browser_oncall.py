"""On-call pages without dead ends, in a real Chromium at 390x844 dark and 1280x800 light: each
flow an on-call engineer found stopping or misleading them, tried again the way they tried it."""

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

from audit import alerts
from pages.history import HISTORY_PAGE_SIZE
from presets import services
from presets.models import Selection
from tests.browser import DANGER, Clicks, sign_in_on_the_page, type_into_the_focus
from tests.health_reports import vendor_a_failing

REASON = "INC-4411 vendor_a returns 200s with garbage"
# The confirm button's background in each theme (--danger-bg is tests.browser's DANGER; --primary-bg).
PRIMARY = {"light": "rgb(11, 87, 208)", "dark": "rgb(138, 180, 248)"}


@pytest.fixture
def scheme(screen: tuple[dict[str, int], str]) -> str:
    return screen[1]


@pytest.fixture
def open_as(open_page: Callable[..., Any], alice: User, screen: tuple[dict[str, int], str]) -> Callable[..., Any]:
    """open_as(path, user=alice, **options): the page on the test's screen."""
    viewport, scheme = screen

    def open_(path: str = "/", user: User | None = None, **options: Any) -> Any:
        return open_page(user or alice, path, color_scheme=scheme, viewport=viewport, **options)

    return open_


def in_view(page: Any, locator: Any) -> bool:
    """Whether all of ``locator`` is on the screen as it is (no scrolling)."""
    box, height = locator.bounding_box(), page.viewport_size["height"]
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def pin(preset: str = "pin_secondary", *, chain: str = "chat", actor: str = "carol", **kwargs: Any) -> Selection:
    kwargs.setdefault("reason", REASON)
    return services.select_preset(chain=chain, preset=preset, actor=actor, **kwargs)


def background(locator: Any) -> str:
    return str(locator.evaluate("el => getComputedStyle(el).backgroundColor"))


# 1. Signing in again after the session expired mid-change


def review_then_lose_the_session(page: Any) -> None:
    """Open the review of the typed change, then let the session expire while it is shown. A
    click does not wait for the navigation it starts: cookies cleared before the review's
    request was sent would send the review itself to the sign-in page."""
    page.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(r"/chains/chat/select\?review="))
    page.context.clear_cookies(name=settings.SESSION_COOKIE_NAME)


def test_signing_in_again_mid_change_lands_on_the_chain_page_not_an_error(open_as: Callable[..., Any]) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    type_into_the_focus(page, REASON)
    review_then_lose_the_session(page)
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
    # Keeping it longer offers no length that would end it sooner.
    assert page.get_by_label("Keep it pinned for").locator("option").all_inner_texts() == [
        "12 h",
        "24 h (longest allowed)",
    ]

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
    type_into_the_focus(page, REASON)
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


def test_every_chain_is_above_the_fold(open_as: Callable[..., Any], reader: Client) -> None:
    vendor_a_failing(reader)  # a "failing now" line above the cards too
    pin(reason="INC-4411 " + "a long incident description " * 6)
    pin("local_only", chain="incident-summary")
    page = open_as("/")

    items = page.locator(".now-strip li")
    assert items.count() == 2
    for index in range(items.count()):
        assert in_view(page, items.nth(index)), items.nth(index).bounding_box()
    assert "pinned by carol" in items.nth(0).inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= page.viewport_size["width"]


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
    page.wait_for_url(re.compile(r"/chains/chat/\?preset=pin_secondary&from=alert$"))
    type_into_the_focus(page, REASON)  # as the page opens

    assert page.locator("#id_reason").input_value() == REASON
    page.get_by_role("button", name="Review and pin…").click()
    page.get_by_role("button", name="Pin pin_secondary for 4 h").wait_for()


# 10. After the session expired mid-change: the sign-in page says why, the reason is kept


def test_signing_in_again_mid_change_warns_and_keeps_the_typed_reason(open_as: Callable[..., Any], scheme: str) -> None:
    page = open_as("/chains/chat/?preset=pin_secondary")
    type_into_the_focus(page, REASON)
    review_then_lose_the_session(page)
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
    type_into_the_focus(page, REASON)
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


# Pages that never end on an error (each case as an on-call met it, on both screens)


def test_a_quick_extend_after_someone_reverted_shows_the_conflict_not_a_server_error(
    open_as: Callable[..., Any],
) -> None:
    pin(expires_at=timedelta(hours=2))
    page = open_as("/")
    page.locator("section[data-chain=chat]").get_by_role("button", name="Extend the pin of chat by 4 h").click()
    services.revert_to_default(chain="chat", actor="carol", reason="vendor_a is back")  # meanwhile
    page.get_by_role("button", name=re.compile(r"^Extend until ")).click()

    assert page.get_by_role("heading", name="chat has no pin to extend any more").is_visible()
    alert = page.get_by_role("alert")
    assert "chat changed since you loaded the page" in alert.inner_text()
    assert "revert of normal by carol" in alert.inner_text()
    assert "Server Error" not in page.content()
    assert page.get_by_role("button", name=re.compile(r"^Extend until ")).count() == 0
    assert (live().version, live().action) == (3, "revert")


def test_a_refused_extension_is_summed_up_in_view_focused_and_in_on_call_words(open_as: Callable[..., Any]) -> None:
    pin(expires_at=timedelta(hours=8))
    page = open_as("/chains/chat/")
    page.get_by_label("Keep it pinned for").select_option("720")
    page.locator("#extend_reason").fill("keep it")
    # Meanwhile another on-call keeps it for longer than 12 h: 12 h from now would shorten it.
    services.extend_pin(chain="chat", actor="carol", reason="INC-4411 all night", expires_at=timedelta(hours=23))
    page.get_by_role("button", name="Extend pin…").click()

    summary = page.locator("#error-summary")
    assert in_view(page, summary)
    assert page.evaluate("document.activeElement.id") == "error-summary"
    assert summary.get_attribute("role") == "alert"
    text = summary.inner_text()
    assert text.startswith("The pin was not extended. Fix this and try again:")
    assert re.search(r"that would end the pin at [^(]*\d\d:\d\d UTC \(in 12 h\), before its current expiry", text)
    assert 'use "End the pin earlier" on the chain page' in text
    assert '"shorten"' not in text and not re.search(r"\dT\d", text)
    assert live().version == 3


def test_no_quick_extend_is_offered_past_the_longest_pin_and_a_racing_one_is_explained(
    open_as: Callable[..., Any],
) -> None:
    pin(expires_at=timedelta(hours=20))
    page = open_as("/")
    card = page.locator("section[data-chain=chat]")
    assert card.get_by_role("button", name=re.compile(r"^Extend the pin of chat by")).count() == 2  # +1 h, +4 h
    card.get_by_role("button", name="Extend the pin of chat by 4 h").click()
    services.extend_pin(chain="chat", actor="carol", reason="INC-4411", expires_at=timedelta(hours=23))
    # Confirmed against v2; v3 ends in 23 h, and 4 h more is past the longest pin: refused.
    page.get_by_role("button", name=re.compile(r"^Extend until ")).click()
    summary = page.locator("#error-summary")
    assert in_view(page, summary) and page.evaluate("document.activeElement.id") == "error-summary"
    assert re.search(
        r"UTC \(in 27 h\) is more than 24 h ahead; pick a time before .*UTC \(in 24 h\)", summary.inner_text()
    )
    page.goto("/")
    card = page.locator("section[data-chain=chat]")
    assert card.get_by_role("button", name="Extend the pin of chat by 1 h").is_visible()
    assert card.get_by_role("button", name="Extend the pin of chat by 4 h").count() == 0


def test_the_confirm_bar_with_what_to_check_is_in_view_and_the_title_warns(
    open_as: Callable[..., Any], reader: Client, scheme: str
) -> None:
    vendor_a_failing(reader)
    page = open_as("/chains/chat/")
    page.get_by_role("radio", name="local_only").check()
    page.locator("#id_reason").fill("INC-9 both vendors down")
    page.get_by_role("button", name="Review and pin…").click()

    bar = page.locator("form.confirm-bar")
    button = bar.get_by_role("button", name="Pin local_only for 4 h")
    for part in (bar, button, bar.get_by_label("Reason"), bar.locator(".confirm-check")):
        assert in_view(page, part), part
    assert bar.get_by_label("Reason").input_value() == "INC-9 both vendors down"
    assert re.match(r"Check first \(\d\): ", bar.locator(".confirm-check").inner_text())
    assert background(button) == DANGER[scheme]
    assert page.title().startswith("Check first: Pin local_only on chat?")
    page.mouse.wheel(0, 300)  # reading the review above it: the bar stays
    page.wait_for_function("() => window.scrollY > 0 || document.documentElement.scrollHeight <= innerHeight")
    assert in_view(page, button)
    button.click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert live().preset.name == "local_only"


def test_the_incident_reason_survives_revert_and_restore(open_as: Callable[..., Any]) -> None:
    pin(reason="INC-101 vendor_a garbage")
    page = open_as("/")
    page.locator("section[data-chain=chat]").get_by_role("button", name="Revert to normal…").click()
    page.get_by_role("button", name="Revert to normal", exact=True).click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    page.goto("/chains/chat/history/")
    page.get_by_role("button", name="Restore pin_secondary…").click()  # undo v3, the revert
    page.get_by_role("button", name="Restore pin_secondary").click()

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert live().reason.startswith("INC-101 vendor_a garbage — restored v2 (undo v3")
    assert "INC-101 vendor_a garbage" in page.locator(".card .meta").inner_text()


def test_a_default_chain_whose_head_fails_is_not_green(open_as: Callable[..., Any], reader: Client) -> None:
    vendor_a_failing(reader)
    page = open_as("/")
    card = page.locator("section[data-chain=chat]")
    strip = page.locator(".now-strip li", has_text="chat")
    assert "head failing" in strip.inner_text().lower()
    green = page.locator("section[data-chain=incident-summary]")  # a healthy default: green
    colour = "el => getComputedStyle(el).borderLeftColor"
    assert card.evaluate(colour) != green.evaluate(colour)
    assert card.evaluate(colour) == page.locator(".badge-failing").first.evaluate(
        "el => getComputedStyle(el).backgroundColor"
    )


def test_reverting_a_chain_someone_just_reverted_says_there_is_nothing_to_do(open_as: Callable[..., Any]) -> None:
    pin()
    page = open_as("/")
    page.locator("section[data-chain=chat]").get_by_role("button", name="Revert to normal…").click()
    services.revert_to_default(chain="chat", actor="carol", reason="vendor_a is back")
    page.get_by_role("button", name="Revert to normal", exact=True).click()

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    status = page.get_by_role("status").first.inner_text()
    assert "chat is already on its default preset normal" in status and "nothing to do" in status
    assert "confirm again" not in page.content()
    assert live().version == 3


def test_a_shortened_pin_is_called_shortened(open_as: Callable[..., Any]) -> None:
    pin(expires_at=timedelta(hours=8))
    page = open_as("/chains/chat/")
    page.get_by_label("End it in").select_option("60")
    page.locator("#shorten_reason").fill("vendor fixed it")
    page.get_by_role("button", name="End the pin earlier…").click()
    page.get_by_role("button", name=re.compile(r"^End the pin at ")).click()

    page.wait_for_url(re.compile(r"/chains/chat/$"))
    latest = page.locator(".card .latest-change").inner_text()
    assert re.search(r"Then shortened by alice", latest) and "extended" not in latest


def test_the_chain_page_has_one_revert_button(open_as: Callable[..., Any]) -> None:
    pin()
    page = open_as("/chains/chat/")
    assert page.get_by_role("button", name=re.compile(r"^Revert")).count() == 1
    assert page.get_by_role("button", name=re.compile(r"^Extend the pin of chat by")).count() == 2


def test_an_alert_reads_as_of_now(open_as: Callable[..., Any]) -> None:
    with time_machine.travel(timezone.now() - timedelta(minutes=110), tick=False) as clock:
        pin(expires_at=timedelta(hours=6))
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()  # raised "for 1 h 1 min"
    page = open_as("/alerts/")
    item = page.locator(".alert-item").first.inner_text()
    assert re.search(r"has served pin pin_secondary for 1 h 5\d min", item), item


def test_the_favicon_the_viewers_hint_and_the_history_count(open_as: Callable[..., Any], bob: User) -> None:
    pin()
    for n in range(HISTORY_PAGE_SIZE):  # more than a page of history
        longer = n % 2 == 0
        hours = 23 if longer else 2
        services.extend_pin(
            chain="chat", actor="carol", reason="INC-4411", expires_at=timedelta(hours=hours), shorten=not longer
        )
    page = open_as("/", user=bob)
    assert "Read only" in page.locator(".readonly-note").inner_text()
    icon = page.request.get("/favicon.ico")
    assert icon.ok and "svg" in icon.headers["content-type"]
    page.goto("/chains/chat/history/")
    assert page.locator(".history-count").inner_text() == f"{HISTORY_PAGE_SIZE + 2} changes."
    page.get_by_role("link", name="Oldest").click()
    assert re.search(r"\bv1\b", page.locator(".entry").last.inner_text())
