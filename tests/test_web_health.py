"""Provider health on the on-call pages: each live step's error rate, latency and reporting
instances in words and a server-drawn sparkline, a "failing now" line on the dashboard, both
heads on the review page, and a suggested (never applied) healthier preset."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.provider_health import SPARK_MINUTES
from pages.display import StepRow
from pages.templatetags.oncall import sparkline
from presets.models import Selection
from tests.health_reports import latency, report, step, vendor_a_failing

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 30, 2, 0, 30, tzinfo=UTC)
REASON = "INC-4411 vendor_a answers 503"


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def text(html: str) -> str:
    """What a person reads: the markup gone, whitespace folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def card(html: str, chain: str) -> str:
    """One chain's card on the dashboard."""
    match = re.search(rf'<section class="card[^"]*"[^>]*data-chain="{chain}".*?</section>', html, re.S)
    assert match, f"no card for {chain}"
    return match.group(0)


def step_line(html: str, label: str) -> str:
    match = re.search(rf'<li class="step step-(\w+)"><span class="step-name">{label}</span>.*?</li>', html, re.S)
    assert match, f"no step {label}"
    return match.group(0)


def test_with_no_reports_the_pages_say_nothing_about_health(oncall: Client) -> None:
    html = page(oncall, "/")

    assert "Failing now" not in html
    assert "step-health" not in html
    assert "Healthier now" not in html
    assert 'class="step step-quiet"' in html


def test_the_dashboard_names_the_failing_provider_and_each_step_reads_its_health(
    oncall: Client, reader: Client
) -> None:
    with time_machine.travel(T0, tick=False):
        vendor_a_failing(reader)
        html = page(oncall, "/")

    failing = re.search(r'<section class="failing-now".*?</section>', html, re.S)
    assert failing, "no failing-now line"
    assert text(failing.group(0)) == (
        "Failing now vendor_a/large on chat: 50.0 % errors (mostly 5xx) over the last 5 min, 150 of 300 attempts"
    )
    assert 'href="/chains/chat/"' in failing.group(0)
    # Above every card: the first thing an on-call person reads.
    assert html.index("failing-now") < html.index('class="card')

    chat = card(html, "chat")
    head = step_line(chat, "vendor_a/large")
    assert 'class="step step-failing"' in head
    assert "vendor_a: 50.0 % errors (mostly 5xx), p95 2.5 s, 3 instances" in text(head)
    second = step_line(chat, "vendor_b/large")
    assert 'class="step step-ok"' in second
    assert "vendor_b: 0.0 % errors, p95 1 s, 3 instances" in text(second)
    assert 'class="step step-quiet"' in step_line(chat, "self_hosted/8b")
    assert "step-health" not in step_line(chat, "self_hosted/8b")  # nobody reported on it
    # The other chain's steps were never reported on for it.
    assert "step-health" not in card(html, "incident-summary")


