"""How the on-call pages word durations, times and what a preset changes (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pages.display import compare_steps, format_clock
from presets.documents import format_duration


def step(provider: str, model: str = "large") -> dict:
    return {"provider": provider, "model": model, "timeout_ms": 20000}


NORMAL = [step("vendor_a"), step("vendor_b"), step("self_hosted", "8b")]


@pytest.mark.parametrize(
    ("span", "text"),
    [
        (timedelta(seconds=0), "0 s"),
        (timedelta(seconds=-5), "0 s"),
        (timedelta(seconds=59), "59 s"),
        (timedelta(minutes=12), "12 min"),
        (timedelta(hours=4) - timedelta(seconds=1), "4 h"),
        (timedelta(hours=3, minutes=12), "3 h 12 min"),
        (timedelta(hours=24), "24 h"),
    ],
    ids=["zero", "negative", "seconds", "minutes", "rounds-to-the-minute", "hours-and-minutes", "a-day"],
)
def test_durations_read_in_hours_and_minutes(span: timedelta, text: str) -> None:
    assert format_duration(span) == text


def test_a_time_today_shows_the_clock_and_another_day_shows_the_date() -> None:
    now = datetime(2026, 11, 29, 2, 3, tzinfo=UTC)
    assert format_clock(now + timedelta(hours=4), now=now) == "06:03 UTC"
    assert format_clock(now + timedelta(hours=23), now=now) == "Mon 30 Nov 01:03 UTC"


def test_pinning_the_secondary_names_the_new_head_and_drops_nothing() -> None:
    change = compare_steps(NORMAL, [step("vendor_b"), step("vendor_a"), step("self_hosted", "8b")])
    assert change.new_head == step("vendor_b")
    assert change.dropped == [] and change.added == []
    assert change.reordered and not change.is_same


def test_dropping_a_vendor_keeps_the_head_and_names_the_dropped_provider() -> None:
    change = compare_steps(NORMAL, [step("vendor_a"), step("self_hosted", "8b")])
    assert change.new_head is None
    assert change.dropped == ["vendor_b"]


def test_local_only_drops_every_vendor() -> None:
    change = compare_steps(NORMAL, [step("self_hosted", "8b")])
    assert change.new_head == step("self_hosted", "8b")
    assert change.dropped == ["vendor_a", "vendor_b"]


def test_going_back_to_normal_adds_the_providers_back() -> None:
    change = compare_steps([step("self_hosted", "8b")], NORMAL)
    assert change.added == ["vendor_a", "vendor_b"]


def test_the_same_steps_change_nothing() -> None:
    assert compare_steps(NORMAL, list(NORMAL)).is_same
