"""Template filters of the on-call pages: times in UTC, countdowns and steps, read at a glance.

The countdown texts match what ``presets/static/presets/app.js`` writes as it updates them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone

from presets.documents import format_duration, format_time
from presets.web import display

register = template.Library()


@register.filter
def clock(value: datetime | str | None) -> str:
    """'06:03 UTC' today, 'Sat 29 Nov 06:03 UTC' on another day."""
    if not value:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return display.format_clock(value, now=timezone.now())


@register.filter
def time_left(value: datetime | None) -> str:
    """'expires in 3 h 12 min', or 'expired' once the moment has passed."""
    if value is None:
        return ""
    left = value - timezone.now()
    if left <= timedelta(0):
        return "expired"
    return f"expires in {format_duration(left)}"


@register.filter
def time_since(value: datetime | None) -> str:
    """'12 min ago'."""
    if value is None:
        return ""
    return f"{format_duration(timezone.now() - value)} ago"


@register.filter
def duration(value: timedelta | None) -> str:
    """'2 h 5 min'."""
    return "" if value is None else format_duration(value)


@register.filter
def step_label(step: dict[str, Any]) -> str:
    """'vendor_b/large'."""
    return display.step_label(step)


@register.filter
def timeout(step: dict[str, Any]) -> str:
    """A step's timeout: '20 s'."""
    ms = int(step["timeout_ms"])
    return f"{ms / 1000:g} s"


@register.filter
def iso(value: datetime | None) -> str:
    """RFC 3339 in UTC for a <time datetime> the script counts down to."""
    return format_time(value) or ""
