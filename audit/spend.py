"""What a chain's traffic costs, from the fleet: the tokens each step's attempts said they used
(the usage reports' ``health`` steps, kept per minute in ``ProviderHealthMinute``) times the
registry's price of the step's model (``presets.providers.Price``), and what a change of the
chain would cost before anyone confirms it.

Figures are estimates and say so: the cost of the tokens the fleet reported, at the registry's
price. A step whose model has no price, or whose served requests reported no tokens, costs
*unknown* (None), never zero; served requests without token counts are counted apart
(``requests_without_tokens``) and not priced. The pace "now" is the last 5 minutes' (from the
minute 5 minutes ago to this instant) and the plot's is whole hours.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict

from django.conf import settings
from django.utils import timezone

from audit.models import ProviderHealthMinute
from audit.provider_health import HOUR, RECENT, StepHealth, WindowHealth, minute_of
from presets import environments, selectors
from presets.documents import Help, Time, format_time
from presets.history import HistoryEntry
from presets.models import Chain
from presets.providers import Price, get_registry, price_of

# The plot of a chain's spend: this many whole hours, the current one last.
PLOT_HOURS = 12

_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def currency() -> str | None:
    """The registry's one currency (``presets.providers`` refuses two), or None without prices."""
    for provider in get_registry().values():
        for price in provider.prices.values():
            return price.currency
    return None


def format_money(value: float, currency: str | None, *, signed: bool = False) -> str:
    """ "$1.24", "+$0.031", "12.50 CHF": two decimals from one unit up, three figures below."""
    sign = ("+" if value >= 0 else "-") if signed else ("-" if value < 0 else "")
    amount = abs(value)
    figures = f"{amount:,.2f}" if amount >= 1 or amount == 0 else f"{amount:.2g}"
    symbol = _SYMBOLS.get(currency or "")
    return f"{sign}{symbol}{figures}" if symbol else f"{sign}{figures} {currency or ''}".rstrip()


def window_span_minutes(window: timedelta, *, now: datetime) -> float:
    """How long a health window (from the minute ``window`` ago to ``now``) lasts, in minutes:
    what its counts are divided by to give a pace."""
    return (now - minute_of(now - window)).total_seconds() / 60


def tokens_cost(price: Price | None, *, served: int, input_tokens: int, output_tokens: int) -> float | None:
    """What reported tokens cost at ``price``; None (unknown) when the step has no price, or
    when it served requests and none of them said its tokens; 0 with neither requests nor
    tokens. Every figure of spend (windows, hours, minutes, alerts) is priced here."""
    if not (input_tokens or output_tokens):
        return None if served else 0.0
    return None if price is None else price.cost(input_tokens, output_tokens)


def window_cost(window: WindowHealth, price: Price | None) -> float | None:
    """``tokens_cost`` of a health window's figures."""
    return tokens_cost(
        price, served=window["served"], input_tokens=window["input_tokens"], output_tokens=window["output_tokens"]
    )


class PriceJson(TypedDict):
    input_per_mtok: Annotated[str, Help("Per million input tokens, a decimal in currency.")]
    output_per_mtok: Annotated[str, Help("Per million output tokens.")]
    currency: str
    as_of: Annotated[str, Help("The day the price was read (YYYY-MM-DD).")]
    source: Annotated[str, Help("Where it was read.")]


class StepSpend(TypedDict):
    provider: str
    model: str
    head: Annotated[bool, Help("The live chain's first step.")]
    price: Annotated[PriceJson | None, Help("The registry's price of the model; null: none (cost unknown).")]
    requests_per_minute: Annotated[float, Help("Served requests a minute, at the last 5 minutes' pace.")]
    cost_per_hour: Annotated[
        float | None,
        Help("The reported tokens' cost an hour at the last 5 minutes' pace; null: unknown (no price, or no tokens)."),
    ]
    requests: Annotated[int, Help("Served requests in the last hour.")]
    input_tokens: Annotated[int, Help("Input tokens reported in the last hour.")]
    output_tokens: Annotated[int, Help("Output tokens reported in the last hour.")]
    requests_without_tokens: Annotated[
        int, Help("Served requests of the last hour that reported no token counts: not priced, not zero.")
    ]
    cost_last_hour: Annotated[float | None, Help("The last hour's reported tokens at the price; null: unknown.")]
    hours: Annotated[
        list[float | None],
        Help(f"Cost of each of the last {PLOT_HOURS} whole hours, the current one last; null: unknown."),
    ]
    summary: Annotated[str, Help("The figures in words, as the pages show them.")]


