"""The router tells its source about every attempt it settles and every breaker it opens,
for the provider health in the client's usage reports; a broken hook never costs a request."""

from __future__ import annotations

import logging

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import BreakerSettings, RequestRejected
from chainclient.breaker import CircuitBreaker
from chainclient.testing import FakeChainClient, FakeClock, fake_chain

BREAKER = BreakerSettings(failure_threshold=2, window_s=60.0, cooldown_s=30.0)


@pytest.mark.usefixtures("router_kind")
def test_the_router_tells_its_source_every_attempt_it_settles():
    source = FakeChainClient(fake_chain())
    fakes = fakes_for({"alpha": 503, "beta": "timeout"})
    router = make_router(fakes, chain=source)

    served = router.complete("one")
    fakes.configure({"alpha": 400})
    with pytest.raises(RequestRejected) as rejected:
        router.complete("two")  # an attempt that ends the request is told too

    assert tried(served) == ["alpha", "beta", "gamma"]
    # The very attempts in the receipts, in order: nothing rebuilt, nothing left out.
    assert source.attempts == [*served.attempts, *rejected.value.attempts]
    assert [(a.provider, a.outcome, a.status) for a in source.attempts] == [
        ("alpha", "failed", 503),
        ("beta", "timeout", None),
        ("gamma", "ok", None),
        ("alpha", "rejected", 400),
    ]
    assert source.served == {"gamma": 1}  # record_served is unchanged
    assert source.breaker_openings == {}


@pytest.mark.usefixtures("router_kind")
def test_a_step_skipped_by_admission_is_not_an_attempt():
    source = FakeChainClient(fake_chain())
    clock = FakeClock()
    router = make_router(fakes_for({"alpha": 503}, clock), chain=source, breaker=BREAKER)
    router.complete("one")
    router.complete("two")  # alpha's breaker opens

    result = router.complete("three")

    assert tried(result) == ["beta"]
    assert [a.provider for a in source.attempts] == ["alpha", "beta", "alpha", "beta", "beta"]


@pytest.mark.usefixtures("router_kind")
def test_the_router_tells_its_source_each_time_a_breaker_opens():
    source = FakeChainClient(fake_chain())
    clock = FakeClock()
    fakes = fakes_for({"alpha": 503}, clock)
    router = make_router(fakes, chain=source, breaker=BREAKER)

    router.complete("one")
    assert source.breaker_openings == {}  # one failure: still closed
    router.complete("two")
    assert source.breaker_openings == {"alpha": 1}  # closed -> open
    router.complete("three")
    assert source.breaker_openings == {"alpha": 1}  # skipped while open: no new opening
    clock.advance(BREAKER.cooldown_s + 1)
    router.complete("four")
    assert source.breaker_openings == {"alpha": 2}  # the probe failed: half_open -> open
    clock.advance(BREAKER.cooldown_s + 1)
    fakes.ok("alpha")
    router.complete("five")

    assert router.breaker_state("alpha") == "closed"
    assert source.breaker_openings == {"alpha": 2}  # closing is not an opening


@pytest.mark.usefixtures("router_kind")
def test_a_source_whose_record_attempt_raises_does_not_cost_the_request_its_answer_or_error(caplog):
    class Broken(FakeChainClient):
        def record_attempt(self, attempt: object) -> None:
            raise RuntimeError("accounting bug")

        def record_breaker_opened(self, provider: str) -> None:
            raise RuntimeError("accounting bug")

    source = Broken(fake_chain())
    fakes = fakes_for({"alpha": 503}, FakeClock())
    router = make_router(fakes, chain=source, breaker=BreakerSettings(failure_threshold=1))

    assert router.complete("hello").value == "answer from beta"
    fakes.configure({"beta": 422})
    with pytest.raises(RequestRejected):
        router.complete("bad request")  # the request's own error, not the hook's

    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum("record_attempt(" in m and ") raised" in m for m in messages) == 3
    assert "chainclient: record_breaker_opened('alpha') raised" in messages
    assert source.served == {"beta": 1}


def test_record_failure_says_whether_it_opened_the_breaker():
    breaker = CircuitBreaker("alpha", BREAKER)

    assert breaker.record_failure(1000.0) is False
    assert breaker.record_failure(1001.0) is True  # the threshold: closed -> open
    assert breaker.record_failure(1002.0) is False  # already open
    assert breaker.admit(1040.0) is None  # past the cooldown: the probe is admitted
    assert breaker.state == "half_open"
    assert breaker.record_failure(1040.5) is True  # the probe failed: half_open -> open
    assert breaker.state == "open"
    assert breaker.admit(1080.0) is None
    breaker.record_success(1080.5)
    assert breaker.state == "closed"
    assert breaker.record_failure(1081.0) is False  # counting again from zero
