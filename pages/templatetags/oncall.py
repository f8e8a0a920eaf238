"""Template filters of the on-call pages: times in UTC, countdowns and steps, read at a glance.

The countdown texts match what ``pages/static/presets/app.js`` writes as it updates them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from audit.delivery import first_attempt_overdue, next_retry_at
from audit.messages import change_summary, expiry_words
from audit.models import Alert, Deliverable, DeliveryState, Notification
from audit.notifiers import LOG
from audit.spend import format_money
from pages import display, plots
from presets.documents import format_duration, format_time
from presets.guards import describe as describe_guard
from presets.models import GuardState, PinGuard, PlannedPin
from presets.plans import describe
from presets.roles import can_see_delivery_errors

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
def day_clock(value: datetime | None) -> str:
    """'Sun 14 Mar 06:00 UTC', with the year when it is not this one: a plan's times."""
    return "" if value is None else display.format_day(value, now=timezone.now())


@register.filter
def plan_summary(plan: PlannedPin) -> str:
    """A plan in one line: 'at 02:00 UTC Thu 2026-12-10: pin_secondary until 04:00 UTC,
    planned by alice because ...' (``plans.describe``)."""
    return describe(plan)


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
def ends_in(value: datetime | None) -> str:
    """'ends in 12 min', or 'ended' once the moment has passed: a drill's window (the script
    writes the same words as it counts down)."""
    if value is None:
        return ""
    left = value - timezone.now()
    return "ended" if left <= timedelta(0) else f"ends in {format_duration(left)}"


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
def step_line(steps: list[dict[str, Any]]) -> str:
    """A chain of steps on one line, in fallback order: 'vendor_a/large › vendor_b/large'."""
    return " › ".join(display.step_label(step) for step in steps)


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
        kind = "spark-bad" if rate * 100 >= settings.PROVIDER_FAILING_ERROR_PERCENT else "spark-ok"
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


# --- failover drills ----------------------------------------------------------------------


@register.simple_tag
def latency_plot(report: dict[str, Any]) -> SafeString:
    """A drill report's latency per minute, drilled against not drilled (``plots``)."""
    return plots.latency_figure(report["timeline"])


@register.simple_tag
def hops_plot(report: dict[str, Any], steps: list[dict[str, Any]]) -> SafeString:
    """A drill report's drilled requests per minute by the hop that served them (``plots``)."""
    return plots.hops_figure(report["timeline"], steps=steps)


@register.filter
def hop_counts(ended_on: dict[str, int] | None) -> str:
    """Drilled requests by the hop that served them: 'hop 2: 81, hop 3: 2', or 'none'."""
    if not ended_on:
        return "none"
    return ", ".join(f"hop {hop}: {count}" for hop, count in sorted(ended_on.items(), key=lambda item: int(item[0])))


@register.filter
def ms(value: int | None) -> str:
    """A latency: '250 ms', '1.5 s', or '–' when nothing was reported."""
    return "–" if value is None else plots.format_ms(value)


# --- the alerts page ----------------------------------------------------------------------

# An ISO 8601 instant with its offset, as alert messages carry them ("2026-11-30T15:51:03Z"); a
# colon after one ends a clause ("guarded until 2026-12-10T02:30:00Z: restores ...").
ISO_INSTANT = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})(?![\w+-]|:\d)")


@register.filter
def clock_times(text: str | None, local: str = "") -> str:
    """``text``, escaped, with each ISO 8601 instant in it written as the pages write times
    ("15:51 UTC") inside a ``<time>`` that keeps the exact instant. Alert messages are stored
    and sent (webhook, email) with ISO times; only the page reads them this way. With
    ``local`` (``|clock_times:"your time: "``), each is followed by its place for the browser's
    clock, which the script fills in ("(your time: Thu 10 Dec 21:30 EST)", as a plan's times)."""
    if not text:
        return ""
    now = timezone.now()
    parts, start = [], 0
    for match in ISO_INSTANT.finditer(text):
        try:
            value = datetime.fromisoformat(match.group().replace("Z", "+00:00"))
        except ValueError:  # shaped like a time but not one (month 13): left as written
            continue
        parts.append(conditional_escape(text[start : match.start()]))
        parts.append(format_html('<time datetime="{}">{}</time>', match.group(), display.format_clock(value, now=now)))
        if local:
            parts.append(local_time(value, local))
        start = match.end()
    parts.append(conditional_escape(text[start:]))
    return mark_safe("".join(parts))  # every part escaped or built by format_html above


@register.filter
def local_time(value: datetime | None, prefix: str = "") -> SafeString:
    """The place where the script writes ``value`` on the browser's clock, when that is not
    UTC (" (your time: Thu 10 Dec 21:30 EST)", its space included); empty without the script,
    so that a time followed by a colon reads "02:30 UTC: ..." either way."""
    if value is None:
        return SafeString()
    return format_html('<span class="local-time" data-local="{}" data-local-prefix="{}"></span>', iso(value), prefix)