class ChainSpend(TypedDict):
    chain: str
    currency: Annotated[str | None, Help("The registry's currency; null when no model has a price.")]
    cost_per_hour: Annotated[
        float | None, Help("Every step's cost_per_hour added up; null when a step with requests has an unknown cost.")
    ]
    fallback_cost_per_hour: Annotated[
        float | None, Help("The same for the steps other than the live head: what falling back costs now.")
    ]
    cost_last_hour: Annotated[float | None, Help("Every step's cost_last_hour added up; null as cost_per_hour.")]
    requests_without_tokens: Annotated[int, Help("Served requests of the last hour without token counts.")]
    unknown: Annotated[list[str], Help("Steps (provider/model) with requests whose cost is unknown, and why.")]
    hour_starts: Annotated[list[Time], Help("The start of each hour of the steps' hours, oldest first.")]
    steps: list[StepSpend]
    summary: Annotated[str, Help("The chain's spend in words, as the pages show it.")]


def chain_spend(
    chain: Chain,
    health: Sequence[StepHealth],
    *,
    live_head: tuple[str, str] | None,
    now: datetime | None = None,
    hours: bool = True,
) -> ChainSpend:
    """The spend of each step in ``health`` (``provider_health.chain_health``: the live steps
    first) and of the chain; ``hours``: with the plot's hourly figures (one more query)."""
    now = now or timezone.now()
    span = window_span_minutes(RECENT, now=now)
    unit = currency()
    hourly = _hours(chain, now=now) if hours else {}
    steps: list[StepSpend] = []
    for step in health:
        key = (step["provider"], step["model"])
        price = price_of(*key)
        recent, hour = step["recent"], step["hour"]
        recent_cost = window_cost(recent, price)
        spend = StepSpend(
            provider=key[0],
            model=key[1],
            head=key == live_head,
            price=price.as_dict() if price is not None else None,  # type: ignore[typeddict-item]
            requests_per_minute=round(recent["served"] / span, 3),
            cost_per_hour=None if recent_cost is None else round(recent_cost * 60 / span, 6),
            requests=hour["served"],
            input_tokens=hour["input_tokens"],
            output_tokens=hour["output_tokens"],
            requests_without_tokens=hour["served"] - hour["served_with_tokens"],
            cost_last_hour=_rounded(window_cost(hour, price)),
            hours=[_rounded(cost) for cost in hourly.get(key, [0.0] * PLOT_HOURS)] if hours else [],
            summary="",
        )
        spend["summary"] = _step_words(spend, unit)
        steps.append(spend)
    unknown = [_unknown_why(step) for step in steps if step["requests"] and step["cost_last_hour"] is None]
    total = _sum(step["cost_per_hour"] for step in steps)
    fallback = _sum(step["cost_per_hour"] for step in steps if not step["head"])
    last_hour = _sum(step["cost_last_hour"] for step in steps)
    without = sum(step["requests_without_tokens"] for step in steps)
    start = minute_of(now).replace(minute=0) - timedelta(hours=PLOT_HOURS - 1)
    result = ChainSpend(
        chain=chain.name,
        currency=unit,
        cost_per_hour=total,
        fallback_cost_per_hour=fallback,
        cost_last_hour=last_hour,
        requests_without_tokens=without,
        unknown=unknown,
        hour_starts=[format_time(start + timedelta(hours=index)) for index in range(PLOT_HOURS)] if hours else [],
        steps=steps,
        summary="",
    )
    result["summary"] = _chain_words(result)
    return result


def _rounded(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 6)


def _sum(costs: Any) -> float | None:
    """Costs added up; None when one is unknown."""
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return round(total, 6)


def _unknown_why(step: StepSpend) -> str:
    name = f"{step['provider']}/{step['model']}"
    if step["price"] is None:
        return f"{name}: no price in the provider registry"
    return f"{name}: its requests reported no token counts"


def _step_words(step: StepSpend, unit: str | None) -> str:
    if not step["requests"] and not step["requests_per_minute"]:
        return "no requests in the last hour"
    if step["cost_last_hour"] is None:
        return f"{step['requests']} requests in the last hour, cost unknown ({_unknown_why(step).split(': ', 1)[1]})"
    pace = (
        f"about {format_money(step['cost_per_hour'], unit)} an hour now"
        if step["cost_per_hour"] is not None
        else "cost unknown now"
    )
    without = (
        f"; {step['requests_without_tokens']} requests without token counts not included"
        if step["requests_without_tokens"]
        else ""
    )
    return f"{pace}, {format_money(step['cost_last_hour'], unit)} in the last hour{without}"


def _chain_words(spend: ChainSpend) -> str:
    unit = spend["currency"]
    if spend["cost_per_hour"] is None:
        return "spend unknown: " + "; ".join(spend["unknown"]) if spend["unknown"] else "spend unknown"
    words = f"about {format_money(spend['cost_per_hour'], unit)} an hour now"
    if spend["fallback_cost_per_hour"]:
        words += f" ({format_money(spend['fallback_cost_per_hour'], unit)} of it on fallback steps)"
    if spend["unknown"]:
        words += f"; the last hour's is unknown ({'; '.join(spend['unknown'])})"
    return words


