"""Planned pins in a real Chromium whose clock is in New York: planning on the browser's clock
(stored as the UTC instant), a plan's times on both clocks across the US change to summer time,
changing a plan, planning without the script (UTC), and a suspended plan's alert leading to
Start anyway; each page at 390x844 in the dark theme (and 1280x800 light), without horizontal
scrolling or any axe violation."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User

from presets import plans, services
from presets.models import PlannedPin, Selection
from tests.browser import SCREENS, reads_well

# A Wednesday; the US clocks go forward on Sunday 2027-03-14 at 02:00 (EST -> EDT).
T0 = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
NEW_YORK = "America/New_York"
REASON = "CHG-812 vendor_a maintenance window"


@pytest.fixture
def clock(open_page: Callable[..., Any]) -> Iterator[Any]:
    """The server at T0 and on (its clock moves), after the live server started."""
    with time_machine.travel(T0, tick=True) as traveller:
        yield traveller


def open_in_new_york(open_page: Callable[..., Any], user: User, path: str, screen: Any, **options: Any) -> Any:
    viewport, scheme = screen
    return open_page(
        user, path, color_scheme=scheme, viewport=viewport, timezone_id=NEW_YORK, at=options.pop("at", T0), **options
    )


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def plan_times(page: Any, plan: int) -> list[str]:
    """The plan's start and end as its Starts and Ends rows read: UTC, then the browser's clock."""
    return [row.inner_text() for row in page.locator(f"#plan-{plan} .plan-times dd").all()]


def test_a_plan_typed_on_the_browsers_clock_is_stored_in_utc_and_shown_on_both(
    open_page: Callable[..., Any], alice: User, clock: Any, screen: Any
) -> None:
    page = open_in_new_york(open_page, alice, "/chains/chat/", screen)
    form = page.locator("#plan form")

    zone = form.get_by_label("Times are in")
    assert zone.input_value() == NEW_YORK
    assert zone.locator("option").all_inner_texts() == ["UTC", "America/New_York (this browser)"]
    assert form.locator("label", has_text="Start").inner_text().startswith("Start in America/New_York")
    form.get_by_label("Preset").select_option("pin_secondary")
    # Across the change to summer time: 01:00 EST to 04:00 EDT is two hours.
    form.get_by_label("Start").fill("2027-03-14T01:00")
    form.get_by_label("End").fill("2027-03-14T04:00")
    assert (
        form.locator("[data-zone-preview]").inner_text()
        == "In UTC: Sun 14 Mar 06:00 UTC to Sun 14 Mar 08:00 UTC (2 h)."
    )
    form.get_by_label("Reason").fill(REASON)
    reads_well(page, "chain-plan-form")
    form.get_by_role("button", name="Plan the pin").click()

    held = PlannedPin.objects.get()
    page.wait_for_url(re.compile(rf"/chains/chat/#plan-{held.pk}$"))
    assert (held.starts_at, held.ends_at) == (
        datetime(2027, 3, 14, 6, tzinfo=UTC),
        datetime(2027, 3, 14, 8, tzinfo=UTC),
    )
    assert plan_times(page, held.pk) == [
        "Sun 14 Mar 06:00 UTC (Sun 14 Mar 01:00 EST)",
        "Sun 14 Mar 08:00 UTC (Sun 14 Mar 04:00 EDT)",
    ]
    assert f"Planned pin #{held.pk} on chat: at 06:00 UTC Sun 2027-03-14" in page.locator(".messages").inner_text()
    assert live().version == 1
    reads_well(page, "chain-planned")

    # The dashboard's card: the next plan, with its start on this clock too.
    page.goto("/")
    note = page.locator("[data-chain=chat] .plan-note")
    assert note.inner_text() == (
        f"Planned: at 06:00 UTC Sun 2027-03-14: pin_secondary until 08:00 UTC, planned by alice because {REASON} "
        "(your time: Sun 14 Mar 01:00 EST)"
    )
    reads_well(page, "dashboard-planned")


def test_a_time_the_clock_skips_is_said_before_sending_and_refused_at_its_field(
    open_page: Callable[..., Any], alice: User, clock: Any
) -> None:
    page = open_in_new_york(open_page, alice, "/chains/chat/", SCREENS["390x844-dark"])
    form = page.locator("#plan form")
    form.get_by_label("Preset").select_option("pin_secondary")
    form.get_by_label("Start").fill("2027-03-14T02:30")
    form.get_by_label("End").fill("2027-03-14T04:00")
    assert form.locator("[data-zone-preview]").inner_text() == (
        "Start 02:30 does not exist in America/New_York: the clocks go forward then."
    )
    form.get_by_label("Reason").fill(REASON)
    form.get_by_role("button", name="Plan the pin").click()

    page.wait_for_url(re.compile(r"/chains/chat/plans\?review="))
    summary = page.get_by_role("alert")
    assert "Nothing was planned" in summary.inner_text()
    assert (
        "02:30 does not exist on Sun 14 Mar 2027 in America/New_York"
        in page.locator("#plan_starts_at_error").inner_text()
    )
    # Sent back as it was typed, on the clock it was typed on.
    assert page.locator("#plan_zone").input_value() == NEW_YORK
    assert page.locator("#plan_starts_at").input_value() == "2027-03-14T02:30"
    assert PlannedPin.objects.count() == 0
    reads_well(page, "chain-plan-refused")


def test_a_plans_change_form_shows_it_on_the_browsers_clock(
    open_page: Callable[..., Any], alice: User, clock: Any
) -> None:
    held = plans.plan_pin(
        chain="chat",
        preset="pin_secondary",
        starts_at=datetime(2027, 3, 14, 6, tzinfo=UTC),
        ends_at=datetime(2027, 3, 14, 8, tzinfo=UTC),
        actor="alice",
        reason=REASON,
    )
    page = open_in_new_york(open_page, alice, f"/chains/chat/#plan-{held.pk}", SCREENS["390x844-dark"])
    page.get_by_text(f"Change plan #{held.pk}").first.click()
    change = page.locator(f"#plan-{held.pk}-change form")
    assert change.get_by_label("Times are in").input_value() == NEW_YORK
    assert change.get_by_label("Start").input_value() == "2027-03-14T01:00"
    assert change.get_by_label("End").input_value() == "2027-03-14T04:00"
    change.get_by_label("End").fill("2027-03-14T05:00")
    change.get_by_label("Reason").fill("CHG-812 one more hour")
    reads_well(page, "chain-plan-change")
    change.get_by_role("button", name=f"Change plan #{held.pk}").click()

    page.wait_for_url(re.compile(rf"#plan-{held.pk}$"))
    held.refresh_from_db()
    assert (held.starts_at, held.ends_at) == (
        datetime(2027, 3, 14, 6, tzinfo=UTC),
        datetime(2027, 3, 14, 9, tzinfo=UTC),
    )
    assert plan_times(page, held.pk)[1] == "Sun 14 Mar 09:00 UTC (Sun 14 Mar 05:00 EDT)"


def test_without_the_script_the_times_are_utc(open_page: Callable[..., Any], alice: User, clock: Any) -> None:
    page = open_in_new_york(open_page, alice, "/chains/chat/", SCREENS["390x844-dark"], javascript=False)
    form = page.locator("#plan form")
    assert form.get_by_label("Times are in").locator("option").all_inner_texts() == ["UTC"]
    form.get_by_label("Preset").select_option("local_only")
    form.get_by_label("Start").fill("2027-03-14T01:00")
    form.get_by_label("End").fill("2027-03-14T04:00")
    form.get_by_label("Reason").fill(REASON)
    form.get_by_role("button", name="Plan the pin").click()

    held = PlannedPin.objects.get()
    page.wait_for_url(re.compile(rf"#plan-{held.pk}$"))
    assert (held.starts_at, held.ends_at) == (
        datetime(2027, 3, 14, 1, tzinfo=UTC),
        datetime(2027, 3, 14, 4, tzinfo=UTC),
    )
    assert plan_times(page, held.pk) == ["Sun 14 Mar 01:00 UTC", "Sun 14 Mar 04:00 UTC"]


def test_a_suspended_plans_alert_leads_to_start_anyway(
    open_page: Callable[..., Any], alice: User, clock: Any, screen: Any
) -> None:
    held = plans.plan_pin(
        chain="chat",
        preset="pin_secondary",
        starts_at=T0 + timedelta(hours=1),
        ends_at=T0 + timedelta(hours=3),
        actor="alice",
        reason=REASON,
    )
    services.select_preset(
        chain="chat",
        preset="drop_vendor_b",
        actor="carol",
        reason="INC-9 vendor_b leaks",
        expires_at=timedelta(hours=4),
    )
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    assert plans.run_plans().suspended == [held.pk]
    now = T0 + timedelta(hours=1, seconds=5)

    page = open_in_new_york(open_page, alice, "/alerts/", screen, at=now)
    alert = page.locator(".alert-item").first
    assert alert.inner_text().startswith(f"OPEN plan_suspended plan #{held.pk} on chat")
    assert "did not start by itself: chat was changed by carol" in alert.inner_text()
    cancel = alert.get_by_role("link", name=f"Cancel plan #{held.pk}…")
    assert cancel.is_visible()
    reads_well(page, "alerts-plan-suspended")

    alert.get_by_role("link", name=f"Start plan #{held.pk} anyway…").click()
    page.wait_for_url(re.compile(rf"/chains/chat/\?plan={held.pk}&action=start$"))
    item = page.locator(f"#plan-{held.pk}")
    assert "Starting it replaces the pin of drop_vendor_b (v2, pinned by carol, until 16:00 UTC)" in item.inner_text()
    page.wait_for_function(f"() => document.activeElement.id === 'plan{held.pk}_start_reason'")  # as it opens
    reads_well(page, "chain-plan-suspended")
    page.keyboard.type("CHG-812 carol agreed")
    item.get_by_role("button", name=f"Start plan #{held.pk} anyway").click()

    page.wait_for_url(re.compile(rf"/chains/chat/#plan-{held.pk}$"))
    assert f"Plan #{held.pk} started anyway. chat is now v3: pin_secondary" in page.locator(".messages").inner_text()
    held.refresh_from_db()
    assert (held.state, live().preset.name, live().expires_at) == ("started", "pin_secondary", held.ends_at)
    page.goto("/alerts/")
    assert page.get_by_role("link", name=re.compile("anyway")).count() == 0
    assert page.locator(".alert-item").first.inner_text().startswith("RESOLVED")


def test_the_dashboard_shows_a_suspended_plan_loudly(
    open_page: Callable[..., Any], alice: User, clock: Any, screen: Any
) -> None:
    held = plans.plan_pin(
        chain="incident-summary",
        preset="local_only",
        starts_at=T0 + timedelta(hours=1),
        ends_at=T0 + timedelta(hours=2),
        actor="alice",
        reason=REASON,
    )
    services.select_preset(chain="incident-summary", preset="local_only", actor="carol", reason="INC-10")
    services.revert_to_default(chain="incident-summary", actor="carol", reason="INC-10 over")
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    assert plans.run_plans().suspended == [held.pk]

    page = open_in_new_york(open_page, alice, "/", screen, at=T0 + timedelta(hours=1, seconds=5))
    strip = page.locator(".strip-plan-suspended")
    assert strip.inner_text() == f"Plan #{held.pk} suspended: local_only did not start by itself"
    note = page.locator("[data-chain=incident-summary] .plan-note-suspended")
    assert note.get_by_role("link", name=f"Start plan #{held.pk} anyway…").is_visible()
    reads_well(page, "dashboard-plan-suspended")


def test_a_suspended_plan_says_why_it_waits_on_the_chain_as_it_is_now(
    open_page: Callable[..., Any], alice: User, clock: Any
) -> None:
    services.select_preset(
        chain="chat",
        preset="drop_vendor_b",
        actor="carol",
        reason="INC-9 vendor_b leaks",
        expires_at=timedelta(hours=2),
    )
    held = plans.plan_pin(
        chain="chat",
        preset="pin_secondary",
        starts_at=T0 + timedelta(hours=1),
        ends_at=T0 + timedelta(hours=4),
        actor="alice",
        reason=REASON,
    )
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    assert plans.run_plans().suspended == [held.pk]
    then = "chat serves the pin drop_vendor_b (v2 by carol, until 14:00 UTC)"
    clock.move_to(T0 + timedelta(hours=2, minutes=1))  # carol's pin has expired since: the system's change
    viewport, scheme = SCREENS["390x844-dark"]

    page = open_page(alice, "/chains/chat/", color_scheme=scheme, viewport=viewport, at=T0 + timedelta(hours=2))
    why = page.locator(f"#plan-{held.pk} .plan-why")
    assert why.inner_text().startswith("Did not start by itself. Nothing on chat stops it starting now")
    assert (
        page.locator(".plan-note-suspended")
        .inner_text()
        .startswith(f"PLAN SUSPENDED Plan #{held.pk} did not start by itself. Nothing on chat stops it starting now")
    )

    clock.move_to(T0 + timedelta(hours=2, minutes=5))
    services.select_preset(chain="chat", preset="local_only", actor="bob", reason="INC-10 vendor_a down")
    page.reload()
    now = "What stops it starting by itself now: chat was changed by bob at 14:05 UTC after it was planned (v4"
    assert why.inner_text().startswith(f"Did not start by itself. {now}") and then not in why.inner_text()
    assert now in page.locator(".plan-note-suspended").inner_text()
    page.locator(f"#plan-{held.pk} .plan-events summary").click()
    assert (
        f"suspended by system:schedule, Wed 10 Mar 13:00 UTC: {then}"
        in page.locator(f"#plan-{held.pk} .plan-events").inner_text()
    )  # why it was suspended at the time
    reads_well(page, "chain-plan-waiting-now")

    page.goto("/alerts/")
    alert = page.locator(".alert-item").first
    assert alert.locator(".alert-message").inner_text().startswith(now)
    assert f"When raised: chat: planned pin #{held.pk} did not start by itself: {then}" in alert.inner_text()
    reads_well(page, "alerts-plan-waiting-now")