def test_a_streamed_step_reads_its_time_to_first_chunk_beside_its_latency(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(2):
            report(
                reader,
                f"pod-{n}",
                [
                    step(
                        "vendor_a",
                        "large",
                        {"served": 19, "interrupted": 1},
                        latency(b5=19),
                        first_chunk=latency(b1=20),
                    ),
                    step("vendor_b", "large", {"served": 5}, latency(b3=5)),
                ],
            )
        chat = card(page(oncall, "/"), "chat")

    assert "vendor_a: 5.0 % errors (mostly interrupted streams), p95 5 s, first chunk p95 250 ms, 2 instances" in text(
        step_line(chat, "vendor_a/large")
    )
    # A step nobody streamed from says nothing of first chunks.
    assert text(step_line(chat, "vendor_b/large")).endswith("vendor_b: 0.0 % errors, p95 1 s, 2 instances")


def test_a_healthier_reviewed_preset_is_suggested_with_a_link_to_review_it_never_applied(
    oncall: Client, viewer: Client, reader: Client
) -> None:
    with time_machine.travel(T0, tick=False):
        vendor_a_failing(reader)
        html = card(page(oncall, "/"), "chat")
        chain_html = page(oncall, "/chains/chat/")
        as_viewer = card(page(viewer, "/"), "chat")

    suggestion = re.search(r'<p class="suggestion".*?</p>', html, re.S)
    assert suggestion, "no suggestion"
    assert text(suggestion.group(0)) == (
        "Healthier now: pin_secondary, its head vendor_b: 0.0 % errors, p95 1 s, 3 instances. Review pin_secondary…"
    )
    # No #fragment: a page opened at one skips autofocus, and the reason box must take it. A pin
    # made from it is guarded by default (``from=alert``, tests/test_web_guards.py).
    assert 'href="/chains/chat/?preset=pin_secondary&amp;from=alert"' in suggestion.group(0)
    assert 'data-suggested="pin_secondary"' in chain_html
    # Nothing was changed by showing it; a viewer reads it without a link to act on.
    assert Selection.objects.get(chain__name="chat").preset.name == "normal"
    assert "Healthier now: pin_secondary" in text(as_viewer)
    assert "Review pin_secondary" not in as_viewer


def test_a_step_reads_failing_by_the_same_rule_as_the_failing_now_line(oncall: Client, reader: Client) -> None:
    # Two errors in three attempts: too few attempts to judge (PROVIDER_FAILING_MIN_ATTEMPTS).
    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 1, "server_error": 2})])
        few = page(oncall, "/")
        report(reader, "i1", [step("vendor_a", "large", {"served": 9, "server_error": 18})])
        enough = page(oncall, "/")

    assert 'class="step step-ok"' in step_line(card(few, "chat"), "vendor_a/large")
    assert "Failing now" not in few and "Healthier now" not in few
    assert 'class="step step-failing"' in step_line(card(enough, "chat"), "vendor_a/large")
    assert "Failing now" in enough


def test_no_suggestion_while_the_live_head_is_healthy(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 100}), step("vendor_b", "large", {"served": 5})])
        html = page(oncall, "/")

    assert "Healthier now" not in html
    assert "Failing now" not in html
    assert 'class="step step-ok"' in step_line(card(html, "chat"), "vendor_a/large")


def test_the_review_page_shows_the_health_of_both_heads(oncall: Client, reader: Client) -> None:
    data = {"preset": "pin_secondary", "duration_minutes": "60", "reason": REASON, "expected_version": "1"}
    with time_machine.travel(T0, tick=False):
        vendor_a_failing(reader)
        response = oncall.post("/chains/chat/select", data, follow=True)
    assert response.status_code == 200
    html = response.content.decode()

    live, after = html.split('id="after-heading"')
    assert "vendor_a: 50.0 % errors (mostly 5xx), p95 2.5 s, 3 instances" in text(step_line(live, "vendor_a/large"))
    assert "vendor_b: 0.0 % errors, p95 1 s, 3 instances" in text(step_line(after, "vendor_b/large"))
    # The target's fallback is the failing vendor: the review says so at that step.
    assert 'class="step step-failing"' in step_line(after, "vendor_a/large")
    assert Selection.objects.get(chain__name="chat").version == 1  # reviewed, not applied


def test_the_chain_page_shows_each_reviewed_presets_steps_with_their_health(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        vendor_a_failing(reader)
        html = page(oncall, "/chains/chat/")

    choice = re.split(r'<div class="choice[ "]', html.split('id="preset-drop_vendor_b"')[1])[0]
    assert 'class="step step-failing"' in step_line(choice, "vendor_a/large")
    assert "step-health" not in step_line(choice, "self_hosted/8b")


def test_a_quiet_step_reads_as_quiet_and_the_sparkline_keeps_its_history(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 10, "timeout": 10})])
    with time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        html = step_line(card(page(oncall, "/"), "chat"), "vendor_a/large")

    assert 'class="step step-quiet"' in html
    assert "vendor_a: no attempts reported in the last 5 min (0 instances)" in text(html)
    # Twenty minutes ago: one red bar at half height, the rest of the window empty.
    assert html.count('class="spark-bad"') == 1
    assert html.count('class="spark-none"') == SPARK_MINUTES - 1
    assert 'aria-label="Error rate per minute over the last 30 min: highest 50 %, latest 50 %"' in html


