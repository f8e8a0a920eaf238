"""A request over a step's context window: the next step with a larger window takes it."""

from __future__ import annotations

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import AllProvidersFailed, BreakerSettings, Provider, RequestRejected, Step
from chainclient.testing import FAKE_MODEL, fake_registry

pytestmark = pytest.mark.usefixtures("router_kind")

ALPHA, BETA, GAMMA = (Step(name, FAKE_MODEL, 10_000) for name in ("alpha", "beta", "gamma"))


def test_the_walk_skips_steps_no_larger_and_the_larger_one_serves() -> None:
    fakes = fakes_for({"alpha": "context_length"})
    registry = fake_registry(context_windows={"alpha": 8192, "beta": 8192, "gamma": 128_000})
    router = make_router(fakes, registry=registry)

    result = router.complete("a long request")

    assert (result.provider, tried(result)) == ("gamma", ["alpha", "gamma"])
    first = result.attempts[0]
    assert (first.outcome, first.status) == ("rejected", 400)
    assert first.reason == "HTTP 400: context length exceeded; trying a step with a larger context window"
    assert result.receipt.refused == (
        (BETA, "context window of 8192 tokens is not larger than alpha/chat's 8192; the request would not fit"),
    )
    assert fakes.attempts == ["alpha", "gamma"]  # beta was never called


def test_with_windows_not_known_every_later_step_is_tried_in_order() -> None:
    fakes = fakes_for({"alpha": "context_length", "beta": "context_length"})
    router = make_router(fakes, registry=fake_registry(context_windows={"alpha": 8192}))

    result = router.complete("a long request")

    assert tried(result) == ["alpha", "beta", "gamma"]
    assert result.receipt.refused == ()


def test_the_largest_window_known_not_to_fit_bounds_the_rest() -> None:
    """alpha (32k) and beta (window not known) both reject it: gamma (16k) cannot take it
    either, whichever rejected last."""
    fakes = fakes_for({"alpha": "context_length", "beta": "context_length"})
    registry = fake_registry(context_windows={"alpha": 32_000, "gamma": 16_000})
    router = make_router(fakes, registry=registry)

    with pytest.raises(RequestRejected) as caught:
        router.complete("a long request")

    assert fakes.attempts == ["alpha", "beta"]
    assert caught.value.status == 400
    assert str(caught.value).startswith(
        "beta/chat rejected the request: context length exceeded, and no later step has a larger context window"
    )
    assert dict(caught.value.receipt.refused)[GAMMA].startswith("context window of 16000 tokens")


def test_when_no_step_can_take_it_the_request_is_rejected_not_a_provider_failure() -> None:
    fakes = fakes_for({"alpha": "context_length", "beta": "context_length", "gamma": "context_length"})
    router = make_router(fakes)

    with pytest.raises(RequestRejected) as caught:
        router.complete("a long request")

    assert not isinstance(caught.value, AllProvidersFailed)
    assert tried(caught.value) == ["alpha", "beta", "gamma"]
    assert "gamma/chat rejected the request: context length exceeded" in str(caught.value)


def test_a_failure_after_a_larger_step_was_tried_is_that_failure() -> None:
    fakes = fakes_for({"alpha": "context_length", "beta": 503, "gamma": 503})
    router = make_router(fakes)

    with pytest.raises(AllProvidersFailed):
        router.complete("a long request")


def test_a_context_length_rejection_is_no_mark_against_the_provider() -> None:
    fakes = fakes_for({"alpha": "context_length"})
    router = make_router(fakes, breaker=BreakerSettings(failure_threshold=2))

    for _ in range(5):
        assert router.complete("a long request").provider == "beta"

    assert router.breaker_state("alpha") == "closed"


@pytest.mark.parametrize(
    ("windows", "says"),
    [
        ({"chat": 0}, "context_windows['chat'] must be a positive number of tokens, got 0"),
        ({"chat": 8192.0}, "context_windows['chat'] must be a positive number of tokens, got 8192.0"),
        ({"large": 8192}, "context_windows names 'large', which is not one of this provider's models"),
    ],
)
def test_a_registry_context_window_is_a_positive_number_of_tokens_for_one_of_the_providers_models(
    windows: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError) as caught:
        Provider(destination="alpha-us", models={"chat": {"text"}}, context_windows=windows)  # type: ignore[arg-type]
    assert str(caught.value) == says
