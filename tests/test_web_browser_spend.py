"""What a chain costs, in a real Chromium at 390x844 in the dark theme: the chain page's Spend
panel with its plot of the last hours, and the review of a pin saying what the pin would cost
before the on-call confirms it. Each page without horizontal scrolling or any axe violation."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine
from django.contrib.auth.models import User
from django.test import Client

from tests.browser import PHONE, reads_well
from tests.health_reports import report, step


def open_phone(open_page: Callable[..., Any], user: User, path: str) -> Any:
    return open_page(user, path, color_scheme="dark", viewport=PHONE)


def words(locator: Any) -> str:
    return " ".join(locator.inner_text().split())


def a_fleet_on_vendor_a_for_hours(reader: Client) -> None:
    """Three instances report chat's traffic on vendor_a/large every 20 minutes for the last 4
    hours (1,000 input and 250 output tokens a request), and 20 to 40 minutes ago on self_hosted/8b
    (no price)."""
    now = datetime.now(UTC)
    for back in range(12, -1, -1):
        with time_machine.travel(now - timedelta(minutes=20 * back, seconds=20), tick=False):
            for n in range(3):
                steps = [
                    step(
                        "vendor_a",
                        "large",
                        {"served": 40 + back},
                        tokens=((40 + back) * 1000, (40 + back) * 250, 40 + back),
                    )
                ]
                if 1 <= back <= 2:  # in the last hour, not in the last 5 minutes
                    steps.append(step("self_hosted", "8b", {"served": 5}, tokens=(500, 50, 5)))
                assert report(reader, f"i{n}", steps).status_code == 202


def test_the_spend_panel_and_its_plot_read_well_on_a_phone_at_night(
    open_page: Callable[..., Any], alice: User, reader: Client
) -> None:
    a_fleet_on_vendor_a_for_hours(reader)
    page = open_phone(open_page, alice, "/chains/chat/#spend")
    panel = page.locator("#spend")
    summary = words(panel.locator(".spend-summary"))
    assert (
        "an hour now" in summary
        and "the last hour's is unknown (self_hosted/8b: no price in the provider registry)" in summary
    )
    row = panel.locator("li[data-step='vendor_a/large']")
    assert re.search(r"\$[0-9.]+ an hour", words(row)) and "2.50 in, 10.00 out (USD, as of 2026-12-01" in words(row)
    assert "No price in the provider registry" in words(panel.locator("li[data-step='self_hosted/8b']"))
    plot = page.get_by_role("img", name=re.compile("^Spend per hour over the last 12 hours, by step"))
    box = plot.bounding_box()
    assert box is not None and 280 <= box["width"] <= 390 and box["height"] > 100
    assert panel.locator("#spend-plot rect.plot-served-0").count() >= 4  # a bar an hour with traffic
    assert "vendor_a/large" in words(panel.locator("#spend-plot .plot-legend"))
    reads_well(page, "chain-spend")


def test_the_review_of_a_pin_says_what_it_would_cost_before_confirming(
    open_page: Callable[..., Any], alice: User, reader: Client
) -> None:
    a_fleet_on_vendor_a_for_hours(reader)
    page = open_phone(open_page, alice, "/chains/chat/?preset=pin_secondary")
    form = page.locator("#choose form")
    form.get_by_label("Reason").fill("INC-88 vendor_a slow, try vendor_b")
    form.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(r"/chains/chat/select"))
    note = words(page.locator("#cost-note"))
    assert re.fullmatch(
        r"Cost: moves about \d+ requests a minute from vendor_a/large to vendor_b/large: about "
        r"\+\$[0-9.,]+ an hour \(\$[0-9.,]+ now, about \$[0-9.,]+ after\), 3\.2× the price per token\.",
        note,
    ), note
    reads_well(page, "review-pin-cost")