def test_the_sparkline_draws_one_bar_a_minute_scaled_to_the_error_rate(settings: Any) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    rates: list[float | None] = [None] * (SPARK_MINUTES - 3) + [0.0, 0.5, 1.0]
    health: Any = {"sparkline": rates}

    svg = str(sparkline(StepRow({"provider": "p", "model": "m"}, health)))

    assert svg.startswith('<svg class="sparkline" viewBox="0 0 90 16" width="90" height="16" role="img"')
    assert "<title>Error rate per minute over the last 30 min: highest 100 %, latest 100 %</title>" in svg
    bars = re.findall(r'<rect class="(spark-\w+)" x="(\d+)" y="(\d+)" width="2" height="(\d+)"/>', svg)
    assert len(bars) == SPARK_MINUTES
    assert bars[-3:] == [("spark-ok", "81", "15", "1"), ("spark-bad", "84", "8", "8"), ("spark-bad", "87", "0", "16")]
    assert {bar[0] for bar in bars[:-3]} == {"spark-none"}
    assert str(sparkline(StepRow({"provider": "p", "model": "m"}))) == ""


@pytest.mark.slow
def test_health_costs_the_dashboard_the_same_queries_however_many_steps_and_minutes_were_reported(
    oncall: Client, reader: Client
) -> None:
    """Slow on purpose (~60 reports through the API): the query count is compared before and
    after 29 minutes of reports on more steps, and only those reports make them."""

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page(oncall, "/")
        return len(captured)

    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 1})])
        few = queries()
    for minute in range(1, 30):
        with time_machine.travel(T0 + timedelta(minutes=minute), tick=False):
            vendor_a_failing(reader)
            report(reader, "i9", [step("self_hosted", "vision-11b", {"served": 3})], chain="incident-summary")
    with time_machine.travel(T0 + timedelta(minutes=29), tick=False):
        many = queries()

    assert many == few


def strip_item(html: str, chain: str) -> str:
    """One chain's line in the dashboard's summary strip."""
    match = re.search(
        rf'<li class="strip-item[^"]*">\s*<span class="strip-line"><a href="#chain-{chain}">.*?</li>', html, re.S
    )
    assert match, f"no strip line for {chain}"
    return match.group(0)


def test_a_default_chain_whose_head_is_failing_is_not_shown_green(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        healthy = page(oncall, "/")
        vendor_a_failing(reader)
        html = page(oncall, "/")

    assert 'class="strip-item strip-default"' in strip_item(healthy, "chat")
    assert 'class="card card-default"' in card(healthy, "chat")
    assert "Head failing" not in healthy

    line, chat = strip_item(html, "chat"), card(html, "chat")
    assert 'class="strip-item strip-failing"' in line
    assert 'class="card card-failing"' in chat
    # In words too, not colour alone: which step, and the figures.
    assert "Head failing" in text(line)
    assert "Head vendor_a/large failing: vendor_a: 50.0 % errors (mostly 5xx)" in text(line)
    assert "Its live head vendor_a/large is failing: vendor_a: 50.0 % errors" in text(chat)
    # The other chain's head was never reported on: it stays as it was.
    assert 'class="strip-item strip-default"' in strip_item(html, "incident-summary")
    assert 'class="card card-default"' in card(html, "incident-summary")


def test_a_failing_step_behind_a_healthy_head_leaves_the_card_as_it_was(oncall: Client, reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(
                reader,
                f"pod-{n}",
                [
                    step("vendor_a", "large", {"served": 100}),
                    step("vendor_b", "large", {"served": 5, "server_error": 20}),
                ],
            )
        html = page(oncall, "/")

    assert 'class="step step-failing"' in step_line(card(html, "chat"), "vendor_b/large")
    assert 'class="card card-default"' in card(html, "chat")
    assert 'class="strip-item strip-default"' in strip_item(html, "chat")
    assert "Head failing" not in html
