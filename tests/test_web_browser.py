"""The on-call pages in a real Chromium (Playwright), against a live server and database.

Needs Debian's chromium at /usr/bin/chromium (Playwright cannot download its own browser here)
and axe-core (the axe-playwright-python package, see tests/browser.py). Without them these
tests are skipped on a developer's machine and fail in CI (CI=true), where both must be installed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import Client
from django.utils import timezone

from presets import services
from presets.models import Selection
from tests.browser import (
    LAPTOP,
    PHONE,
    Clicks,
    api_document,
    axe_violations,
    reads_well,
    sign_in_on_the_page,
    type_into_the_focus,
)
from tests.health_reports import report, step, vendor_a_failing

SCREENSHOT = Path(settings.BASE_DIR) / "docs" / "screenshot.png"
PHONE_SCREENSHOT = Path(settings.BASE_DIR) / "docs" / "screenshot-phone.png"
REVIEW_SCREENSHOT = Path(settings.BASE_DIR) / "docs" / "screenshot-review-phone.png"
REASON = "INC-4411 vendor_a returns 200s with garbage"


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def pin(
    preset: str = "pin_secondary",
    *,
    chain: str = "chat",
    actor: str = "carol",
    reason: str = REASON,
) -> Selection:
    return services.select_preset(chain=chain, preset=preset, actor=actor, reason=reason)


# --- the on-call flows ------------------------------------------------------------------------


def test_signing_in_with_the_form_lands_on_the_dashboard(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(None, "/")
    sign_in_on_the_page(page)
    page.wait_for_url(re.compile(r"/$"))
    assert page.get_by_role("heading", name="What is live").is_visible()
    assert page.locator("section[data-chain=chat] .preset-name").inner_text() == "normal"


def test_pinning_from_the_dashboard_takes_three_clicks_and_the_api_serves_it(
    open_page: Callable[..., Any],
    alice: User,
    live_server: Any,
    read_token: str,
) -> None:
    page = open_page(alice, "/")
    click = Clicks()
    click(page.locator("section[data-chain=chat]").get_by_role("link", name="pin_secondary"))
    assert page.get_by_role("radio", name="pin_secondary").is_checked()
    type_into_the_focus(page, REASON)  # the reason box has the focus: no click needed
    click(page.get_by_role("button", name="Review and pin…"))
    click(page.get_by_role("button", name="Pin pin_secondary for 4 h"))

    assert click.count == 3
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "chat is now v2: pin_secondary" in page.get_by_role("status").first.inner_text()
    assert page.locator("[data-chain=chat] .badge-pinned").inner_text().lower() == "pinned"
    document = api_document(live_server, read_token)
    assert (document["version"], document["preset"], document["updated_by"]) == (
        2,
        "pin_secondary",
        "alice",
    )
    assert document["reason"] == REASON


def test_a_change_between_page_load_and_submit_is_shown_and_asked_again(
    open_page: Callable[..., Any],
    alice: User,
) -> None:
    page = open_page(alice, "/chains/chat/")
    page.get_by_role("radio", name="pin_secondary").check()
    page.locator("#id_reason").fill(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    pin("local_only", actor="carol", reason="INC-9 both vendors down")  # meanwhile
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()

    alert = page.get_by_role("alert")
    assert "chat changed since you loaded the page" in alert.inner_text()
    assert "carol" in alert.inner_text() and "local_only" in alert.inner_text()
    assert "INC-9 both vendors down" in alert.inner_text()
    assert (live().version, live().preset.name) == (2, "local_only"), "nothing overwritten"
    page.get_by_role("button", name="Pin pin_secondary for 4 h").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert (live().version, live().preset.name) == (3, "pin_secondary")


def test_revert_to_default_from_the_dashboard_is_one_click_and_a_confirm(
    open_page: Callable[..., Any], alice: User
) -> None:
    pin()
    page = open_page(alice, "/")
    click = Clicks()
    click(page.locator("section[data-chain=chat]").get_by_role("button", name="Revert to normal…"))
    click(page.get_by_role("button", name="Revert to normal", exact=True))
    assert click.count == 2
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "chat is now v3: normal (default, no expiry)" in page.get_by_role("status").first.inner_text()
    assert (live().version, live().preset.name, live().action) == (3, "normal", "revert")


def test_extend_keeps_the_pin_longer(open_page: Callable[..., Any], alice: User) -> None:
    pin()
    page = open_page(alice, "/chains/chat/")
    page.get_by_label("Keep it pinned for").select_option("480")
    page.locator("#extend_reason").fill("vendor_a still flaky")
    page.get_by_role("button", name="Extend pin…").click()
    page.get_by_role("button", name=re.compile(r"^Extend until ")).click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "expires in 8 h" in page.locator("[data-chain=chat] .countdown").inner_text()
    assert (live().version, live().action, live().preset.name) == (3, "extend", "pin_secondary")


def test_restore_from_history_with_the_prefilled_reason(open_page: Callable[..., Any], alice: User) -> None:
    pin()
    services.revert_to_default(chain="chat", actor="carol", reason="looked fine")
    page = open_page(alice, "/chains/chat/history/")
    row = page.locator("#chat-v3")
    assert row.get_by_label("Reason for restoring pin_secondary").input_value() == (
        f"{REASON} — restored v2 (undo v3, revert by carol)"
    )
    click = Clicks()
    click(row.get_by_role("button", name="Restore pin_secondary…"))
    click(page.get_by_role("button", name="Restore pin_secondary", exact=True))
    assert click.count == 2  # one click, then the confirm
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    selection = live()
    assert (selection.version, selection.preset.name, selection.action) == (
        4,
        "pin_secondary",
        "restore",
    )
    assert selection.reason == f"{REASON} — restored v2 (undo v3, revert by carol)"


def test_a_blank_reason_shows_a_form_error_and_writes_nothing(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(alice, "/chains/chat/?preset=pin_secondary")
    page.keyboard.type("   ")
    page.get_by_role("button", name="Review and pin…").click()
    alert = page.get_by_role("alert")
    assert "Reason: is required" in alert.inner_text()
    assert page.locator("#id_reason").get_attribute("aria-invalid") == "true"
    assert page.get_by_role("radio", name="pin_secondary").is_checked(), "the choice is kept"
    assert (live().version, Selection.history.count()) == (1, 2)  # chat and incident-summary


def test_a_viewer_sees_no_change_buttons_and_a_forged_post_is_forbidden(
    open_page: Callable[..., Any],
    bob: User,
) -> None:
    pin()
    page = open_page(bob, "/")
    assert page.locator(".card-actions").count() == 0
    for path in ("/chains/chat/", "/chains/chat/history/"):
        page.goto(path)
        assert page.locator("form[action^='/chains/']").count() == 0
        assert page.get_by_role("button", name=re.compile("Revert|Restore|Review|Extend")).count() == 0
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        "/chains/chat/revert",
        headers={"X-CSRFToken": token},
        form={"reason": "forged", "expected_version": "2", "confirmed": "yes"},
    )
    assert response.status == 403
    assert "Not allowed" in response.text()
    assert live().version == 2


def test_a_post_without_the_csrf_token_fails(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(alice, "/chains/chat/?preset=pin_secondary")
    type_into_the_focus(page, REASON)
    page.eval_on_selector_all("#choose input[name=csrfmiddlewaretoken]", "els => els.forEach(e => e.remove())")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Review and pin…").click()
    assert posted.value.status == 403
    assert "CSRF" in page.content()
    assert live().version == 1


def test_the_pages_work_without_javascript(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(alice, "/chains/chat/", javascript=False, viewport=LAPTOP)
    page.get_by_role("radio", name="local_only").check()
    page.get_by_label("Pin for").select_option("60")
    page.locator("#id_reason").fill("INC-12 both vendors down")
    page.get_by_role("button", name="Review and pin…").click()
    page.get_by_role("button", name="Pin local_only for 1 h").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert "expires in 1 h" in page.locator("[data-chain=chat] .countdown").inner_text()
    assert live().preset.name == "local_only"


def test_countdowns_tick_and_the_dashboard_follows_changes_made_elsewhere(
    open_page: Callable[..., Any],
    alice: User,
) -> None:
    pin()
    page = open_page(alice, "/", fake_clock=True)
    countdown = page.locator("section[data-chain=chat] .countdown")
    assert countdown.inner_text() == "expires in 4 h"
    # the script counts down to the datetime it is given, every second
    page.evaluate("""() => document.querySelector('section[data-chain=chat] .countdown')
        .setAttribute('datetime', new Date(Date.now() + 100_000).toISOString())""")
    page.clock.run_for(1_000)
    assert countdown.inner_text() == "expires in 2 min"
    page.clock.run_for(50_000)
    assert re.fullmatch(r"expires in [34]\d s", countdown.inner_text())
    # a change made elsewhere shows up without touching the page (it polls every 10 s)
    services.revert_to_default(chain="chat", actor="carol", reason="done")
    page.clock.run_for(10_000)
    page.wait_for_selector("section[data-chain=chat][data-version='3']")
    assert page.locator("section[data-chain=chat] .badge-default").is_visible()


def test_a_page_with_a_form_says_the_chain_changed_instead_of_reloading(
    open_page: Callable[..., Any],
    alice: User,
) -> None:
    page = open_page(alice, "/chains/chat/", fake_clock=True)
    page.locator("#id_reason").fill("half typed")
    pin("local_only", actor="carol", reason="INC-9")
    page.clock.run_for(10_000)
    notice = page.locator("#changed-notice")
    notice.filter(has_text="chat is now v2: local_only by carol").wait_for()
    assert page.locator("#id_reason").input_value() == "half typed"


# --- the keyboard -----------------------------------------------------------------------------


def tabs_to(page: Any, is_target: str, *, most: int = 40) -> int:
    """Press Tab until ``is_target`` (a JavaScript test of an element ``e``) holds for the
    focused element; the number of Tabs that took (0: the page gave it the focus)."""
    page.wait_for_load_state("load")
    test = f"() => {{ const e = document.activeElement; return !!e && ({is_target}); }}"
    for tabs in range(most + 1):
        if page.evaluate(test):
            return tabs
        page.keyboard.press("Tab")
    raise AssertionError(f"{most} Tabs did not reach {is_target} on {page.url}")


def test_from_the_dashboard_a_cards_first_pin_is_three_tabs_away_by_the_skip_link(
    open_page: Callable[..., Any], alice: User
) -> None:
    page = open_page(alice, "/", color_scheme="dark", viewport=PHONE)
    skip = page.get_by_role("link", name="Skip to the chains' cards")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent") == "Skip to the chains' cards"
    box = skip.bounding_box()
    assert box is not None and box["x"] >= 0 and box["y"] >= 0, "the skip link is not shown when it has the focus"
    reads_well(page, "dashboard-skip-link")
    page.keyboard.press("Enter")
    first_pin = "e === document.querySelector('section[data-chain=chat] .preset-buttons a')"
    assert 1 + tabs_to(page, first_pin) <= 3  # the Tab to the skip link, then to the pin
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/chains/chat/\?preset=drop_vendor_b$"))
    assert page.get_by_role("radio", name="drop_vendor_b").is_checked()
    type_into_the_focus(page, REASON)
    assert page.locator("#id_reason").input_value() == REASON


def test_the_review_opens_with_the_typing_in_its_reason(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(alice, "/chains/chat/?preset=pin_secondary", color_scheme="dark", viewport=PHONE)
    type_into_the_focus(page, REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(r"/chains/chat/select\?review="))

    assert tabs_to(page, "e.id === 'confirm_reason'") == 0
    assert page.locator("#confirm_reason").input_value() == REASON
    reads_well(page, "review-reason-focused")
    page.keyboard.press("End")
    page.keyboard.type(", vendor_b fine")
    page.keyboard.press("Enter")  # the confirm bar's button is its form's first
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert (live().version, live().preset.name, live().reason) == (2, "pin_secondary", f"{REASON}, vendor_b fine")


def test_a_length_edited_in_the_page_is_refused_in_plain_words_once(open_page: Callable[..., Any], alice: User) -> None:
    page = open_page(alice, "/chains/chat/?preset=pin_secondary", color_scheme="dark", viewport=PHONE)
    type_into_the_focus(page, REASON)
    # The list offers whole lengths only: someone (or an extension) edits the page.
    page.evaluate("() => { document.querySelector('#id_duration_minutes option:checked').value = '0'; }")
    page.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(r"/chains/chat/select\?review="))

    words = "give a whole number of minutes from 1 to 1440, e.g. 240"
    summary = page.locator("#error-summary").inner_text()
    assert summary.count(f"Pin for: {words}") == 1 and summary.count(words) == 1
    assert page.locator("#id_duration_minutes_error").inner_text() == words
    body = page.inner_text("body")
    assert not re.search(r"Ensure this value|Enter a (whole )?number|This field is required", body)
    assert "choose how long" not in body
    reads_well(page, "pin-length-refused")
    assert live().version == 1


# --- accessibility, themes, phone width -----------------------------------------------------


def test_at_1280px_the_dashboards_cards_fill_the_row_with_no_empty_column(
    open_page: Callable[..., Any], alice: User
) -> None:
    page = open_page(alice, "/", viewport=LAPTOP)
    grid = page.locator(".cards").bounding_box()
    cards = [page.locator(f"section[data-chain={chain}]").bounding_box() for chain in ("chat", "incident-summary")]
    assert grid and all(cards)
    # Two chains side by side, sharing the width: no empty third column on their right.
    assert cards[0]["y"] == cards[1]["y"]
    assert abs((cards[1]["x"] + cards[1]["width"]) - (grid["x"] + grid["width"])) <= 1
    assert cards[0]["width"] > grid["width"] / 3


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1280px"])
@pytest.mark.parametrize("color_scheme", ["light", "dark"])
def test_every_page_has_no_accessibility_violations_and_fits_its_width(
    open_page: Callable[..., Any],
    alice: User,
    reader: Client,
    color_scheme: str,
    viewport: dict[str, int],
    settings: Any,
) -> None:
    settings.PIN_ALERT_AFTER_MINUTES = 1
    page = open_page(None, "/accounts/login/", color_scheme=color_scheme, viewport=viewport)
    # The page follows the system setting (the stylesheet's light-dark() colours).
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == {"light": "rgb(243, 244, 246)", "dark": "rgb(15, 18, 22)"}[color_scheme]
    checked: dict[str, list[str]] = {"login": axe_violations(page)}
    page = open_page(alice, "/", color_scheme=color_scheme, viewport=viewport)
    checked["dashboard, all default"] = axe_violations(page)

    pin("local_only", chain="incident-summary")  # a degraded pin
    vendor_a_failing(reader)  # a "failing now" line, step health, sparklines and a suggestion
    with time_machine.travel(timezone.now() - timedelta(minutes=5)):
        pin()  # older than the alert threshold: a stale pin
    pages = {
        "dashboard, pinned and stale": "/",
        "chain": "/chains/chat/",
        "chain history": "/chains/chat/history/",
        "all history": "/history/",
        "alerts": "/alerts/",
    }
    for name, path in pages.items():
        page.goto(path)
        checked[name] = axe_violations(page)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= viewport["width"], f"{name} is {width}px wide"
    page.goto("/chains/chat/")
    page.get_by_role("button", name="Review and pin…").click()  # no preset, no reason
    checked["chain with errors"] = axe_violations(page)
    page.get_by_role("radio", name="drop_vendor_b").check()
    page.locator("#id_reason").fill("INC-7")
    page.get_by_role("button", name="Review and pin…").click()
    checked["confirmation, danger"] = axe_violations(page)  # it drops vendor_b; its head fails
    page.goto("/")
    page.locator("section[data-chain=chat]").get_by_role("button", name="Revert to normal…").click()
    checked["confirmation, caution"] = axe_violations(page)
    page.goto("/chains/chat/")
    page.get_by_role("radio", name="drop_vendor_b").check()
    page.locator("#id_reason").fill("INC-7")
    page.get_by_role("button", name="Review and pin…").click()
    services.revert_to_default(chain="chat", actor="carol", reason="meanwhile")
    page.get_by_role("button", name="Pin drop_vendor_b for 4 h").click()
    assert page.get_by_role("alert").is_visible()
    checked["conflict"] = axe_violations(page)
    pin()
    page.goto("/chains/chat/")
    page.get_by_label("Keep it pinned for").select_option(index=0)
    page.locator("#extend_reason").fill("keep it")
    services.extend_pin(chain="chat", actor="carol", reason="all night", expires_at=timedelta(hours=23))
    page.get_by_role("button", name="Extend pin…").click()
    assert page.locator("#error-summary").is_visible()
    checked["refused extension"] = axe_violations(page)
    page.goto("/chains/chat/history/")
    page.get_by_role("button", name=re.compile(r"^Restore ")).first.click()
    checked["restore review"] = axe_violations(page)
    page.goto("/access/")
    checked["access history"] = axe_violations(page)
    page.goto("/chains/no-such-chain/")
    checked["not found"] = axe_violations(page)
    checked.update(error_pages_violations(page))
    nobody = User.objects.create_user("nobody", password="nobody-pass-123")  # signed in, no role
    page = open_page(nobody, "/", color_scheme=color_scheme, viewport=viewport)
    checked["no role"] = axe_violations(page)

    assert {name: found for name, found in checked.items() if found} == {}


def answering(status: int, html: str) -> Callable[[Any], None]:
    """A route handler answering ``html`` with ``status``."""
    return lambda route: route.fulfill(status=status, body=html, content_type="text/html")


def error_pages_violations(page: Any) -> dict[str, list[str]]:
    """The styled 403, 500 and 503 pages as the server renders them, shown by the browser at a
    URL of the live server (its stylesheet and script load as on any page), checked by axe."""
    found = {}
    for status, template, context in (
        (403, "403.html", {"exception": "changing a selection needs the oncall role"}),
        (500, "500.html", {}),
        (503, "503.html", {}),
    ):
        page.route("**/error-page", answering(status, render_to_string(template, context)))
        page.goto("/error-page")
        assert page.locator("h1").is_visible() and page.get_by_role("link").count() > 0, template
        found[f"{status} page"] = axe_violations(page)
        page.unroute("**/error-page")
    return found


def test_the_dashboard_screenshot(open_page: Callable[..., Any], alice: User, reader: Client, tmp_path: Path) -> None:
    """Takes the README's pictures (a laptop, and a phone in the dark); UPDATE_SCREENSHOT=1
    writes them to docs/screenshot.png, docs/screenshot-phone.png and docs/screenshot-review-phone.png."""

    def read_as(instance: str, version: int) -> None:
        reader.get(
            "/api/v1/chains/chat",
            headers={"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": str(version)},
        )

    for n in range(3):
        read_as(f"pod-{n}", 1)
    for minutes_ago in range(25, -1, -1):  # vendor_a healthy, then failing for the last 8 min
        with time_machine.travel(timezone.now() - timedelta(minutes=minutes_ago)):
            if minutes_ago > 8:
                report(reader, "pod-0", [step("vendor_a", "large", {"served": 40, "timeout": 1})])
            else:
                vendor_a_failing(reader)
    pin(actor="alice")
    read_as("pod-0", 2)
    read_as("pod-1", 2)
    page = open_page(alice, "/", viewport=LAPTOP)
    assert "2 of 3 instances on v2" in page.inner_text("body")
    target = tmp_path / "dashboard.png"
    page.screenshot(path=str(target), full_page=True)
    phone = open_page(alice, "/", viewport=PHONE, color_scheme="dark")
    phone_target = tmp_path / "dashboard-phone.png"
    phone.screenshot(path=str(phone_target))  # what a phone shows before any scrolling
    # The review of a risky change on a phone: the confirm bar with what to check first.
    phone.goto("/chains/chat/?preset=local_only")
    phone.locator("#id_reason").fill("INC-4411 vendor_a and vendor_b both failing")
    phone.get_by_role("button", name="Review and pin…").click()
    review_target = tmp_path / "review-phone.png"
    phone.screenshot(path=str(review_target))
    for taken in (target, phone_target, review_target):
        assert taken.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(target, SCREENSHOT)
        shutil.copyfile(phone_target, PHONE_SCREENSHOT)
        shutil.copyfile(review_target, REVIEW_SCREENSHOT)
