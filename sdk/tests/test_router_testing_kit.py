"""The testing kit behaves as documented, so tests built on it mean what they say."""

from __future__ import annotations

from typing import Any

import pytest
from router_fixtures import make_router, tried

from chainclient import (
    ContentPolicyRefusal,
    DeadlineExceeded,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    Step,
    TransportError,
)
from chainclient.testing import FakeChainClient, FakeClock, FakeProviders, Spec, fake_chain

pytestmark = pytest.mark.usefixtures("router_kind")

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


# (behaviour due after 9.9 s, with a 5.2 s budget): each times out at the budget instead.
LATE = [
    ("ok", lambda fakes: fakes.ok("alpha", after_s=9.9)),
    ("fail", lambda fakes: fakes.fail("alpha", 503, after_s=9.9)),
    ("unavailable", lambda fakes: fakes.unavailable("alpha", after_s=9.9)),
    ("content_policy", lambda fakes: fakes.content_policy("alpha", after_s=9.9)),
    ("error", lambda fakes: fakes.error("alpha", after_s=9.9)),
    ("timeout", lambda fakes: fakes.timeout("alpha", after_s=9.9)),
]


@pytest.mark.parametrize("late", [behave for _, behave in LATE], ids=[name for name, _ in LATE])
def test_a_fake_slower_than_the_attempt_s_timeout_times_out_at_the_timeout(late: Any) -> None:
    clock = FakeClock(start=0)
    fakes = FakeProviders(clock)
    late(fakes)
    router = make_router(fakes, fake_chain(["alpha"]), deadline_s=5.2)

    with pytest.raises(DeadlineExceeded) as caught:
        router.complete("hello")

    attempt = caught.value.attempts[0]
    assert (attempt.outcome, attempt.dispatch, attempt.timeout_s) == ("timeout", "dispatched_unknown", 5.2)
    assert clock.now() == pytest.approx(5.2)


def test_a_late_fake_falls_through_to_the_next_step_within_the_budget() -> None:
    clock = FakeClock(start=0)
    fakes = FakeProviders(clock).ok("alpha", after_s=12)
    router = make_router(fakes, deadline_s=30)  # alpha's step allows 10 s

    result = router.complete("hello")

    assert tried(result) == ["alpha", "beta"]
    assert clock.now() == pytest.approx(10)


def test_a_fake_within_its_timeout_answers() -> None:
    fakes = FakeProviders(FakeClock(start=0)).ok("alpha", after_s=5.2)
    router = make_router(fakes, fake_chain(["alpha"]), deadline_s=5.2)

    assert router.complete("hello").provider == "alpha"


def test_providers_not_configured_answer_ok_so_one_line_tests_one_failure() -> None:
    fakes = FakeProviders().configure({"alpha": 503})
    router = make_router(fakes)

    result = router.complete("hello")

    assert (result.provider, result.value) == ("beta", "answer from beta")
    assert fakes.attempts == ["alpha", "beta"]


def test_fakes_for_other_provider_names_answer_ok_too() -> None:
    fakes = FakeProviders(providers=("vendor_a", "vendor_b")).configure({"vendor_a": 429})

    assert sorted(fakes.transports) == ["vendor_a", "vendor_b"]
    assert fakes.transports["vendor_b"](Step("vendor_b", "large", 1000), "q", 1.0) == "answer from vendor_b"


def test_the_attempt_log_survives_reconfiguring() -> None:
    fakes = FakeProviders().configure({"alpha": 503})
    router = make_router(fakes)
    router.complete("one")

    fakes.configure({"alpha": "ok", "beta": 503})
    router.complete("two")

    assert fakes.attempts == ["alpha", "beta", "alpha"]
    assert [call.request for call in fakes.calls] == ["one", "one", "two"]
