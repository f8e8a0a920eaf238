"""``chainclient.testing.run_drill``: a failover drill run in CI against a service's own
Router and its fakes, judged as the control plane judges one on live traffic."""

from __future__ import annotations

import io
from typing import Any

import pytest
import router_fixtures
from router_fixtures import fakes_for, make_router

from chainclient import BreakerSettings
from chainclient.drills import DrillCounts, verdict
from chainclient.testing import FakeClock, fake_document, run_drill
from chainclient.wire import latency_percentile as percentile

pytestmark = pytest.mark.usefixtures("router_kind")


def the_router(router: Any) -> Any:
    """The Router itself (an AsyncRouter is wrapped by the tables' ``Blocking``)."""
    return router.router if isinstance(router, router_fixtures.Blocking) else router


def test_a_chain_whose_fallback_serves_passes_and_the_report_says_why() -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    router = the_router(make_router(fakes))
    out = io.StringIO()

    report = run_drill(router, {"hop": 1, "fault": "server_error", "share": 10}, out=out)

    assert report == {
        "hop": 1,
        "fault": "server_error",
        "share": 10,
        "requests": 200,
        "drilled": 20,
        "ended_on": {"2": 20},
        "failed": 0,
        "deadline": 0,
        "refusals": 0,
        "fallback_attempts": 20,
        "fallback_failures": 0,
        "latency_ms": {"drilled": {"p50": 100, "p95": 100}, "other": {"p50": 100, "p95": 100}},
        "verdict": "passed",
        "reasons": ["all 20 drilled request(s) were served by the fallback (20 served, none failed for the caller)"],
    }
    # The drilled hop got no call for a drilled request; the fallback served each for real.
    assert fakes.attempts.count("alpha") == 180
    assert fakes.attempts.count("beta") == 20
    assert out.getvalue().splitlines() == [
        "drill run: hop 1 (alpha/chat) fails with a server error (HTTP 500) for 10 % of requests",
        "verdict: passed",
        "  - all 20 drilled request(s) were served by the fallback (20 served, none failed for the caller)",
        "drilled 20 of 200 requests (10.0 %); ended on: hop 2: 20",
        "failed for the caller: 0 (deadline 0, refused 0)",
        "fallback hop 2: 20 attempts, 0 failed",
        "latency p50/p95 ms: drilled 100/100, not drilled 100/100",
    ]


def test_a_timeout_drill_shows_what_it_costs_the_callers() -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    fakes.ok("alpha", after_s=0.3).ok("beta", after_s=0.2)
    router = the_router(make_router(fakes))

    report = run_drill(router, {"hop": 1, "fault": "timeout", "share": 25}, requests=40, out=None)

    # A drilled request waits alpha's 10 s, then beta answers: the 30 s bucket's bound.
    assert report["latency_ms"] == {"drilled": {"p50": 30000, "p95": 30000}, "other": {"p50": 500, "p95": 500}}
    assert (report["drilled"], report["verdict"]) == (10, "passed")


def test_a_fallback_that_fails_the_drilled_requests_fails_the_drill() -> None:
    fakes = fakes_for({"beta": 503, "gamma": 503})
    router = the_router(make_router(fakes))

    report = run_drill(router, {"hop": 1, "fault": "rate_limited", "share": 5}, requests=100, out=None)

    assert (report["drilled"], report["failed"], report["ended_on"]) == (5, 5, {})
    assert report["verdict"] == "failed"
    assert report["reasons"] == ["5 drilled request(s) failed for the caller"]


def test_a_fallback_failing_more_than_a_tenth_of_twenty_attempts_fails_the_drill() -> None:
    # beta fails one call in four; gamma serves what it does not: callers never see a failure.
    fakes = fakes_for()
    fakes.sequence("beta", [503, "ok", "ok", "ok"] * 10)
    router = the_router(make_router(fakes))

    report = run_drill(router, {"hop": 1, "fault": "server_error", "share": 25}, requests=80, out=None)

    assert (report["failed"], report["fallback_attempts"], report["fallback_failures"]) == (0, 20, 5)
    assert report["ended_on"] == {"2": 15, "3": 5}
    assert report["verdict"] == "failed"
    assert report["reasons"] == [
        "the fallback hop 2 failed 5 of 20 drilled requests' attempts (25.0 %, above the 10 % it allows)"
    ]