def _hours(chain: Chain, *, now: datetime) -> dict[tuple[str, str], list[float | None]]:
    """Each step's cost in each of the last ``PLOT_HOURS`` whole hours (one query)."""
    start = minute_of(now).replace(minute=0) - timedelta(hours=PLOT_HOURS - 1)
    rows = (
        ProviderHealthMinute.objects.filter(chain=chain, minute__gte=start)
        .exclude(model="")
        .values_list("provider", "model", "minute", "served", "input_tokens", "output_tokens")
    )
    sums: dict[tuple[str, str], list[list[int]]] = defaultdict(lambda: [[0, 0, 0] for _ in range(PLOT_HOURS)])
    for provider, model, minute, served, input_tokens, output_tokens in rows:
        index = int((minute - start) / HOUR)
        if 0 <= index < PLOT_HOURS:
            bucket = sums[provider, model][index]
            bucket[0] += served
            bucket[1] += input_tokens
            bucket[2] += output_tokens
    costs: dict[tuple[str, str], list[float | None]] = {}
    for key, buckets in sums.items():
        price = price_of(*key)
        costs[key] = [
            tokens_cost(price, served=served, input_tokens=tokens_in, output_tokens=tokens_out)
            for served, tokens_in, tokens_out in buckets
        ]
    return costs


# --- the cost of a change, before it is confirmed ------------------------------------------


@dataclass(frozen=True)
class ChangeCost:
    """What serving other steps would cost, at the chain's pace now."""

    words: str
    per_hour_now: float | None
    per_hour_after: float | None
    """The estimate: the chain's requests a minute now, all served by the new head, at its
    price, with the tokens per request the chain reports now."""


def change_cost(
    *,
    live_steps: Sequence[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]],
    health: Mapping[tuple[str, str], StepHealth],
    now: datetime | None = None,
) -> ChangeCost | None:
    """What moving the chain from ``live_steps`` to ``steps`` would do to its spend, in words
    ("moves about 40 requests a minute from vendor_a/large to vendor_b/large: about +$2.10 an
    hour, 3.2× the price per token"); None when the head stays the same or the fleet reported no
    request in the last 5 minutes (nothing moves)."""
    if not steps or not live_steps:
        return None
    old = (live_steps[0]["provider"], live_steps[0]["model"])
    new = (steps[0]["provider"], steps[0]["model"])
    if old == new:
        return None
    now = now or timezone.now()
    unit = currency()
    span = window_span_minutes(RECENT, now=now)
    live = {
        key: health[key]["recent"]
        for key in dict.fromkeys((step["provider"], step["model"]) for step in live_steps)
        if key in health
    }
    served = sum(window["served"] for window in live.values())
    per_minute = served / span
    old_name, new_name = "/".join(old), "/".join(new)
    if not served:
        return None  # no traffic reported: nothing moves, and nothing to say
    new_price = price_of(*new)
    if new_price is None:
        return ChangeCost(f"cost unknown: {new_name} has no price in the provider registry", None, None)
    with_tokens = sum(window["served_with_tokens"] for window in live.values())
    if not with_tokens:
        return ChangeCost("cost unknown: the fleet reports no token counts for these requests", None, None)
    tokens_in = sum(window["input_tokens"] for window in live.values()) / with_tokens
    tokens_out = sum(window["output_tokens"] for window in live.values()) / with_tokens
    costs_now = [window_cost(window, price_of(*key)) for key, window in live.items()]
    # Requests without token counts are taken to cost what the others do, request for request.
    per_hour_now = (
        None
        if any(cost is None for cost in costs_now)
        else sum(cost or 0.0 for cost in costs_now) * served / with_tokens * 60 / span
    )
    per_hour_after = per_minute * 60 * new_price.cost(tokens_in, tokens_out)
    words = f"moves about {_count(per_minute)} requests a minute from {old_name} to {new_name}"
    old_price = price_of(*old)
    if per_hour_now is None:
        words += f": about {format_money(per_hour_after, unit)} an hour after (the cost now is unknown)"
    else:
        words += (
            f": about {format_money(per_hour_after - per_hour_now, unit, signed=True)} an hour "
            f"({format_money(per_hour_now, unit)} now, about {format_money(per_hour_after, unit)} after)"
        )
    if old_price is not None and old_price.cost(tokens_in, tokens_out):
        ratio = new_price.cost(tokens_in, tokens_out) / old_price.cost(tokens_in, tokens_out)
        words += f", {ratio:.1f}× the price per token"
    return ChangeCost(words, per_hour_now, per_hour_after)


