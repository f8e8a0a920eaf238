"""A drill report's two plots and a chain's spend, drawn on the server as inline SVG (no
script, no library), as the steps' sparklines are: latency per minute, drilled against not
drilled, the drilled requests of each minute by the hop that served them, and a chain's spend
in each of the last hours by step. Each is a ``<figure>`` whose SVG says
what it shows in words (its ``<title>``) and whose legend names every line and colour; the
figures themselves are in the report page's table below them. Colours and dashes come from
the stylesheet's classes (the pages' CSP allows no inline style), so both themes hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from audit.spend import format_money

# The plot's own units (the SVG scales to the page's width): room on the left for the values,
# below for the minutes.
WIDTH, HEIGHT = 320, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 6, 8, 20
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One line or one colour of a plot: its stylesheet class and what the legend calls it."""

    css: str
    label: str
    bar: bool = False  # a bar's colour, not a line


LATENCY_SERIES = (
    (("drilled", "p50"), Series("plot-drilled plot-p50", "drilled, p50")),
    (("drilled", "p95"), Series("plot-drilled plot-p95", "drilled, p95 (dashed)")),
    (("other", "p50"), Series("plot-other plot-p50", "not drilled, p50")),
    (("other", "p95"), Series("plot-other plot-p95", "not drilled, p95 (dashed)")),
)
# The hops that served drilled requests take these colours in turn; failed ones are red.
SERVED_CLASSES = ("plot-served-0", "plot-served-1", "plot-served-2")


def format_ms(value: float) -> str:
    """A latency as the plot's axis says it: "250 ms", "1.5 s"."""
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:g} s"


def nice_ceiling(value: float) -> float:
    """The round number at or above ``value`` an axis ends at: 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 0:
        return 1
    power = 1.0
    while power * 10 <= value:
        power *= 10
    while power > value:
        power /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def _minute_label(minute: str | None) -> str:
    """ "01:04" from the report's "2026-12-10T01:04:00Z"."""
    return minute[11:16] if minute and len(minute) >= 16 else ""


def _n(value: float) -> str:
    """A coordinate, to a tenth of a unit."""
    return f"{value:.1f}".removesuffix(".0")


def _x(index: int, count: int) -> float:
    """The middle of minute ``index``'s slot."""
    return LEFT + (index + 0.5) * PLOT_W / count


def _y(value: float, top: float) -> float:
    return TOP + PLOT_H - value / top * PLOT_H


def _axes(top: float, label: Any, minutes: Sequence[str | None]) -> list[SafeString]:
    """The baseline, the middle and top gridlines with their values, and the first and last
    minute below."""
    shapes = []
    for fraction in (0, 0.5, 1):
        y = _y(top * fraction, top)
        css = "plot-axis" if fraction == 0 else "plot-grid"
        shapes.append(
            format_html('<line class="{}" x1="{}" y1="{}" x2="{}" y2="{}"/>', css, LEFT, _n(y), WIDTH - RIGHT, _n(y))
        )
        shapes.append(
            format_html(
                '<text class="plot-text" x="{}" y="{}" text-anchor="end">{}</text>',
                LEFT - 4,
                _n(y + 3),
                label(top * fraction),
            )
        )
    if minutes:
        first, last = _minute_label(minutes[0]), _minute_label(minutes[-1])
        shapes.append(format_html('<text class="plot-text" x="{}" y="{}">{}</text>', LEFT, HEIGHT - 5, first))
        if len(minutes) > 1:
            shapes.append(
                format_html(
                    '<text class="plot-text" x="{}" y="{}" text-anchor="end">{}</text>', WIDTH - RIGHT, HEIGHT - 5, last
                )
            )
    return shapes