def test_a_run_that_drilled_nothing_proved_nothing() -> None:
    router = the_router(make_router(fakes_for()))

    report = run_drill(router, {"hop": 1, "fault": "server_error", "share": 0.1}, requests=100, out=None)

    assert report["drilled"] == 0
    assert report["verdict"] == "failed"
    assert report["reasons"] == ["no request was drilled: nothing was proven"]
    assert report["latency_ms"]["drilled"] == {"p50": None, "p95": None}


def test_the_run_leaves_the_routers_breakers_and_counts_alone() -> None:
    fakes = fakes_for({"beta": 503})
    router = the_router(make_router(fakes, breaker=BreakerSettings(failure_threshold=2)))

    run_drill(router, {"hop": 1, "fault": "server_error", "share": 25, "services": ["ab" * 32]}, out=None)

    assert router.breaker_state("beta") == "closed"
    assert sum(router.report().values()) == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"hop": 3, "fault": "timeout", "share": 10}, "hop must be a step of the chain but its last (1..2"),
        ({"hop": 0, "fault": "timeout", "share": 10}, "hop must be a step of the chain but its last (1..2"),
        ({"hop": True, "fault": "timeout", "share": 10}, "hop must be a step of the chain but its last"),
        ({"hop": 1, "fault": "fire", "share": 10}, "fault 'fire' is not a fault a drill knows: use one of server_err"),
        ({"hop": 1, "fault": "timeout", "share": 26}, "share 26 % is out of range: drill from 0.1 % to 25 %"),
        ({"hop": 1, "fault": "timeout", "share": 0.05}, "share 0.05 % is out of range: drill from 0.1 % to 25 %"),
        ({"hop": 1, "fault": "timeout", "share": "10"}, "share is a percentage of requests, from 0.1 to 25, got '10'"),
        ({"hop": 1, "fault": "timeout"}, "the drill spec lacks 'share'"),
        ({"hop": 1, "fault": "timeout", "share": 10, "minutes": 5}, "unknown drill spec key(s) 'minutes'"),
    ],
    ids=["last-hop", "hop-0", "hop-bool", "fault", "share-high", "share-low", "share-text", "missing", "unknown"],
)
def test_a_spec_the_api_would_refuse_is_refused_with_why(spec: dict[str, Any], message: str) -> None:
    router = the_router(make_router(fakes_for()))

    with pytest.raises(ValueError) as refused:
        run_drill(router, spec, out=None)

    assert str(refused.value).startswith(message)


def test_a_chain_of_one_step_has_nothing_to_drill() -> None:
    router = the_router(make_router(fakes_for(), fake_document().chain[:1]))

    with pytest.raises(ValueError) as refused:
        run_drill(router, {"hop": 1, "fault": "timeout", "share": 10}, out=None)

    assert str(refused.value) == "the router's chain has one step: there is no fallback to drill"


# --- the rule, as the control plane's ----------------------------------------------------------


def test_the_percentile_is_the_bound_of_the_bucket_holding_it() -> None:
    assert percentile([0] * 9, 0.5) is None
    assert percentile([1, 0, 0, 0, 0, 0, 0, 0, 0], 0.95) == 100
    assert percentile([50, 0, 0, 49, 0, 0, 0, 0, 1], 0.5) == 100
    assert percentile([50, 0, 0, 49, 0, 0, 0, 0, 1], 0.95) == 1000
    assert percentile([0, 0, 0, 0, 0, 0, 0, 0, 3], 0.5) == 30000  # the overflow bucket reads as the last bound


def test_nineteen_failed_fallback_attempts_are_no_rate_yet() -> None:
    def judged(attempts: int, failures: int) -> str:
        counts = DrillCounts(
            requests=attempts, drilled=attempts, fallback_attempts=attempts, fallback_failures=failures
        )
        return verdict(counts, hop=1)[0]

    assert judged(19, 19) == "passed"
    assert judged(20, 2) == "passed"  # 10 % is allowed
    assert judged(20, 3) == "failed"