def _count(per_minute: float) -> str:
    return f"{per_minute:.0f}" if per_minute >= 10 else f"{per_minute:.1f}".removesuffix(".0")


# --- spend around each change (the history page, the audit export) --------------------------

# A change's spend is the chain's pace over this long before it and after it (its own minute,
# which holds both, left out).
AROUND = timedelta(minutes=15)


class ExportedChange(HistoryEntry):
    """A change as the audit export writes it: the history entry and the chain's spend around it."""

    spend_currency: Annotated[str | None, Help("The registry's currency; null when no model has a price.")]
    spend_before_per_hour: Annotated[
        float | None,
        Help(
            "The chain's spend an hour over the 15 minutes before the change; null: unknown (a step without a "
            "price or token counts, or older than the health window keeps)."
        ),
    ]
    spend_after_per_hour: Annotated[
        float | None, Help("The same over the 15 minutes after it (so far, for a change less than 15 minutes old).")
    ]


# The audit export's columns for it, after the history entry's own.
EXPORT_COLUMNS = tuple(name for name in ExportedChange.__annotations__ if name not in HistoryEntry.__annotations__)


def around_changes(entries: Sequence[HistoryEntry], *, now: datetime | None = None) -> list[ExportedChange]:
    """``entries`` (history entries: ``chain_name`` and ``at``) with the chain's spend an hour
    over the ``AROUND`` before and after each (``EXPORT_COLUMNS``); None where it is unknown
    (a step without a price or token counts, or minutes the health window no longer keeps).
    One query for any number of entries."""
    now = now or timezone.now()
    unit = currency()
    times = {(_label(item), _parsed(item["at"])) for item in entries}
    costs = _minute_costs(times, now=now)
    kept_from = minute_of(now - timedelta(hours=settings.PROVIDER_HEALTH_RETENTION_HOURS)) + timedelta(minutes=1)
    result = []
    for item in entries:
        chain, at = _label(item), _parsed(item["at"])
        minute = minute_of(at)
        after_from = minute + timedelta(minutes=1)
        changed: ExportedChange = {
            **item,
            "spend_currency": unit,
            "spend_before_per_hour": _pace(costs.get(chain, {}), minute - AROUND, minute, kept_from=kept_from, now=now),
            "spend_after_per_hour": _pace(
                costs.get(chain, {}), after_from, after_from + AROUND, kept_from=kept_from, now=now
            ),
        }
        result.append(changed)
    return result


def _parsed(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _minute_costs(times: set[tuple[str, datetime]], *, now: datetime) -> dict[str, dict[datetime, float | None]]:
    """Each chain's cost in each minute around ``times`` (None: unknown that minute)."""
    if not times:
        return {}
    since = minute_of(min(at for _, at in times)) - AROUND
    until = minute_of(max(at for _, at in times)) + AROUND + timedelta(minutes=1)
    labels = {chain.pk: label for label, chain in selectors.chains_by_label({chain for chain, _ in times}).items()}
    rows = (
        ProviderHealthMinute.objects.filter(chain_id__in=labels, minute__gte=since, minute__lte=until)
        .exclude(model="")
        .values_list("chain_id", "provider", "model", "minute", "served", "input_tokens", "output_tokens")
    )
    costs: dict[str, dict[datetime, float | None]] = defaultdict(dict)
    for chain_id, provider, model, minute, served, tokens_in, tokens_out in rows:
        chain = labels[chain_id]
        cost = tokens_cost(price_of(provider, model), served=served, input_tokens=tokens_in, output_tokens=tokens_out)
        known = costs[chain].get(minute, 0.0)
        costs[chain][minute] = None if known is None or cost is None else known + cost
    return costs


def _label(item: HistoryEntry) -> str:
    return environments.label(item["environment"], item["chain_name"])


def _pace(
    minutes: Mapping[datetime, float | None], start: datetime, end: datetime, *, kept_from: datetime, now: datetime
) -> float | None:
    """The spend an hour over the minutes [start, end) (up to now); None when a minute of it is
    unknown or no longer kept, or none of it has passed."""
    end = min(end, minute_of(now))
    if start < kept_from or end <= start:
        return None
    total = 0.0
    minute = start
    while minute < end:
        cost = minutes.get(minute, 0.0)
        if cost is None:
            return None
        total += cost
        minute += timedelta(minutes=1)
    return round(total * 60 / ((end - start).total_seconds() / 60), 6)


__all__ = [
    "AROUND",
    "EXPORT_COLUMNS",
    "ExportedChange",
    "PLOT_HOURS",
    "around_changes",
    "ChainSpend",
    "ChangeCost",
    "StepSpend",
    "chain_spend",
    "change_cost",
    "currency",
    "format_money",
    "tokens_cost",
    "window_cost",
    "window_span_minutes",
]
