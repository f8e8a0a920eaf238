"""Guarded pins in a real Chromium whose clock is in New York: from a provider alert to a pin made
with the "Guard this pin" box ticked, the guard on the chain's card (its end on both clocks) and
the dashboard's, switching it off; what a guard did, on both cards. Each page at 390x844 in the
dark theme (and 1280x800 light), without horizontal scrolling or any axe violation."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from audit.alerts import raise_alert
from audit.models import AlertKind
from presets import guards, services
from presets.models import Chain, GuardState, PinGuard, Selection
from tests.browser import SCREENS, reads_well
from tests.health_reports import vendor_a_failing, vendor_a_healthy

# 02:00 UTC on a Thursday: 21:00 on Wednesday in New York.
T0 = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
NEW_YORK = "America/New_York"
REASON = "INC-4411 vendor_a 5xx"
EVIDENCE = (
    "guard: vendor_b/large did worse than vendor_a/large did before the pin, for 3 min: 48.0 % errors against "
    "1.0 % (margin 10 points). Now 48.0 % errors (120 attempts from 3 instances); before the pin 1.0 % errors "
    "(900 attempts from 3 instances)."
)


@pytest.fixture(autouse=True)
def clock(open_page: Callable[..., Any]) -> Iterator[Any]:
    """The server at T0 and on (its clock moves), after the live server started."""
    with time_machine.travel(T0, tick=True) as traveller:
        yield traveller


def open_in_new_york(open_page: Callable[..., Any], user: User, path: str, screen: Any) -> Any:
    viewport, scheme = screen
    return open_page(user, path, color_scheme=scheme, viewport=viewport, timezone_id=NEW_YORK, at=T0)


def alert_and_review_a_pin(open_page: Callable[..., Any], alice: User, screen: Any) -> Any:
    """From the provider alert on the alerts page to the review of a pin of pin_secondary, its
    guard box ticked as the alert's link ticks it."""
    raise_alert(
        kind=AlertKind.PROVIDER_FAILING,
        chain=Chain.objects.get(name="chat"),
        version=1,
        message="vendor_a/large on chat: 48 % errors",
        details={},
        now=timezone.now(),
        subject="vendor_a/large",
    )
    page = open_in_new_york(open_page, alice, "/alerts/", screen)
    reads_well(page, "guard-alert")
    page.get_by_role("link", name="Pin another preset on chat, guarded…").click()
    page.wait_for_url(re.compile(r"/chains/chat/\?from=alert$"))

    form = page.locator("#choose form")
    assert form.get_by_label("Guard this pin").is_checked()
    page.wait_for_function("() => document.activeElement.id === 'id_reason'")  # the typing goes there
    reads_well(page, "guard-pin-form")
    form.get_by_role("radio", name="pin_secondary").check()
    form.get_by_label("Reason").fill(REASON)
    form.get_by_role("button", name="Review and pin…").click()
    return page


def test_a_pin_made_from_an_alert_is_guarded_shown_on_both_cards_and_switched_off(
    open_page: Callable[..., Any], alice: User, reader: Client, screen: Any
) -> None:
    vendor_a_healthy(reader)  # before the pin: evidence enough to judge it by
    page = alert_and_review_a_pin(open_page, alice, screen)
    assert page.locator("#guard-note").inner_text() == (
        "Guarded for 30 min: if vendor_b/large does clearly worse than vendor_a/large did before the pin, "
        "normal (v1) is restored, once."
    )
    reads_well(page, "guard-review")
    page.get_by_role("button", name=re.compile("^Pin pin_secondary")).click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))

    guard = PinGuard.objects.get(chain__name="chat")
    assert (guard.pin_version, guard.state) == (2, GuardState.WATCHING)
    # The badge's words are capitals on the screen (the stylesheet's), as every badge's.
    assert page.locator("#guard .guard-line").inner_text() == (
        "GUARD WATCHING Guarded until 02:30 UTC (your time: Wed 09 Dec 21:30 EST): restores v1 normal if "
        "vendor_b/large does clearly worse than vendor_a/large did"
    )
    reads_well(page, "guard-watching")

    page.goto("/")
    assert page.locator("[data-chain=chat] .live-preset .badge-guard").inner_text() == "GUARDED"
    assert page.locator("[data-chain=incident-summary] .badge-guard").count() == 0
    reads_well(page, "guard-dashboard")

    page.goto("/chains/chat/")
    card = page.locator("#guard")
    card.get_by_text("Switch the guard off…").click()
    card.get_by_label("Reason").fill("INC-4411 vendor_b slow on purpose tonight")
    card.get_by_role("button", name="Switch the guard off").click()
    page.wait_for_url(re.compile(r"/chains/chat/#guard$"))

    assert page.locator("#guard .guard-line").inner_text() == (
        "GUARD OFF Switched off by alice: INC-4411 vendor_b slow on purpose tonight"
    )
    assert "The guard on chat's pin (v2) is off" in page.locator(".messages").inner_text()
    guard.refresh_from_db()
    assert guard.state == GuardState.OFF
    reads_well(page, "guard-off")


