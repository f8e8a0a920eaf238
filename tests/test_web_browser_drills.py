"""Failover drills in a real Chromium at 390x844 in the dark theme: a drill started from the chain
page's Drills card, watched on its report as the fleet's reports come in (the page follows it by
itself), and aborted there with one click; a judged drill's report with its two plots; each
chain's and each preset's last drill, and a running one on the dashboard. Each page without
horizontal scrolling or any axe violation."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine
from django.contrib.auth.models import User
from django.db import transaction

from audit import drills as fleet_drills
from presets.models import Chain, Drill, Selection
from presets.wire import LATENCY_BOUNDS_MS
from tests.browser import PHONE, Clicks, reads_well

REASON = "Q4 failover drill of vendor_a"
BUCKETS = len(LATENCY_BOUNDS_MS) + 1


def open_phone(open_page: Callable[..., Any], user: User, path: str, **options: Any) -> Any:
    """The page on a phone at night: 390x844, dark."""
    return open_page(user, path, color_scheme="dark", viewport=PHONE, **options)


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def latency(*counts: int) -> tuple[int, ...]:
    return (*counts, *(0,) * (BUCKETS - len(counts)))


def report(drill: Drill, client: str, *, at: datetime, **counts: Any) -> None:
    """An instance's usage report's drill section, taken as the API takes it."""
    chain = Chain.objects.get(pk=drill.chain_id)
    section = fleet_drills.Section(id=drill.pk, **counts)
    with transaction.atomic():  # the usage report's transaction
        assert fleet_drills.record(chain=chain, token="checkout", client=client, section=section, now=at)
    fleet_drills.check_stop(drill=drill.pk, now=at)


def words(locator: Any) -> str:
    """A locator's text on one line."""
    return " ".join(locator.inner_text().split())


def passed_drill() -> Drill:
    """A drill of chat that ran 5 minutes from the start of this minute, two instances taking
    part, then passed (the server's clock moved for it, then back to now)."""
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    with time_machine.travel(start, tick=False) as clock:
        drill = fleet_drills.start_drill(
            chain="chat", hop=1, fault="rate_limited", share=10, minutes=5, reason=REASON, actor="carol"
        )
        for minute in range(5):
            at = start + timedelta(minutes=minute, seconds=30)
            for n in (0, 1):
                report(
                    drill,
                    f"checkout/pod-{n}",
                    at=at,
                    requests=100 + 10 * minute,
                    drilled=10 + minute,
                    ended_on={"2": 9 + minute, "3": 1},
                    fallback_attempts=10 + minute,
                    latency_drilled=latency(0, 0, 5, 5 + minute * n),
                    latency_other=latency(0, 80, 20),
                )
        clock.move_to(drill.ends_at + timedelta(seconds=1))
        fleet_drills.run_drills()
        clock.move_to(drill.ends_at + timedelta(seconds=20))
        fleet_drills.run_drills()
    drill.refresh_from_db()
    assert drill.verdict == "passed", drill.reasons
    return drill


def test_a_drill_started_from_the_chain_page_is_watched_on_its_report_and_aborted_with_one_click(
    open_page: Callable[..., Any], alice: User
) -> None:
    page = open_phone(open_page, alice, "/chains/chat/#drills", fake_clock=True)
    form = page.locator("form#drill")
    assert form.get_by_label("Hop to fail").locator("option").all_inner_texts() == [
        "Hop 1: vendor_a/large (then vendor_b/large)",
        "Hop 2: vendor_b/large (then self_hosted/8b)",
    ]
    form.get_by_label("Fault").select_option(label="Rate limiting (HTTP 429)")
    form.get_by_label("Share of requests, in %").fill("5")
    form.get_by_label("Minutes").fill("10")
    form.get_by_label("Reason").fill(REASON)
    reads_well(page, "chain-drill-form")
    form.get_by_role("button", name="Start or plan the drill").click()

    drill = Drill.objects.get()
    page.wait_for_url(re.compile(rf"/drills/{drill.pk}/$"))
    assert (drill.state, drill.fault, drill.share_bp, drill.minutes) == ("running", "rate_limited", 500, 10)
    assert live().to_document()["drill"]["id"] == drill.pk
    assert page.locator("#drill-verdict .badge").inner_text() == "RUNNING"
    assert f"Drill #{drill.pk} started on chat (v2)" in page.locator(".messages").inner_text()
    assert "No minute reported yet" in page.locator("#drill-plots").inner_text()
    reads_well(page, "drill-running-empty")

    # The fleet reports; the page follows by itself, without a reload.
    report(
        drill,
        "checkout/pod-0",
        at=drill.starts_at,
        requests=200,
        drilled=10,
        ended_on={"2": 10},
        latency_drilled=latency(0, 0, 10),
        latency_other=latency(0, 190),
    )
    page.evaluate("() => { window.notReloaded = true; }")
    page.clock.run_for(5_000)
    page.wait_for_function(
        "() => document.querySelector('#drill-totals').innerText.includes('10 of 200 requests (5.0 %)')"
    )
    assert page.evaluate("() => window.notReloaded") is True
    assert page.locator("#drill-plots svg.plot").count() == 2
    assert "checkout/pod-0" in page.locator("#drill-instances").inner_text()
    reads_well(page, "drill-running")

    # Abort: its reason is prefilled; one click.
    clicks = Clicks()
    assert page.get_by_label("Reason").input_value() == "stopped by hand"
    clicks(page.get_by_role("button", name=f"Abort drill #{drill.pk}"))
    page.wait_for_url(re.compile(rf"/drills/{drill.pk}/$"))
    page.wait_for_selector("#drill-verdict .badge-drill-aborted")
    assert clicks.count == 1
    assert f"Drill #{drill.pk} on chat aborted: chat is now v3, without it." in page.locator(".messages").inner_text()
    assert "Aborted by alice: stopped by hand" in page.locator("#drill-verdict").inner_text()
    assert page.get_by_role("button", name=re.compile("Abort")).count() == 0
    drill.refresh_from_db()
    assert (drill.state, drill.verdict) == ("ended", "aborted")
    assert "drill" not in live().to_document()
    reads_well(page, "drill-aborted")


