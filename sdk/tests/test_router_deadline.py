"""One time budget per request: attempts get what is left, and running out is its own error.

Every test here runs on a FakeClock advanced by the fakes; nothing sleeps.
"""

from __future__ import annotations

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import AllProvidersFailed, DeadlineExceeded, Step
from chainclient.testing import FakeClock, FakeProviders, fake_chain

pytestmark = pytest.mark.usefixtures("router_kind")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fakes(clock: FakeClock) -> FakeProviders:
    return fakes_for(clock=clock)


def test_each_attempt_gets_the_step_timeout_or_the_time_left_whichever_is_less(
    fakes: FakeProviders,
) -> None:
    fakes.fail("alpha", 503, after_s=4).fail("beta", 503, after_s=5)
    router = make_router(fakes, deadline_s=12)  # every step allows 10 s

    result = router.complete("hello")

    assert result.provider == "gamma"
    assert [call.timeout_s for call in fakes.calls] == [10, 8, 3]
    assert [a.timeout_s for a in result.attempts] == [10, 8, 3]
    assert [a.elapsed_s for a in result.attempts] == [4, 5, 0]


def test_running_out_mid_chain_is_deadline_exceeded_and_no_further_attempt_starts(
    fakes: FakeProviders,
) -> None:
    fakes.timeout("alpha").timeout("beta")  # each waits out the whole time it was given
    router = make_router(fakes, deadline_s=12)

    with pytest.raises(DeadlineExceeded) as caught:
        router.complete("hello")

    assert type(caught.value) is DeadlineExceeded
    assert fakes.attempts == ["alpha", "beta"]
    assert [call.timeout_s for call in fakes.calls] == [10, 2]
    assert tried(caught.value) == ["alpha", "beta"]
    assert caught.value.deadline_s == 12
    assert "deadline of 12s exceeded after 2 attempt(s)" in str(caught.value)
    assert "not started: gamma/chat" in str(caught.value)
    assert router.report()["deadline"] == 1
    assert router.report()["all_failed"] == 0


def test_a_failure_that_uses_up_the_budget_stops_the_walk_before_the_next_step(
    fakes: FakeProviders,
) -> None:
    fakes.fail("alpha", 503, after_s=10)
    router = make_router(fakes, deadline_s=10)

    with pytest.raises(DeadlineExceeded) as caught:
        router.complete("hello")

    assert fakes.attempts == ["alpha"]
    assert caught.value.attempts[0].status == 503


def test_a_last_step_cut_short_by_the_budget_is_a_deadline_not_all_failed(
    fakes: FakeProviders,
) -> None:
    fakes.timeout("alpha").timeout("beta")
    router = make_router(fakes, fake_chain(["alpha", "beta"]), deadline_s=15)

    with pytest.raises(DeadlineExceeded):
        router.complete("hello")

    assert [call.timeout_s for call in fakes.calls] == [10, 5]


def test_every_step_failing_inside_the_budget_is_all_failed_not_a_deadline(
    fakes: FakeProviders,
) -> None:
    fakes.timeout("alpha").timeout("beta")
    chain = [Step("alpha", "chat", 5_000), Step("beta", "chat", 5_000)]
    router = make_router(fakes, chain, deadline_s=30)

    with pytest.raises(AllProvidersFailed):
        router.complete("hello")

    assert [call.timeout_s for call in fakes.calls] == [5, 5]


def test_the_budget_is_per_request_not_per_router(fakes: FakeProviders, clock: FakeClock) -> None:
    fakes.fail("alpha", 503, after_s=8)
    router = make_router(fakes, deadline_s=12)
    router.complete("first")
    clock.advance(100)
    fakes.clear()

    router.complete("second")

    assert [call.timeout_s for call in fakes.calls] == [10, 4]


def test_a_router_needs_a_positive_deadline() -> None:
    with pytest.raises(ValueError, match="deadline_s"):
        make_router(fakes_for(), deadline_s=0)
