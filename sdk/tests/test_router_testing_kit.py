"""The testing kit behaves as documented, so tests built on it mean what they say."""

from __future__ import annotations

import pytest
from router_fixtures import make_router

from chainclient import (
    ContentPolicyRefusal,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    Step,
    TransportError,
)
from chainclient.testing import FakeChainClient, FakeClock, FakeProviders, Spec, fake_chain

STEP = Step("alpha", "chat", 10_000)

SPEC_TABLE: list[tuple[Spec, type[TransportError] | type[RuntimeError], bool, int | None]] = [
    (503, ProviderError, True, 503),
    (401, ProviderError, True, 401),
    ("timeout", ProviderTimeout, True, None),
    ("timeout_before_dispatch", ProviderTimeout, False, None),
    ("unavailable", ProviderUnavailable, False, None),
    ("connection_refused", ProviderUnavailable, False, None),
    ("content_policy", ContentPolicyRefusal, True, None),
    ("unknown", ProviderError, True, None),
    ("error", RuntimeError, True, None),
]
SPEC_IDS = [str(spec) for spec, *_ in SPEC_TABLE]


@pytest.mark.parametrize(("spec", "raises", "dispatched", "status"), SPEC_TABLE, ids=SPEC_IDS)
def test_each_configure_spec_raises_what_it_says(
    spec: Spec, raises: type[Exception], dispatched: bool, status: int | None
) -> None:
    fakes = FakeProviders().configure({"alpha": spec})

    with pytest.raises(raises) as caught:
        fakes.transports["alpha"](STEP, "hello", 10.0)

    assert getattr(caught.value, "dispatched", True) is dispatched
    assert getattr(caught.value, "status", None) == status
    assert fakes.attempts == ["alpha"]


def test_ok_answers_with_the_provider_s_name_or_the_given_value() -> None:
    fakes = FakeProviders().configure({"alpha": "ok"}).ok("gamma", value="hello")

    assert fakes.transports["alpha"](STEP, "q", 1.0) == "answer from alpha"
    assert fakes.transports["gamma"](STEP, "q", 1.0) == "hello"


def test_an_unknown_spec_is_refused_with_the_accepted_values() -> None:
    with pytest.raises(ValueError, match="'ok', an HTTP status"):
        FakeProviders().configure({"alpha": "slow"})


def test_calls_are_recorded_with_the_request_and_timeout() -> None:
    fakes = FakeProviders().ok("alpha")

    fakes.transports["alpha"](STEP, {"prompt": "hi"}, 2.5)

    call = fakes.calls[0]
    assert (call.provider, call.model, call.request, call.timeout_s) == ("alpha", "chat", {"prompt": "hi"}, 2.5)
    fakes.clear()
    assert fakes.attempts == []


def test_a_sequence_plays_its_specs_in_order_and_repeats_the_last() -> None:
    fakes = FakeProviders().sequence("alpha", [503, "ok"])
    call = fakes.transports["alpha"]

    with pytest.raises(ProviderError):
        call(STEP, "q", 1.0)
    assert [call(STEP, "q", 1.0) for _ in range(2)] == ["answer from alpha"] * 2


def test_fakes_spend_fake_time_and_a_timeout_spends_what_it_was_given() -> None:
    clock = FakeClock(start=0)
    fakes = FakeProviders(clock).ok("alpha", after_s=1.5).timeout("beta")

    fakes.transports["alpha"](STEP, "q", 10.0)
    assert clock.now() == 1.5
    with pytest.raises(ProviderTimeout):
        fakes.transports["beta"](STEP, "q", 4.0)
    assert clock.now() == 5.5


def test_the_fake_clock_never_goes_back() -> None:
    with pytest.raises(ValueError, match="does not go back"):
        FakeClock().advance(-1)


def test_behaviour_changed_after_the_router_was_built_takes_effect() -> None:
    fakes = FakeProviders().ok("alpha").ok("beta")
    router = make_router(fakes, fake_chain(["alpha", "beta"]))
    assert router.complete("q").provider == "alpha"

    fakes.fail("alpha", 503)

    assert router.complete("q").provider == "beta"


def test_the_fake_chain_client_serves_what_was_last_set() -> None:
    client = FakeChainClient(fake_chain(["alpha"]))
    client.set(fake_chain(["beta"]))

    assert [step.provider for step in client.current().chain] == ["beta"]