@register.filter
def guard_line(guard: PinGuard) -> str:
    """A guard in one line, as the CLI says it (``guards.describe``): while it watches, until when
    and what it restores on what evidence; after, why it stopped."""
    return describe_guard(guard) if guard.state == GuardState.WATCHING else guard.state_reason


@register.filter
def alert_words(alert: Alert, texts: dict[int, str]) -> str:
    """``alert``'s words as of now (``audit.alerts.alert_text``, read by the view), else the
    message it was raised with."""
    return texts.get(alert.pk, alert.message)


@register.filter
def suggested_actions(alert: Alert, by_alert: dict[int, list[display.ActionLink]]) -> list[display.ActionLink]:
    """What ``alert`` suggests doing (read by the view for the open ones), as links to reviews."""
    return by_alert.get(alert.pk, [])


@register.filter
def alert_state(alert: Alert) -> str:
    """``open`` or ``resolved`` for a condition (a stale pin, a failing provider); ``event``
    for something that happened (an expired pin), which is raised already resolved."""
    if alert.is_event:
        return "event"
    return "open" if alert.is_open else "resolved"


@dataclass(frozen=True)
class AlertSection:
    """A heading of the alerts page and its alerts; ``empty`` is said when there are none
    (a section without it is left out)."""

    title: str
    alerts: list[Alert]
    empty: str = ""


@register.filter
def alert_sections(alerts: list[Alert]) -> list[AlertSection]:
    """The open alerts first, then the rest, each newest first (the order they come in)."""
    open_ = [a for a in alerts if alert_state(a) == "open"]
    rest = [a for a in alerts if alert_state(a) != "open"]
    return [AlertSection("Open now", open_, "Nothing open."), AlertSection("Recent", rest)]


@dataclass(frozen=True)
class DeliveryLine:
    """Where an alert or a notification was sent and how that went, in words: ``state`` is
    ``pending``, ``delivered`` or ``failed``."""

    notifier: str
    state: str
    words: str


# Each notifier as the page names it, in the order it lists them.
NOTIFIER_LABELS = {"webhook": "Webhook", "slack": "Slack", "pagerduty": "PagerDuty", "email": "Email"}


@register.filter
def delivery_lines(row: Deliverable, user: Any = None) -> list[DeliveryLine]:
    """Each notifier's delivery of an alert (or a notification) but the log's (always
    written), or one line saying that no webhook or email is set up. Why an attempt failed
    is said only to ``user`` on call or staff (``roles.can_see_delivery_errors``)."""
    now = timezone.now()
    errors = can_see_delivery_errors(user)
    order = list(NOTIFIER_LABELS)
    names = sorted(row.deliveries, key=lambda name: (order.index(name) if name in order else len(order), name))
    lines = [
        DeliveryLine(
            name,
            row.deliveries[name]["state"],
            f"{NOTIFIER_LABELS.get(name, name)}: {_delivery_words(row, row.deliveries[name], now=now, errors=errors)}",
        )
        for name in names
        if name != LOG.name
    ]
    return lines or [DeliveryLine(LOG.name, DeliveryState.DELIVERED, "Only logged: no webhook or email is set up.")]


@register.filter
def resolution_delivery_lines(alert: Alert, user: Any = None) -> list[DeliveryLine]:
    """Each notifier's delivery of ``alert``'s resolution; none while it is open, for an
    event, or when no notifier took it."""
    notification = getattr(alert, "resolution_notification", None)
    return delivery_lines(notification, user) if notification is not None else []


@register.filter
def notification_words(notification: Notification) -> str:
    """A change notification's change in words: 'alice selected pin_secondary on chat (v2),
    pinned until 2026-11-29 06:00 UTC: INC-7'."""
    change = notification.details
    if not change:
        return f"{notification.kind} on {notification.chain.name} v{notification.version}"
    return f"{change_summary(change)}, {expiry_words(change)}: {change.get('reason', '')}"


def _delivery_words(alert: Deliverable, record: dict[str, Any], *, now: datetime, errors: bool) -> str:
    attempts = int(record.get("attempts") or 0)
    why = f": {record.get('last_error') or 'no reason given'}" if errors else ""
    tries = f"{attempts} attempt{'' if attempts == 1 else 's'}"
    if record["state"] == DeliveryState.DELIVERED:
        return f"delivered {clock(record.get('delivered_at'))}" + (f" after {tries}" if attempts > 1 else "")
    if record["state"] == DeliveryState.FAILED:
        return f"failed after {tries}, not retried{why}"
    if attempts == 0:
        late = first_attempt_overdue(alert, now=now)
        return "pending, not tried yet" + (": is a worker running?" if late else "")
    words = f"pending, attempt {attempts} failed{why}"
    retry_at = next_retry_at(alert)
    if retry_at is None:
        return words
    if retry_at < now - timedelta(minutes=1):
        return f"{words}; the next try was due {clock(retry_at)}: is a worker running?"
    return f"{words}; next try at about {clock(retry_at)}"


@register.filter
def money(value: float | None, currency: str | None) -> str:
    """'$1.24' (``audit.spend.format_money``); 'unknown' for None."""
    return "unknown" if value is None else format_money(value, currency)