def _figure(slug: str, caption: str, words: str, shapes: list[SafeString], legend: list[Series]) -> SafeString:
    svg = format_html(
        '<svg class="plot" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{slug}-title">'
        '<title id="{slug}-title">{words}</title>{shapes}</svg>',
        w=WIDTH,
        h=HEIGHT,
        slug=slug,
        words=words,
        shapes=mark_safe("".join(shapes)),  # each built by format_html
    )
    keys = format_html_join(
        "",
        '<li><svg class="plot-key" viewBox="0 0 24 10" width="24" height="10" aria-hidden="true">{}</svg> {}</li>',
        ((_key(series), series.label) for series in legend),
    )
    return format_html(
        '<figure class="plot-figure" id="{}"><figcaption>{}</figcaption>{}<ul class="plot-legend">{}</ul></figure>',
        slug,
        caption,
        svg,
        keys,
    )


def _key(series: Series) -> SafeString:
    if series.bar:
        return format_html('<rect class="{}" x="5" y="0" width="14" height="10"/>', series.css)
    return format_html('<line class="{}" x1="1" y1="5" x2="23" y2="5"/>', series.css)


def latency_figure(timeline: Sequence[dict[str, Any]]) -> SafeString:
    """Latency p50 and p95 of each minute, drilled requests against the others: four lines
    (drilled in one colour, not drilled in another; p95 dashed). A minute without a figure
    breaks its line; a figure alone is a dot."""
    minutes = [m["minute"] for m in timeline]
    values = {key: [m["latency_ms"][key[0]][key[1]] for m in timeline] for key, _ in LATENCY_SERIES}
    known = [v for series in values.values() for v in series if v is not None]
    if not known:
        return format_html('<p class="empty" id="{}">No latency reported yet.</p>', "latency-plot")
    top = nice_ceiling(max(known))
    count = len(timeline)
    shapes = _axes(top, format_ms, minutes)
    for key, series in LATENCY_SERIES:
        run: list[tuple[float, float]] = []
        for index, value in enumerate([*values[key], None]):
            if value is not None:
                run.append((_x(index, count), _y(value, top)))
                continue
            if len(run) == 1:
                x, y = run[0]
                shapes.append(format_html('<circle class="{}" cx="{}" cy="{}" r="2.5"/>', series.css, _n(x), _n(y)))
            elif run:
                points = " ".join(f"{_n(x)},{_n(y)}" for x, y in run)
                shapes.append(format_html('<polyline class="{}" points="{}"/>', series.css, points))
            run = []
    latest = next((m for m in reversed(timeline) if m["latency_ms"]["drilled"]["p50"] is not None), timeline[-1])
    lat = latest["latency_ms"]

    def both(side: str) -> str:
        p50, p95 = lat[side]["p50"], lat[side]["p95"]
        return "none" if p50 is None else f"p50 {format_ms(p50)}, p95 {format_ms(p95 or p50)}"

    words = (
        f"Latency per minute over {count} min, drilled requests against the others. "
        f"At {_minute_label(latest['minute'])}: drilled {both('drilled')}; not drilled {both('other')}."
    )
    return _figure(
        "latency-plot",
        "Latency per minute (p50 and p95), drilled against not drilled",
        words,
        shapes,
        [series for _, series in LATENCY_SERIES],
    )


def hops_figure(timeline: Sequence[dict[str, Any]], *, steps: Sequence[dict[str, Any]]) -> SafeString:
    """The drilled requests of each minute as a bar, stacked by the hop that served them (a
    colour each), those that failed for the caller on top in red."""
    hops = sorted({int(hop) for m in timeline for hop in m["ended_on"]})
    if not timeline or not any(m["drilled"] for m in timeline):
        return format_html('<p class="empty" id="{}">No drilled request reported yet.</p>', "hops-plot")
    count = len(timeline)
    tallest = max(sum(m["ended_on"].values()) + m["failed"] for m in timeline)
    top = nice_ceiling(max(tallest, 1))
    shapes = _axes(top, lambda value: f"{value:g}", [m["minute"] for m in timeline])
    served = {hop: SERVED_CLASSES[min(index, len(SERVED_CLASSES) - 1)] for index, hop in enumerate(hops)}
    columns = []
    for minute in timeline:
        label = _minute_label(minute["minute"])
        parts = [
            (
                served[hop],
                minute["ended_on"].get(str(hop), 0),
                f"{label}: {minute['ended_on'].get(str(hop), 0)} by hop {hop}",
            )
            for hop in hops
        ]
        parts.append(("plot-failed", minute["failed"], f"{label}: {minute['failed']} failed for the caller"))
        columns.append(parts)
    shapes += _stacked_bars(columns, top)
    totals = {hop: sum(m["ended_on"].get(str(hop), 0) for m in timeline) for hop in hops}
    failed = sum(m["failed"] for m in timeline)
    served_words = ", ".join(f"{total} by hop {hop}" for hop, total in totals.items()) or "none served"
    words = (
        f"Drilled requests per minute over {count} min, by the hop that served them: {served_words}; {failed} failed."
    )
    legend = [Series(served[hop], f"served by hop {hop} ({_step(steps, hop)})", bar=True) for hop in hops]
    legend.append(Series("plot-failed", "failed for the caller", bar=True))
    return _figure("hops-plot", "Drilled requests per minute, by the hop that served them", words, shapes, legend)


