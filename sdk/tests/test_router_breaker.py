"""Per-provider circuit breakers: open after repeated failures, skip, probe, recover."""

from __future__ import annotations

from typing import Any

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import (
    AllProvidersFailed,
    BreakerSettings,
    NoEligibleRoute,
    ProviderError,
    RequestRejected,
    Router,
    Step,
)
from chainclient.testing import FakeClock, FakeProviders

pytestmark = pytest.mark.usefixtures("router_kind")

BREAKER = BreakerSettings(failure_threshold=2, window_s=60.0, cooldown_s=30.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fakes(clock: FakeClock) -> FakeProviders:
    return fakes_for({"alpha": 503}, clock)


@pytest.fixture
def router(fakes: FakeProviders) -> Router:
    # A fresh router per test: no breaker state leaks from one test into another.
    return make_router(fakes, breaker=BREAKER)


def open_alphas_breaker(router: Router) -> None:
    for _ in range(BREAKER.failure_threshold):
        router.complete("hello")
    assert router.breaker_state("alpha") == "open"


def test_the_breaker_opens_after_the_threshold_and_the_order_skips_that_provider(
    router: Router, fakes: FakeProviders
) -> None:
    open_alphas_breaker(router)
    fakes.clear()

    result = router.complete("hello")

    assert fakes.attempts == ["beta"]
    assert tried(result) == ["beta"]
    assert result.attempts[0].attempt_id.endswith("-1")
    assert "circuit breaker open" in dict(result.receipt.refused)[Step("alpha", "chat", 10_000)]
    assert "skipped alpha/chat: circuit breaker open" in str(result)


def test_failures_spread_wider_than_the_window_do_not_open_it(router: Router, clock: FakeClock) -> None:
    router.complete("hello")
    clock.advance(BREAKER.window_s + 1)
    router.complete("hello")

    assert router.breaker_state("alpha") == "closed"


def test_after_the_cooldown_one_probe_is_let_through_and_success_closes_the_breaker(
    router: Router, fakes: FakeProviders, clock: FakeClock
) -> None:
    open_alphas_breaker(router)
    clock.advance(BREAKER.cooldown_s - 1)
    fakes.clear()
    router.complete("hello")
    assert fakes.attempts == ["beta"]

    clock.advance(1)
    fakes.ok("alpha")
    fakes.clear()
    result = router.complete("hello")

    assert fakes.attempts == ["alpha"]
    assert result.provider == "alpha"
    assert router.breaker_state("alpha") == "closed"


def test_a_failed_probe_opens_the_breaker_for_a_probe_interval_not_another_cooldown(
    router: Router, fakes: FakeProviders, clock: FakeClock
) -> None:
    open_alphas_breaker(router)
    clock.advance(BREAKER.cooldown_s)
    fakes.clear()

    assert tried(router.complete("hello")) == ["alpha", "beta"]  # the probe, failed
    assert router.breaker_state("alpha") == "open"
    assert tried(router.complete("hello")) == ["beta"]
    clock.advance(BREAKER.probe_interval_s - 0.5)
    assert tried(router.complete("hello")) == ["beta"]
    clock.advance(0.5)
    assert tried(router.complete("hello")) == ["alpha", "beta"]  # the next probe


@pytest.mark.parametrize("down_s", [45, 60, 63, 77])
def test_a_primary_down_for_about_a_minute_is_probed_once_a_probe_interval_and_used_again_soon_after_it_recovers(
    clock: FakeClock, down_s: int
) -> None:
    """The fault benchmark's case at the defaults: alpha fails every request for about a
    minute (outages that end at different moments of the breaker's schedule), then answers;
    one request a second. Nothing fails for the caller, alpha gets at most one request a
    probe interval while its breaker is open, and serves again within a probe interval (and
    the second between requests) of its recovery."""
    settings = BreakerSettings()
    recovers_at = clock.now() + down_s

    def alpha(step: Step, request: Any, timeout_s: float) -> Any:
        if clock.now() < recovers_at:
            raise ProviderError(503, True, "down")
        return "alpha"

    fakes = fakes_for({"alpha": alpha}, clock)
    router = make_router(fakes, breaker=settings)
    served: list[tuple[float, str]] = []
    alpha_calls: list[float] = []
    for _ in range(down_s + 30):
        fakes.clear()
        result = router.complete("hello")
        if "alpha" in fakes.attempts:
            alpha_calls.append(clock.now())
        served.append((clock.now(), result.provider))
        clock.advance(1.0)

    opened_at = alpha_calls[settings.failure_threshold - 1]
    while_open = [at for at in alpha_calls if opened_at < at < recovers_at]
    gaps = [later - earlier for earlier, later in zip(while_open, while_open[1:], strict=False)]
    assert gaps and min(gaps) >= settings.probe_interval_s
    back_at = min(at for at, provider in served if provider == "alpha" and at >= recovers_at)
    assert back_at - recovers_at <= settings.probe_interval_s + 1.0
    assert all(provider == "alpha" for at, provider in served if at >= back_at)


def test_while_the_probe_is_in_flight_other_requests_skip_the_provider(
    router: Router, fakes: FakeProviders, clock: FakeClock
) -> None:
    open_alphas_breaker(router)
    clock.advance(BREAKER.cooldown_s)
    during_probe: list[list[str]] = []

    def probe(step: Step, request: Any, timeout_s: float) -> Any:
        if request == "probe":
            during_probe.append(tried(router.complete("meanwhile")))
        return "alpha is back"

    fakes.configure({"alpha": probe})

    result = router.complete("probe")

    assert result.value == "alpha is back"
    assert during_probe == [["beta"]]
    assert router.breaker_state("alpha") == "closed"


@pytest.mark.parametrize(
    ("spec", "policy_falls_through"),
    [(400, False), (422, False), ("content_policy", False), ("content_policy", True)],
    ids=["400", "422", "content-policy-stops", "content-policy-falls-through"],
)
def test_rejections_and_policy_refusals_do_not_count_against_the_provider(
    clock: FakeClock, spec: Any, policy_falls_through: bool
) -> None:
    router = make_router(
        fakes_for({"alpha": spec}, clock), breaker=BREAKER, fall_through_on_content_policy=policy_falls_through
    )

    for _ in range(BREAKER.failure_threshold + 1):
        if policy_falls_through:
            assert router.complete("hello").provider == "beta"
        else:
            with pytest.raises(RequestRejected):
                router.complete("hello")

    assert router.breaker_state("alpha") == "closed"


def test_every_breaker_open_is_a_refusal_not_an_outage(clock: FakeClock) -> None:
    fakes = fakes_for({"alpha": 503, "beta": 503, "gamma": 503}, clock)
    router = make_router(fakes, breaker=BREAKER)
    for _ in range(BREAKER.failure_threshold):
        with pytest.raises(AllProvidersFailed):
            router.complete("hello")
    fakes.clear()
    router.reset_report()

    with pytest.raises(NoEligibleRoute) as caught:
        router.complete("hello")

    assert fakes.attempts == []
    assert all("circuit breaker open" in why for why in caught.value.reasons.values())
    assert router.report()["refusals"] == 1
    assert router.report()["all_failed"] == 0


def test_reset_breakers_closes_every_breaker(router: Router, fakes: FakeProviders) -> None:
    open_alphas_breaker(router)

    router.reset_breakers()
    fakes.clear()
    router.complete("hello")

    assert router.breaker_state("alpha") == "closed"
    assert fakes.attempts == ["alpha", "beta"]


def test_breaker_settings_reject_a_threshold_below_one() -> None:
    with pytest.raises(ValueError, match="breaker=None"):
        BreakerSettings(failure_threshold=0)