def test_a_judged_drills_report_reads_well_with_its_plots(open_page: Callable[..., Any], alice: User) -> None:
    drill = passed_drill()
    page = open_phone(open_page, alice, f"/drills/{drill.pk}/")

    assert page.locator("#drill-verdict .badge").inner_text() == "PASSED"
    assert "All 120 drilled request(s) were served by the fallback" in page.locator("#drill-verdict").inner_text()
    latency_plot = page.get_by_role("img", name=re.compile("^Latency per minute over 5 min"))
    hops_plot = page.get_by_role("img", name=re.compile("^Drilled requests per minute over 5 min"))
    for plot in (latency_plot, hops_plot):
        box = plot.bounding_box()
        assert box is not None and 300 <= box["width"] <= 390 and box["height"] > 100
    assert page.locator("#latency-plot svg.plot polyline").count() == 4
    assert page.locator("#hops-plot svg.plot rect.plot-served-0").count() == 5  # a bar a minute, hop 2
    assert "served by hop 2 (vendor_b/large)" in page.locator("#hops-plot .plot-legend").inner_text()
    # Every figure the plots draw is in the table too.
    page.get_by_text("The figures, minute by minute (5)").click()
    assert page.locator(".drill-minutes tbody tr").count() == 5
    # Judged: nothing left to follow.
    assert page.locator("[data-live-every]").count() == 0
    reads_well(page, "drill-passed")


def test_the_last_drill_shows_on_the_dashboard_and_on_each_preset(open_page: Callable[..., Any], alice: User) -> None:
    drill = passed_drill()
    page = open_phone(open_page, alice, "/")
    card = page.locator("section[data-chain=chat]")
    badge = card.locator(".last-drill")
    assert re.fullmatch(rf"DRILL PASSED Drilled \d\d:\d\d UTC at v{drill.started_version} \(normal\)", words(badge))
    assert page.locator("section[data-chain=incident-summary] .last-drill").count() == 0
    reads_well(page, "dashboard-drilled")

    badge.get_by_role("link").click()
    page.wait_for_url(re.compile(rf"/drills/{drill.pk}/$"))
    page.get_by_role("navigation", name="Breadcrumb").get_by_role("link", name="chat").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    presets = page.locator(".preset-drills")
    assert re.search(
        rf"normal \(default\): DRILL PASSED Drilled \d\d:\d\d UTC at v{drill.started_version}", words(presets)
    )
    assert "pin_secondary: never drilled" in words(presets)
    assert f"Drill #{drill.pk}" in page.locator(".drill-list").inner_text()
    page.locator("#drills").scroll_into_view_if_needed()
    reads_well(page, "chain-drilled")

    # A running drill shows on the dashboard's card and strip.
    running = fleet_drills.start_drill(
        chain="incident-summary", hop=1, fault="timeout", share=1, reason=REASON, actor="carol"
    )
    page.goto("/")
    other = page.locator("section[data-chain=incident-summary]")
    assert other.locator(".badge-drill-running").inner_text() == "DRILL RUNNING"
    other.get_by_role("link", name=f"Drill #{running.pk}: watch its report").click()
    page.wait_for_url(re.compile(rf"/drills/{running.pk}/$"))
    assert datetime.now(UTC) < running.ends_at