def _stacked_bars(columns: Sequence[Sequence[tuple[str, float, str]]], top: float) -> list[SafeString]:
    """One bar a slot, stacked from its parts (stylesheet class, value, words of its title)
    from the bottom; a part of 0 draws nothing."""
    shapes = []
    slot = PLOT_W / len(columns)
    width = max(slot * 0.7, 1)
    for index, parts in enumerate(columns):
        x = LEFT + index * slot + (slot - width) / 2
        base = 0.0
        for css, value, title in parts:
            if not value:
                continue
            y = _y(base + value, top)
            shapes.append(
                format_html(
                    '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
                    css,
                    _n(x),
                    _n(y),
                    _n(width),
                    _n(_y(base, top) - y),
                    title,
                )
            )
            base += value
    return shapes


def spend_figure(spend: Mapping[str, Any]) -> SafeString:
    """A chain's spend in each of the last hours (``audit.spend.chain_spend``), a bar an hour
    stacked by step (the live head first); an hour whose cost is unknown for a step draws no
    part for it, and the words say so."""
    steps = [step for step in spend["steps"] if any(step["hours"])]
    hours = spend["hour_starts"]
    if not steps or not hours:
        return format_html(
            '<p class="empty" id="{}">No spend reported in the last {} hours.</p>', "spend-plot", len(hours)
        )
    unit = spend["currency"]
    classes = {id(step): SERVED_CLASSES[min(index, len(SERVED_CLASSES) - 1)] for index, step in enumerate(steps)}
    columns = []
    for index, start in enumerate(hours):
        label = _minute_label(start)
        columns.append(
            [
                (
                    classes[id(step)],
                    step["hours"][index] or 0.0,
                    f"{label}: {step['provider']}/{step['model']} {_money(step['hours'][index], unit)}",
                )
                for step in steps
            ]
        )
    tallest = max(sum(value for _, value, _ in column) for column in columns)
    top = nice_ceiling(tallest) if tallest > 0 else 1
    shapes = _axes(top, lambda value: _money(value, unit), hours) + _stacked_bars(columns, top)
    unknown = sorted({f"{s['provider']}/{s['model']}" for s in steps if None in s["hours"]})
    words = f"Spend per hour over the last {len(hours)} hours, by step. This hour so far: " + ", ".join(
        f"{s['provider']}/{s['model']} {_money(s['hours'][-1], unit)}" for s in steps
    )
    if unknown:
        words += f". Unknown in some hours (no price or no token counts): {', '.join(unknown)}"
    legend = [Series(classes[id(step)], f"{step['provider']}/{step['model']}", bar=True) for step in steps]
    return _figure("spend-plot", "Spend per hour, by step", words + ".", shapes, legend)


def _money(value: float | None, unit: str | None) -> str:
    return "unknown" if value is None else format_money(value, unit)


def _step(steps: Sequence[dict[str, Any]], hop: int) -> str:
    step = steps[hop - 1] if 0 < hop <= len(steps) else None
    return f"{step['provider']}/{step['model']}" if step else "unknown step"
