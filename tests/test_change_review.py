"""One review of a change on every surface (``audit.change_review``): the same change, reviewed
on the pages (the review page), in Slack (the modal its button opens) and on the command line
(``select_preset``'s lines), names the same target, the same end, the same dangers and, refused,
the same words; and the review's guard line says what the guard would do on today's evidence."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from audit import actions, change_review
from chatops import reviews
from presets import services
from presets.documents import format_clock, format_time
from presets.models import Selection
from tests.commands import refusal, run
from tests.health_reports import vendor_a_failing

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def live() -> Selection:
    return services.revert_expired_and_read(chain="chat")


def on_the_page(oncall: Client, preset: str) -> str:
    """The review page of pinning ``preset`` on chat for an hour, as its text."""
    response = oncall.post(
        "/chains/chat/select",
        {"preset": preset, "duration_minutes": "60", "reason": "INC-1", "expected_version": str(live().version)},
        follow=True,
    )
    assert response.status_code in (200, 400), response.status_code
    return response.content.decode()


def page_items(page: str, pattern: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>|\s+", " ", item)).strip() for item in re.findall(pattern, page, re.S)]


def in_slack(preset: str) -> str:
    """The text of the modal the Slack button to pin ``preset`` for an hour opens (or its refusal)."""
    action = actions.Action(actions.PIN, "chat", live().version, preset=preset, minutes=60)
    try:
        view = reviews.modal(action, live(), metadata={})
    except reviews.Refused as refused:
        return str(refused)
    return html.unescape(view["blocks"][0]["text"]["text"])


def test_the_same_pin_is_reviewed_alike_on_the_pages_in_slack_and_on_the_command_line(
    oncall: Client, reader: Client
) -> None:
    vendor_a_failing(reader)
    review = change_review.review_pin(live(), preset="drop_vendor_b", expires_at=timedelta(minutes=60), guard=None)
    until = T0 + timedelta(minutes=60)
    assert (review.target, review.until) == ("drop_vendor_b", until)
    # Two dangers: the dropped provider and the failing head.
    assert len(review.dangers) == 2 and "vendor_b will get no chat traffic" in review.dangers

    page = on_the_page(oncall, "drop_vendor_b")
    after = re.search(r'<section class="card card-target"(.*?)</section>', page, re.S)  # "After you confirm"
    assert after is not None
    assert page_items(after.group(1), r'<span class="preset-name">(.*?)</span>') == ["drop_vendor_b"]
    assert format_clock(until, now=T0) in page_items(after.group(1), r'<p class="expiry">(.*?)</p>')[0]
    note = re.search(r'<div class="danger-note" id="check-first">(.*?)</div>', page, re.S)
    assert note is not None
    assert page_items(note.group(1), r"<li>(.*?)</li>") == review.dangers

    slack = in_slack("drop_vendor_b")
    assert "→ *drop_vendor_b*" in slack
    assert f"Pinned until {format_clock(until, now=T0)}" in slack
    assert [line.removeprefix(":warning: Check first: ") for line in slack.splitlines() if "Check first" in line] == (
        review.dangers
    )

    lines = run("select_preset", "chat", "drop_vendor_b", "--minutes", "60", "--reason", "INC-1").splitlines()
    assert lines[0].startswith(f"chat v2: drop_vendor_b (pinned until {format_time(until)}")
    assert [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")] == review.dangers


def test_the_same_refusal_is_said_in_the_same_words_on_the_pages_in_slack_and_on_the_command_line(
    oncall: Client,
) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
    review = change_review.review_pin(live(), preset="pin_secondary", expires_at=timedelta(minutes=60), guard=None)
    assert review.refusal is not None
    words = review.refusal.field_message
    assert words == "'pin_secondary' is already live on chat: use extend to keep it longer"

    assert words in html.unescape(on_the_page(oncall, "pin_secondary"))
    assert in_slack("pin_secondary") == f"Nothing can be done: {words}."
    assert refusal("select_preset", "chat", "pin_secondary", "--minutes", "60", "--reason", "INC-2") == (
        f"PRESET: {words}"
    )
    assert live().version == 2  # nothing was changed anywhere


def test_a_reviewed_guard_that_could_not_act_is_not_offered_as_one(reader: Client) -> None:
    """The review of a pin made from a provider alert (the head it replaces failing) says the
    guard will not act, on every surface, rather than promising one."""
    vendor_a_failing(reader)
    forecast = change_review.guard_forecast(live(), live().chain.presets.get(name="pin_secondary").steps, asked=True)
    assert not forecast.acts
    assert forecast.text.startswith("The guard will not act: vendor_a/large is failing now")
    assert forecast.text in in_slack("pin_secondary")  # Slack's pins are guarded
    assert (
        f"warning: {forecast.text}"
        in run("select_preset", "chat", "pin_secondary", "--guard", "--minutes", "60", "--reason", "INC-1").splitlines()
    )
