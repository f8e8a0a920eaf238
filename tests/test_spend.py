"""What a chain costs, from the fleet's token counts and the registry's prices: the figures
equal tokens x prices, unknown prices and missing token counts say unknown (never zero), and a
change's review estimates what it would cost."""

from __future__ import annotations

import csv
import html
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import Client

from audit import actions, provider_health, spend
from audit.models import Alert, AlertKind, ProviderHealthMinute
from chatops import reviews
from presets import services
from presets.models import Chain, Selection
from presets.providers import Price, Provider, price_of
from tests.conftest import make_token
from tests.health_reports import by_step, report, step
from tests.metrics_text import value
from worker.tasks import alert_providers

pytestmark = pytest.mark.usefixtures("synced")

# Half past a minute: the last 5 minutes' pace divides by 5.5 minutes. An hour or two after
# the tests' own sync of the presets (at the real time, so always before it) and their
# sessions' sign-in (which still holds then).
T0 = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=0, second=30, microsecond=0)
A_LARGE = price_of("vendor_a", "large")
B_LARGE = price_of("vendor_b", "large")


def each_instance_reports(client: Client, steps: list[dict[str, Any]], *, instances: int = 3) -> None:
    """The instances ``i0``, ``i1``, ... each read chat and report ``steps``."""
    for n in range(instances):
        response = report(client, f"i{n}", steps)
        assert response.status_code == 202, response.content


