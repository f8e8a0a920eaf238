"""The cost of a change as a system: real SDK instances (their vendors faked by
chainclient.testing, answering with known token counts) poll a live control plane, route
requests and report the tokens of every attempt through the usage API; the spend API and the
chain page equal tokens x prices, the review of a pin estimates what it will cost, and after
the pin the fleet reports what the review said.

The wall clock is moved (time-machine, ticking) to chosen seconds of a minute, so the estimate
and the figure after the pin are read over windows of the same length; the instances' own
timers run on the monotonic clock, unmoved.

Slow by nature (~15 s): the tokens are real reports arriving over real seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from chainclient import ChainClient, Provider, Registry, Router, Step
from chainclient.receipts import Answer
from chainclient.testing import FakeProviders
from presets import services
from presets.models import Selection
from presets.providers import price_of
from presets.registry import PROVIDERS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

INSTANCES = 5
REQUESTS = 12  # each instance, in each phase
TOKENS = (1_200, 300)  # every answer's input and output tokens
REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000), Step("vendor_b", "large", 20000), Step("self_hosted", "8b", 10000)]
# On the hour, an hour or two after the tests' own sync of the presets and the sign-in.
M0 = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
WITHIN_S = 15.0


def answering(provider: str) -> Callable[[Step, Any, float], Answer]:
    def answer(step: Step, request: Any, timeout_s: float) -> Answer:
        return Answer(f"{provider} answered", model_id=step.model, input_tokens=TOKENS[0], output_tokens=TOKENS[1])

    return answer


@pytest.fixture
def fleet(live_server: Any, read_token: str, settings: Any) -> Iterator[list[tuple[ChainClient, Router]]]:
    # These instances report every second, not every minute: limits sized for that.
    settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE = 120
    settings.USAGE_REPORTS_PER_TOKEN_PER_MINUTE = settings.USAGE_REPORTS_PER_CHAIN_PER_MINUTE = 60 * 120
    instances = []
    for n in range(INSTANCES):
        client = ChainClient(
            live_server.url,
            chain="chat",
            token=read_token,
            registry=REGISTRY,
            default=DEFAULT,
            usage_interval=1.0,
            service="spend-test",
            instance=f"i{n}",
        )
        fakes = FakeProviders(providers=("vendor_a", "vendor_b", "self_hosted")).configure(
            {name: answering(name) for name in ("vendor_a", "vendor_b")}
        )
        instances.append((client, Router(client, transports=fakes.transports, breaker=None)))
    yield instances  # started by the test, on its clock
    for client, _ in instances:
        client.stop()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > WITHIN_S:
            raise AssertionError(f"{what}: not within {WITHIN_S:g} s")
        time.sleep(0.2)


def cost(provider: str, requests: int) -> float:
    price = price_of(provider, "large")
    assert price is not None
    return requests * (TOKENS[0] * float(price.input_per_mtok) + TOKENS[1] * float(price.output_per_mtok)) / 1e6


def test_the_fleets_tokens_price_the_chain_and_the_review_of_a_pin_says_what_it_then_costs(
    fleet: list[tuple[ChainClient, Router]], reader: Client, alice: User
) -> None:
    oncall = Client()
    oncall.force_login(alice)

    def step_spend(provider: str) -> dict[str, Any]:
        steps = reader.get("/api/v1/chains/chat/spend").json()["steps"]
        return next((s for s in steps if s["provider"] == provider and s["model"] == "large"), {"requests": 0})

    def route(expected: str) -> None:
        for _, router in fleet:
            for _ in range(REQUESTS):
                assert router.complete("hello").provider == expected

    served = INSTANCES * REQUESTS
    with time_machine.travel(M0, tick=True) as clock:
        for client, _ in fleet:  # their reads, on this clock, make them instances that poll the chain
            client.start()
        route("vendor_a")
        wait_for(lambda: step_spend("vendor_a")["requests"] == served, "the fleet's reports of vendor_a")
        clock.move_to(M0 + timedelta(seconds=30))  # the last 5 minutes' pace: over 5.5 minutes
        head = step_spend("vendor_a")
        # The figures are the tokens the fleet reported at the registry's price, within 1 %.
        assert head["input_tokens"] == served * TOKENS[0] and head["output_tokens"] == served * TOKENS[1]
        assert head["requests_without_tokens"] == 0
        assert head["cost_last_hour"] == pytest.approx(cost("vendor_a", served), rel=0.01)
        assert head["cost_per_hour"] == pytest.approx(cost("vendor_a", served) * 60 / 5.5, rel=0.01)
        page = oncall.get("/chains/chat/").content.decode()
        row = page.split('id="spend"')[1].split('data-step="vendor_a/large"')[1].split("</li>")[0]
        assert f"${cost('vendor_a', served):,.2f}" in row

        review = oncall.post(
            "/chains/chat/select",
            {"preset": "pin_secondary", "duration_minutes": "60", "reason": "INC-7", "expected_version": "1"},
            follow=True,
        ).content.decode()
        note = review.split('id="cost-note"')[1].split("</p>")[0]
        estimate = re.search(r"about \$([0-9,.]+) after\)", note)
        assert estimate, note
        assert "from vendor_a/large to vendor_b/large" in note and "3.2× the price per token" in note
        promised = float(estimate.group(1).replace(",", ""))

        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        pinned = Selection.objects.get(chain__name="chat").version
        wait_for(
            lambda: all(client.current().version == pinned for client, _ in fleet),
            "every instance on the pin",
        )
        clock.move_to(M0 + timedelta(minutes=1))
        route("vendor_b")
        wait_for(lambda: step_spend("vendor_b")["requests"] == served, "the fleet's reports of vendor_b")
        clock.move_to(M0 + timedelta(minutes=1, seconds=30))  # a window as long as the estimate's
        after = step_spend("vendor_b")

    assert after["cost_per_hour"] == pytest.approx(cost("vendor_b", served) * 60 / 5.5, rel=0.01)
    # The review's estimate, within 10 % of what the fleet reported after the pin.
    assert promised == pytest.approx(after["cost_per_hour"], rel=0.10)