def test_the_review_of_a_pin_made_from_an_alert_says_the_guard_will_not_act_when_the_head_was_failing(
    open_page: Callable[..., Any], alice: User, reader: Client
) -> None:
    vendor_a_failing(reader)  # why the alert was raised: restoring vendor_a would not help
    page = alert_and_review_a_pin(open_page, alice, SCREENS["390x844-dark"])
    assert page.locator("#guard-note").inner_text() == (
        "The guard will not act: vendor_a/large is failing now (50.0 % errors, p95 2500 ms (300 attempts from 3 "
        "instances)): restoring it would not help. Nothing undoes this pin by itself."
    )
    assert page.locator(".card-target .badge-guard").count() == 0  # no "Guarded" badge on what it would serve
    reads_well(page, "guard-review-will-not-act")


def test_switching_off_without_a_reason_is_refused_at_the_field(
    open_page: Callable[..., Any], alice: User, screen: Any
) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON, guard=True)
    page = open_in_new_york(open_page, alice, "/chains/chat/", screen)
    card = page.locator("#guard")
    card.get_by_text("Switch the guard off…").click()
    card.get_by_role("button", name="Switch the guard off").click()

    page.wait_for_url(re.compile(r"/chains/chat/guard/off\?review="))
    assert page.locator("#guard_reason_error").inner_text() == "is required: say why (e.g. the incident number)"
    assert page.locator("#error-summary").inner_text().startswith("The guard was not switched off.")
    assert PinGuard.objects.get().state == GuardState.WATCHING
    reads_well(page, "guard-off-refused")


def test_what_a_guard_did_reads_well_on_both_cards(
    open_page: Callable[..., Any], alice: User, screen: Any, clock: Any
) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="bob", reason=REASON, guard=True)
    clock.move_to(T0 + timedelta(minutes=9))
    restored = guards.restore(guard=PinGuard.objects.get().pk, reason=EVIDENCE, evidence={})
    assert restored is not None and Selection.objects.get(chain__name="chat").version == 3

    page = open_in_new_york(open_page, alice, "/chains/chat/", screen)
    said = page.locator(".guard-acted").inner_text()
    assert said == (
        "The guard undid pin pin_secondary (v2 by bob) at 02:09 UTC (your time: Wed 09 Dec 21:09 EST): "
        f"restored normal as v3: {EVIDENCE}"
    )
    reads_well(page, "guard-acted")

    page.goto("/")
    assert page.locator("[data-chain=chat] .guard-acted").inner_text() == said
    reads_well(page, "guard-acted-dashboard")


def in_view(page: Any, locator: Any) -> bool:
    """Whether all of ``locator`` is on the screen as it is (no scrolling)."""
    box, height = locator.bounding_box(), page.viewport_size["height"]
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def settled(page: Any) -> None:
    """Wait for the page's load and two frames after it: a browser focuses (and scrolls to) an
    autofocus field on a frame of its own."""
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def test_after_a_guard_restored_the_chain_page_opens_at_what_it_did_not_at_the_pin_form(
    open_page: Callable[..., Any], alice: User, clock: Any
) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="bob", reason=REASON, guard=True)
    clock.move_to(T0 + timedelta(minutes=9))
    assert guards.restore(guard=PinGuard.objects.get().pk, reason=EVIDENCE, evidence={}) is not None

    page = open_in_new_york(open_page, alice, "/chains/chat/", SCREENS["390x844-dark"])
    settled(page)
    assert page.evaluate("() => window.scrollY") == 0
    assert in_view(page, page.locator(".guard-acted"))
    assert in_view(page, page.locator("#live-heading")) and in_view(page, page.locator(".live-preset"))
    focused = page.evaluate("() => document.activeElement.tagName")
    assert focused not in ("INPUT", "SELECT", "TEXTAREA"), f"a plain visit put the focus in a form field ({focused})"
    reads_well(page, "guard-acted-plain-visit")

    # Come to pin from an alert, and the typing goes to the pin form's reason, as before.
    page.goto("/chains/chat/?from=alert")
    page.wait_for_function("() => document.activeElement.id === 'id_reason'")
    assert page.evaluate("() => window.scrollY") > 0
    page.keyboard.type(REASON)
    assert page.locator("#id_reason").input_value() == REASON