def spend_of(client: Client, chain: str = "chat") -> dict[str, Any]:
    response = client.get(f"/api/v1/chains/{chain}/spend")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_spend_of_each_step_is_its_reported_tokens_at_the_registrys_price(reader: Client) -> None:
    assert A_LARGE is not None and B_LARGE is not None
    with time_machine.travel(T0, tick=False):
        each_instance_reports(
            reader,
            [
                step("vendor_a", "large", {"served": 100}, tokens=(120_000, 30_000, 100)),
                step("vendor_b", "large", {"served": 10}, tokens=(11_000, 2_500, 10)),
            ],
        )
        document = spend_of(reader)

    steps = by_step(document)
    head, fallback = steps["vendor_a/large"], steps["vendor_b/large"]
    a_cost = 3 * (120_000 * 2.50 + 30_000 * 10.00) / 1e6
    b_cost = 3 * (11_000 * 8.00 + 2_500 * 32.00) / 1e6
    assert head["head"] and not fallback["head"]
    assert head["input_tokens"] == 360_000 and head["output_tokens"] == 90_000 and head["requests"] == 300
    assert head["cost_last_hour"] == pytest.approx(a_cost, rel=0.01)
    assert fallback["cost_last_hour"] == pytest.approx(b_cost, rel=0.01)
    # The pace now: the last 5 minutes' (5.5 minutes long at half past) cost, an hour.
    assert head["cost_per_hour"] == pytest.approx(a_cost * 60 / 5.5, rel=0.01)
    assert head["requests_per_minute"] == pytest.approx(300 / 5.5, rel=0.01)
    assert document["cost_per_hour"] == pytest.approx((a_cost + b_cost) * 60 / 5.5, rel=0.01)
    assert document["fallback_cost_per_hour"] == pytest.approx(b_cost * 60 / 5.5, rel=0.01)
    assert document["currency"] == "USD" and document["unknown"] == []
    assert head["price"] == {
        "input_per_mtok": "2.50",
        "output_per_mtok": "10.00",
        "currency": "USD",
        "as_of": "2026-12-01",
        "source": "example price list",
    }
    assert head["hours"][-1] == pytest.approx(a_cost, rel=0.01) and head["hours"][:-1] == [0.0] * 11
    assert document["hour_starts"][-1] == T0.replace(second=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "an hour now" in head["summary"] and "of it on fallback steps" in document["summary"]


def test_missing_token_counts_and_prices_are_unknown_never_zero(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        # An SDK that does not count tokens (no token fields), and one that does for half.
        report(reader, "old", [step("vendor_a", "large", {"served": 10})])
        report(reader, "new", [step("vendor_a", "large", {"served": 10}, tokens=(5_000, 1_000, 5))])
        # self_hosted/8b has no price in the registry.
        report(reader, "local", [step("self_hosted", "8b", {"served": 7}, tokens=(700, 70, 7))])
        document = spend_of(reader)

    steps = by_step(document)
    head = steps["vendor_a/large"]
    assert head["requests"] == 20 and head["requests_without_tokens"] == 15
    assert head["cost_last_hour"] == pytest.approx((5_000 * 2.5 + 1_000 * 10) / 1e6)
    assert "15 requests without token counts not included" in head["summary"]
    local = steps["self_hosted/8b"]
    assert local["price"] is None and local["cost_last_hour"] is None and local["cost_per_hour"] is None
    assert "cost unknown (no price in the provider registry)" in local["summary"]
    assert document["cost_per_hour"] is None and document["cost_last_hour"] is None
    assert document["unknown"] == ["self_hosted/8b: no price in the provider registry"]

    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        report(reader, "old", [step("vendor_b", "large", {"served": 4})])
        b_only = by_step(spend_of(reader))["vendor_b/large"]
    assert b_only["cost_last_hour"] is None and b_only["requests_without_tokens"] == 4
    assert "its requests reported no token counts" in b_only["summary"]


def test_a_report_claiming_more_tokens_than_attempts_could_use_is_refused_whole(reader: Client) -> None:
    response = report(reader, "i0", [step("vendor_a", "large", {"served": 1}, tokens=(10**13, 0, 1))])
    assert response.status_code == 400
    assert "input_tokens" in response.content.decode()
    response = report(reader, "i0", [step("vendor_a", "large", {"served": 1}, tokens=(10, 10, 2))])
    assert response.status_code == 400
    assert "more than the step's served attempts" in response.content.decode()
    assert (
        provider_health.step_health(Chain.objects.get(name="chat"), [("vendor_a", "large")])[0]["hour"]["input_tokens"]
        == 0
    )


def test_the_cost_of_moving_the_head_is_estimated_from_the_pace_and_tokens_per_request(reader: Client) -> None:
    chain = Chain.objects.get(name="chat")
    live = [{"provider": "vendor_a", "model": "large"}, {"provider": "vendor_b", "model": "large"}]
    pinned = [{"provider": "vendor_b", "model": "large"}, {"provider": "vendor_a", "model": "large"}]
    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 220}, tokens=(220_000, 44_000, 220))])
        health = provider_health.health_by_step(chain, [live, pinned])
        cost = spend.change_cost(live_steps=live, steps=pinned, health=health)
    assert cost is not None
    per_minute = 220 / 5.5
    now = per_minute * 60 * (1_000 * 2.50 + 200 * 10.00) / 1e6
    after = per_minute * 60 * (1_000 * 8.00 + 200 * 32.00) / 1e6
    assert cost.per_hour_now == pytest.approx(now, rel=0.01)
    assert cost.per_hour_after == pytest.approx(after, rel=0.01)
    assert cost.words == (
        f"moves about 40 requests a minute from vendor_a/large to vendor_b/large: about "
        f"+${after - now:,.2f} an hour (${now:,.2f} now, about ${after:,.2f} after), 3.2× the price per token"
    )
    assert spend.change_cost(live_steps=live, steps=live, health=health) is None
    local = [{"provider": "self_hosted", "model": "8b"}]
    with time_machine.travel(T0, tick=False):
        unknown = spend.change_cost(live_steps=live, steps=local, health=health)
    assert unknown is not None and unknown.words == "cost unknown: self_hosted/8b has no price in the provider registry"


def test_prices_are_checked_when_the_registry_is_read() -> None:
    with pytest.raises(ImproperlyConfigured, match="Decimal"):
        Price(2.5, Decimal("1"), "USD", T0.date(), "x")  # type: ignore[arg-type]
    with pytest.raises(ImproperlyConfigured, match="ISO 4217"):
        Price(Decimal("1"), Decimal("1"), "usd", T0.date(), "x")
    with pytest.raises(ImproperlyConfigured, match="models the provider does not have"):
        Provider("x", {"a": frozenset()}, prices={"b": Price(Decimal("1"), Decimal("1"), "USD", T0.date(), "x")})


def test_check_presets_flags_each_step_without_a_price(example_file: Any) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("check_presets", str(example_file), stdout=out, stderr=err)
    assert "OK" in out.getvalue()
    assert (
        "warning: $.chains.chat.presets.normal.chain[2]: self_hosted/8b has no price in the provider registry"
        in err.getvalue()
    )
    assert "vendor_a" not in err.getvalue()


