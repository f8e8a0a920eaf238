"""Template filters of the on-call pages: times in UTC, countdowns and steps, read at a glance.

The countdown texts match what ``presets/static/presets/app.js`` writes as it updates them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

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


@register.simple_tag
def sparkline(row: display.StepRow) -> str:
    """A step's error rate over the last minutes as a small inline SVG bar chart, drawn on
    the server (no script): one bar a minute, its height the error rate, red at or over the
    failure threshold; a minute without attempts is a dot on the baseline."""
    health = row.health
    if health is None:
        return ""
    rates = health["sparkline"]
    width, height, bar = 3 * len(rates), 16, 2
    shapes = []
    for index, rate in enumerate(rates):
        x = index * 3
        if rate is None:
            shapes.append(
                format_html('<rect class="spark-none" x="{}" y="{}" width="{}" height="1"/>', x, height - 1, bar)
            )
            continue
        tall = max(1, round(rate * height))
        kind = "spark-bad" if rate >= row.failing_rate else "spark-ok"
        shapes.append(
            format_html('<rect class="{}" x="{}" y="{}" width="{}" height="{}"/>', kind, x, height - tall, bar, tall)
        )
    known = [rate for rate in rates if rate is not None]
    if known:
        words = (
            f"Error rate per minute over the last {len(rates)} min: highest {max(known) * 100:.0f} %, "
            f"latest {known[-1] * 100:.0f} %"
        )
    else:
        words = f"No attempts reported in the last {len(rates)} min"
    return format_html(
        '<svg class="sparkline" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{words}">'
        "<title>{words}</title>{shapes}</svg>",
        w=width,
        h=height,
        words=words,
        shapes=mark_safe("".join(shapes)),  # each built by format_html above
    )