def test_metrics_count_tokens_and_their_cost_and_never_go_back_when_minutes_are_pruned(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        report(reader, "i0", [step("vendor_a", "large", {"served": 10}, tokens=(10_000, 2_000, 10))])
        report(reader, "i1", [step("self_hosted", "8b", {"served": 5}, tokens=(500, 50, 5))])
    a = {"chain": "chat", "provider": "vendor_a", "model": "large"}
    local = {"chain": "chat", "provider": "self_hosted", "model": "8b"}
    cost = (10_000 * 2.5 + 2_000 * 10) / 1e6

    def scrape() -> str:
        return Client().get("/metrics").content.decode()

    for moment in (T0, T0 + timedelta(hours=60)):  # the second after the minute was pruned
        with time_machine.travel(moment, tick=False):
            if moment != T0:
                provider_health.prune()
                assert not ProviderHealthMinute.objects.exists()
            text = scrape()
        assert value(text, "chain_tokens_total", {**a, "direction": "input"}) == 10_000
        assert value(text, "chain_tokens_total", {**a, "direction": "output"}) == 2_000
        assert value(text, "chain_cost_estimated_total", {**a, "currency": "USD"}) == pytest.approx(cost)
        assert value(text, "chain_tokens_total", {**local, "direction": "input"}) == 500
        assert value(text, "chain_cost_estimated_total", {**local, "currency": "USD"}) is None


# --- the pages ------------------------------------------------------------------------------


def between(text: str, start: str, end: str) -> str:
    """``text`` from ``start`` to the first ``end`` after it."""
    at = text.index(start)
    return text[at : text.index(end, at)]


def fleet_on_vendor_a(reader: Client) -> None:
    """Each instance served 100 requests on chat's head (1,000 input and 250 output tokens
    each) and 10 on self_hosted/8b, which has no price."""
    each_instance_reports(
        reader,
        [
            step("vendor_a", "large", {"served": 100}, tokens=(100_000, 25_000, 100)),
            step("self_hosted", "8b", {"served": 10}, tokens=(1_000, 100, 10)),
        ],
    )


def test_the_chain_page_shows_each_steps_spend_its_price_and_a_plot_and_the_dashboard_its_pace(
    reader: Client, oncall: Client
) -> None:
    a_cost = 3 * (100_000 * 2.5 + 25_000 * 10) / 1e6
    with time_machine.travel(T0, tick=False):
        fleet_on_vendor_a(reader)
        page = oncall.get("/chains/chat/").content.decode()
        dashboard = oncall.get("/").content.decode()
    panel = between(page, 'id="spend"', "</section>")
    row = between(panel, 'data-step="vendor_a/large"', "</li>")
    assert f"${a_cost:,.2f} in the last hour" in row and "300 in the last hour" in row
    assert "Price per million tokens: 2.50 in, 10.00 out (USD, as of 2026-12-01, example price list)" in row
    local = panel[panel.index('data-step="self_hosted/8b"') :]
    assert "cost unknown" in local and "No price in the provider registry" in local
    assert "spend unknown: self_hosted/8b: no price in the provider registry" in panel
    assert '<figure class="plot-figure" id="spend-plot">' in panel and "Spend per hour over the last 12 hours" in panel
    assert 'href="/api/v1/chains/chat/spend"' in panel
    assert 'href="/chains/chat/#spend">Spend</a>: spend unknown' in dashboard


def spend_alerts() -> list[Alert]:
    return list(Alert.objects.filter(kind=AlertKind.SPEND).order_by("id"))


def a_minute_of_traffic(
    client: Client, *, requests: int, fallback: int = 0, instances: int = 3, head: str = "vendor_a"
) -> None:
    """Each instance served ``requests`` on ``head``'s large model and ``fallback`` on the other
    vendor's, 1,000 input and 200 output tokens each ($0.0045 a request on vendor_a/large,
    $0.0144 on vendor_b/large)."""
    other = "vendor_b" if head == "vendor_a" else "vendor_a"
    steps = [step(head, "large", {"served": requests}, tokens=(1_000 * requests, 200 * requests, requests))]
    if fallback:
        steps.append(step(other, "large", {"served": fallback}, tokens=(1_000 * fallback, 200 * fallback, fallback)))
    each_instance_reports(client, steps, instances=instances)


@pytest.mark.slow
def test_spend_over_its_baseline_raises_one_alert_within_two_sweeps_that_resolves_when_it_falls_back(
    reader: Client, settings: Any
) -> None:
    """Slow on purpose (~140 usage reports through the API): the alert compares a window with
    the three hours before it, so three hours of traffic come first."""
    settings.SPEND_ALERT_MINUTES, settings.SPEND_ALERT_RATIO, settings.SPEND_ALERT_MIN_PER_HOUR = 10, 3.0, 1.0
    start = T0 - timedelta(hours=3)
    # Three hours of a steady 30 requests a minute ($8.10 an hour), reported every 5 minutes.
    for minute in range(0, 180, 5):
        with time_machine.travel(start + timedelta(minutes=minute), tick=False):
            a_minute_of_traffic(reader, requests=50)  # 150 every 5 min: 30 a minute
    with time_machine.travel(T0, tick=False):
        assert alert_providers() == 0  # the usual pace: nothing
        assert spend_alerts() == []
    # Then 4× the pace on the same head for the alert window: the first sweep after it raises.
    for second in range(0, 600, 60):
        with time_machine.travel(T0 + timedelta(seconds=second), tick=False):
            a_minute_of_traffic(reader, requests=40)
    with time_machine.travel(T0 + timedelta(seconds=600), tick=False):
        alert_providers()
        alert_providers()
    (alert,) = spend_alerts()
    assert alert.subject == "total" and alert.is_open
    assert "over 3× its pace of the 3 h before" in alert.message and "SPEND_ALERT_RATIO" in alert.message
    assert alert.details["per_hour"] > 3 * alert.details["baseline_per_hour"]
    assert alert.details["tokens"] == ["reader"] and alert.details["instances"] == 3
    assert alert.details["pin"] is None and actions.for_alert(alert) == []
    # Back to the usual pace: resolved by the sweep after the window holds it.
    with time_machine.travel(T0 + timedelta(minutes=30), tick=False):
        a_minute_of_traffic(reader, requests=50)
        alert_providers()
    alert.refresh_from_db()
    assert not alert.is_open and "back within its bounds" in alert.resolution


def test_fallback_spend_from_nothing_raises_no_alert_until_it_passes_the_ratio_of_the_smallest_pace(
    reader: Client, settings: Any
) -> None:
    """Fallback steps that never served have a baseline of nothing: any spend is infinitely more,
    so the ratio is taken over SPEND_ALERT_MIN_PER_HOUR ($1): $1.54 an hour raises nothing, $3.60 does."""
    settings.SPEND_ALERT_RATIO, settings.SPEND_ALERT_MIN_PER_HOUR = 3.0, 1.0
    for minute in range(0, 120, 10):  # two hours on the head alone
        with time_machine.travel(T0 - timedelta(hours=2) + timedelta(minutes=minute), tick=False):
            a_minute_of_traffic(reader, requests=10)
    with time_machine.travel(T0, tick=False):
        a_minute_of_traffic(reader, requests=0, fallback=6)  # 18 x $0.0144 over 10.5 min: $1.48 an hour
        alert_providers()
        assert spend_alerts() == []
        a_minute_of_traffic(reader, requests=0, fallback=15)  # 45 more: $5.18 an hour
        alert_providers()
    (alert,) = [alert for alert in spend_alerts() if alert.subject == "fallback"]
    assert "over 3× its pace of the 2 h before ($0.00 an hour" in alert.message


def test_fallback_spend_over_its_bound_raises_and_offers_to_end_the_pin_that_moved_it(
    reader: Client, settings: Any
) -> None:
    settings.SPEND_ALERT_RATIO, settings.SPEND_ALERT_FALLBACK_PER_HOUR = 0, 5.0
    with time_machine.travel(T0, tick=False):
        services.select_preset(
            chain="chat", preset="pin_secondary", expires_at=timedelta(hours=1), actor="carol", reason="INC-1"
        )
        # vendor_a/large falls back after vendor_b/large: 15 over the window are under $5 an hour, 1,200 over.
        a_minute_of_traffic(reader, requests=1, fallback=5, head="vendor_b")
        alert_providers()
        assert spend_alerts() == []
        a_minute_of_traffic(reader, requests=1, fallback=400, head="vendor_b")
        alert_providers()
    (alert,) = spend_alerts()
    assert alert.subject == "fallback" and "SPEND_ALERT_FALLBACK_PER_HOUR" in alert.message
    assert alert.details["pin"] == "pin_secondary"
    (action,) = actions.for_alert(alert)
    assert action.kind == actions.REVERT and "under pin pin_secondary" in action.reason


def test_one_services_made_up_fleet_cannot_raise_a_spend_alert(settings: Any) -> None:
    """The tokens of three instances of one service not marked sole evidence: no alert."""
    settings.SPEND_ALERT_RATIO, settings.SPEND_ALERT_PER_HOUR = 0, 0.01
    alone = Client(headers={"Authorization": f"Bearer {make_token('checkout', 'read')}"})
    with time_machine.travel(T0, tick=False):
        a_minute_of_traffic(alone, requests=100)
        alert_providers()
    assert spend_alerts() == []


# --- history and the audit export -----------------------------------------------------------


@pytest.mark.slow
def test_history_and_the_audit_export_carry_the_spend_before_and_after_each_change(
    reader: Client, writer: Client, oncall: Client
) -> None:
    """Slow on purpose (120 usage reports through the API): forty minutes of traffic, the
    spend of twenty before a change and of twenty after it."""
    pin_at = T0 + timedelta(minutes=19, seconds=30)  # 02:20:00, after the traffic of 02:19
    for minute in range(40):  # 3 x 10 requests a minute on vendor_a/large, then on vendor_b/large after the pin
        with time_machine.travel(T0 + timedelta(minutes=minute, seconds=5), tick=False):
            a_minute_of_traffic(reader, requests=10, head="vendor_a" if minute < 20 else "vendor_b")
        if minute == 19:
            with time_machine.travel(pin_at, tick=False):
                services.select_preset(
                    chain="chat", preset="pin_secondary", expires_at=timedelta(hours=2), actor="carol", reason="INC-1"
                )
    before, after = 30 * 0.0045 * 60, 30 * 0.0144 * 60  # $8.10 and $25.92 an hour
    with time_machine.travel(T0 + timedelta(minutes=45), tick=False):
        lines = [json.loads(line) for line in writer.get("/api/v1/history").getvalue().decode().splitlines()]
        page = oncall.get("/chains/chat/history/").content.decode()
        out = io.StringIO()
        call_command("export_history", "--format", "csv", stdout=out)
    pin = next(line for line in lines if line["action"] == "select")
    assert pin["spend_currency"] == "USD"
    assert pin["spend_before_per_hour"] == pytest.approx(before, rel=0.01)
    assert pin["spend_after_per_hour"] == pytest.approx(after, rel=0.01)
    first = next(line for line in lines if line["version"] == 1)  # the sync, an hour or two before any traffic
    assert first["spend_before_per_hour"] == first["spend_after_per_hour"] == 0.0
    (later,) = spend.around_changes([pin], now=T0 + timedelta(hours=72))  # older than the health window keeps
    assert later["spend_before_per_hour"] is None and later["spend_after_per_hour"] is None
    shown = between(page, 'id="chat-v2"', "</li>")  # the pin's entry: its details say the spend around it
    assert f'<dd class="entry-spend">${before:,.2f} an hour in the 15 min before, ${after:,.2f} after</dd>' in shown
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert float(next(row for row in rows if row["action"] == "select")["spend_after_per_hour"]) == pytest.approx(
        after, rel=0.01
    )


def test_the_pages_slack_and_the_command_line_say_the_same_cost_of_a_pin(reader: Client, oncall: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(reader, f"i{n}", [step("vendor_a", "large", {"served": 110}, tokens=(110_000, 22_000, 110))])
        page = oncall.post(
            "/chains/chat/select",
            {"preset": "pin_secondary", "duration_minutes": "60", "reason": "INC-1 vendor_b", "expected_version": "1"},
            follow=True,
        ).content.decode()
        on_page = html.unescape(between(page, 'id="cost-note"', "</p>")).split("</strong> ", 1)[1].removesuffix(".")
        live = Selection.objects.select_related("chain", "preset").get(chain__name="chat")
        action = actions.Action(actions.PIN, "chat", live.version, preset="pin_secondary", minutes=60)
        in_slack = reviews.summary(action, reviews.review(action, live))
        out = io.StringIO()
        call_command("select_preset", "chat", "pin_secondary", "--minutes", "60", "--reason", "INC-1", stdout=out)
    assert on_page.startswith("moves about 60 requests a minute from vendor_a/large to vendor_b/large")
    assert on_page.endswith("3.2× the price per token")
    assert f"Cost: {on_page}" in in_slack
    assert f"cost: {on_page}" in out.getvalue().splitlines()


# --- a pin's own spend bound ------------------------------------------------------------------


def test_a_pins_spend_bound_raises_a_spend_alert_when_crossed_and_lasts_as_long_as_the_pin(
    reader: Client, writer: Client, settings: Any
) -> None:
    settings.SPEND_ALERT_RATIO = 0
    with time_machine.travel(T0, tick=False):
        response = writer.post(
            "/api/v1/chains/chat/select",
            {"preset": "pin_secondary", "reason": "INC-3", "duration_minutes": 60, "spend_bound_per_hour": "2.50"},
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
        pinned = Selection.objects.get(chain__name="chat")
        assert pinned.spend_bound_per_hour == Decimal("2.50")
        # 3 x 3 requests on vendor_b/large: $0.13 over 10.5 minutes, $0.74 an hour: under the bound.
        a_minute_of_traffic(reader, requests=3, head="vendor_b")
        alert_providers()
        assert spend_alerts() == []
        a_minute_of_traffic(reader, requests=20, head="vendor_b")  # $5.67 an hour: over it
        alert_providers()
        (alert,) = spend_alerts()
        assert (
            alert.subject == "total" and "over the bound of $2.50 an hour set with pin pin_secondary" in alert.message
        )
        services.extend_pin(chain="chat", actor="carol", reason="still down", expires_at=timedelta(hours=2))
        assert Selection.objects.get(chain__name="chat").spend_bound_per_hour == Decimal("2.50")
        services.revert_to_default(chain="chat", actor="carol", reason="back")
        assert Selection.objects.get(chain__name="chat").spend_bound_per_hour is None
        alert_providers()  # no pin, no bound: the alert resolves
    alert.refresh_from_db()
    assert not alert.is_open


@pytest.mark.parametrize(
    ("bound", "says"),
    [("0", "more than 0"), ("abc", "an amount, like 25 or 12.50"), ("1.234", "at most 2 decimal places")],
)
def test_a_bad_spend_bound_is_refused_whole_in_the_api(writer: Client, bound: str, says: str) -> None:
    response = writer.post(
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "INC-3", "spend_bound_per_hour": bound},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert says in response.json()["error"]["details"]["fields"]["spend_bound_per_hour"][0]
    assert Selection.objects.get(chain__name="chat").version == 1


def test_the_command_line_and_the_pages_set_a_pins_spend_bound(oncall: Client) -> None:
    with pytest.raises(CommandError, match=r"--spend-bound: 'lots' is not an amount"):
        call_command("select_preset", "chat", "pin_secondary", "--reason", "INC-4", "--spend-bound", "lots")
    with pytest.raises(CommandError, match=r"--spend-bound: a spend bound is an amount an hour above 0"):
        call_command("select_preset", "chat", "pin_secondary", "--reason", "INC-4", "--spend-bound", "-1")
    assert Selection.objects.get(chain__name="chat").version == 1

    form = {"preset": "pin_secondary", "duration_minutes": "60", "reason": "INC-4", "expected_version": "1"}
    refused = oncall.post("/chains/chat/select", {**form, "spend_bound_per_hour": "1.234"}, follow=True)
    assert "a spend bound is to the cent: at most 2 decimal places" in refused.content.decode()
    review = oncall.post("/chains/chat/select", {**form, "spend_bound_per_hour": "12.5"}, follow=True)
    note = between(review.content.decode(), 'id="spend-bound-note"', "</p>")
    assert "a spend alert if chat's spend passes $12.50 an hour while this pin is live" in note
    oncall.post("/chains/chat/select", {**form, "spend_bound_per_hour": "12.50", "confirmed": "on"})
    assert Selection.objects.get(chain__name="chat").spend_bound_per_hour == Decimal("12.50")
    page = oncall.get("/chains/chat/").content.decode()
    assert "Pin pin_secondary has a spend bound of $12.50 an hour" in html.unescape(
        between(page, 'id="spend-bound"', "</p>")
    )
    # Serving the default again is no pin: it takes no bound.
    with pytest.raises(
        CommandError, match=r"--spend-bound: 'normal' is the default preset: a spend bound is for a pin"
    ):
        call_command("select_preset", "chat", "normal", "--reason", "INC-4", "--spend-bound", "3")
