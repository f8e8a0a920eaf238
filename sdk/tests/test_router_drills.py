"""Failover drills in the routers: a share of the requests reaching the drilled hop get its
fault there, exact to one request, with no call to the transport; the walk falls back for real;
the receipt says so; breakers, health and alerts never hear of it; every other request is
routed as without a drill. Through ``Router`` and ``AsyncRouter``, ``complete()`` and
``stream()``."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
import router_fixtures
import time_machine
from drill_vectors import INJECTED
from router_fixtures import fakes_for, make_router, run_async, tried

from chainclient import AllProvidersFailed, AsyncRouter, BreakerSettings, Router, RoutingError
from chainclient import router as sync_router_module
from chainclient.drills import WAITING_FAULTS, drilled_at
from chainclient.testing import FakeChainClient, FakeClock, FakeStreams, fake_document, fake_registry
from chainclient.types import ChainDocument, Drill
from chainclient.wire import DRILL_FAULTS

pytestmark = pytest.mark.usefixtures("router_kind")

NOW = 1_796_540_700.0  # 2026-12-06T07:05:00Z
WINDOW = ("2026-12-06T07:00:00.000Z", "2026-12-06T07:15:00.000Z")


@pytest.fixture(autouse=True)
def wall_clock() -> Any:
    """The wall clock inside the drills' window (a drill is active on the wall clock)."""
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def with_drill(
    *, hop: int = 1, fault: str = "server_error", share_bp: int = 2500, services: tuple[str, ...] = (), drill_id=7
) -> ChainDocument:
    """The fake chain (alpha, beta, gamma) carrying an active drill."""
    drill = Drill(drill_id, hop, fault, share_bp, services, *WINDOW)
    return dataclasses.replace(fake_document(), drill=drill)


def route(router: Any, count: int) -> list[Any]:
    """``count`` requests' results (or errors), in order."""
    outcomes = []
    for _ in range(count):
        try:
            outcomes.append(router.complete("hi"))
        except RoutingError as error:
            outcomes.append(error)
    return outcomes


def drilled(outcomes: list[Any]) -> list[int]:
    return [i for i, outcome in enumerate(outcomes) if any(a.drill is not None for a in outcome.attempts)]


@pytest.mark.parametrize("share_bp", [10, 333, 1000, 2500], ids=["0.1%", "3.33%", "10%", "25%"])
def test_the_share_is_exact_to_one_request_over_any_window(share_bp: int) -> None:
    fakes = fakes_for()
    router = make_router(fakes, with_drill(share_bp=share_bp))

    outcomes = route(router, 2000)

    marks = drilled(outcomes)
    assert marks == [n for n in range(2000) if drilled_at(n, share_bp)]
    for length in (1, 10, 100, 1000):
        for start in range(0, 2000 - length + 1, 97):
            window = [n for n in marks if start <= n < start + length]
            assert abs(len(window) - length * share_bp / 10000) <= 1, (start, length)


def test_a_drilled_attempt_makes_no_call_and_the_next_step_serves_for_real() -> None:
    fakes = fakes_for()
    router = make_router(fakes, with_drill(share_bp=2500))

    outcomes = route(router, 8)

    assert drilled(outcomes) == [3, 7]
    assert [outcome.provider for outcome in outcomes] == ["alpha"] * 3 + ["beta"] + ["alpha"] * 3 + ["beta"]
    # Six requests called alpha; the two drilled ones called beta only.
    assert fakes.attempts == ["alpha"] * 3 + ["beta"] + ["alpha"] * 3 + ["beta"]
    assert tried(outcomes[3]) == ["alpha", "beta"]
    assert outcomes[3].recovered


@pytest.mark.parametrize("fault", DRILL_FAULTS)
def test_each_fault_is_recorded_as_the_contract_says(fault: str) -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    router = make_router(fakes, with_drill(fault=fault, share_bp=2500))

    outcome = route(router, 4)[3]

    first = outcome.attempts[0]
    expected = INJECTED[fault]
    assert (first.outcome, first.status) == expected
    assert first.dispatch == "not_dispatched"
    assert first.drill == 7
    assert first.reason == f"drill 7: {fault} injected (no call was made)"
    assert " drill=7 -> drill 7:" in str(first)
    assert first.elapsed_s == (10.0 if fault in WAITING_FAULTS else 0.0)
    assert outcome.provider == "beta"
    assert outcome.attempts[1].drill is None
    assert "drill=" not in str(outcome.attempts[1])


def test_a_drilled_request_with_side_effects_still_falls_back() -> None:
    fakes = fakes_for()
    router = make_router(fakes, with_drill(fault="invalid_answer", share_bp=2500))

    outcomes = [router.complete("hi", side_effects=True) for _ in range(4)]

    assert outcomes[3].provider == "beta"


def test_the_fallback_is_real_when_it_fails_the_drilled_request_fails() -> None:
    fakes = fakes_for({"beta": 503, "gamma": 503})
    router = make_router(fakes, with_drill(share_bp=2500))

    outcomes = route(router, 4)

    assert isinstance(outcomes[3], AllProvidersFailed)
    assert tried(outcomes[3]) == ["alpha", "beta", "gamma"]
    assert "alpha/chat (HTTP 500)" in str(outcomes[3])
    assert fakes.attempts == ["alpha", "alpha", "alpha", "beta", "gamma"]


def test_a_drill_on_a_quarter_of_the_requests_never_opens_the_breaker() -> None:
    source = FakeChainClient(with_drill(share_bp=2500), registry=fake_registry())
    fakes = fakes_for()
    router = make_router(fakes, source, breaker=BreakerSettings(failure_threshold=2))

    outcomes = route(router, 100)

    assert len(drilled(outcomes)) == 25
    assert router.breaker_state("alpha") == "closed"
    assert source.breaker_openings == {}
    # Every request not drilled is served by the head, at its first attempt, as without a drill.
    assert all(tried(outcomes[i]) == ["alpha"] for i in range(100) if i not in drilled(outcomes))


def test_a_half_open_breakers_probe_slot_goes_back_when_the_probe_is_drilled() -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    router = make_router(fakes, with_drill(share_bp=2500), breaker=BreakerSettings(failure_threshold=1, cooldown_s=10))
    route(router, 2)  # requests n=0 and n=1 at the hop: served by alpha
    fakes.configure({"alpha": 503})
    route(router, 1)  # n=2: a real failure opens alpha's breaker
    assert router.breaker_state("alpha") == "open"
    clock.advance(10)
    fakes.configure({"alpha": "ok"})
    fakes.clear()

    probe_drilled = route(router, 1)[0]  # n=3: admitted as the half-open probe, and drilled
    after = route(router, 1)[0]  # n=4: the slot is free again; its call is the probe

    assert tried(probe_drilled) == ["alpha", "beta"]
    assert probe_drilled.attempts[0].drill == 7
    assert fakes.attempts == ["beta", "alpha"]
    assert after.provider == "alpha"
    assert router.breaker_state("alpha") == "closed"


def test_drilled_attempts_are_not_provider_health_and_each_request_is_told() -> None:
    source = FakeChainClient(with_drill(share_bp=2500), registry=fake_registry())
    fakes = fakes_for()
    router = make_router(fakes, source)

    route(router, 8)

    assert [a.provider for a in source.attempts] == ["alpha"] * 3 + ["beta"] + ["alpha"] * 3 + ["beta"]
    assert all(a.drill is None for a in source.attempts)
    assert source.served == {"alpha": 6, "beta": 2}
    requests = [request for _, request in source.drill_requests]
    assert [request.drilled for request in requests] == [False, False, False, True] * 2
    assert requests[3].ended_on == 2
    assert (requests[3].fallback_attempts, requests[3].fallback_failures, requests[3].error) == (1, 0, None)
    assert {drill.id for drill, _ in source.drill_requests} == {7}


def test_a_drill_for_other_services_is_not_this_routers() -> None:
    source = FakeChainClient(with_drill(share_bp=2500, services=("0" * 64,)), registry=fake_registry())
    fakes = fakes_for()
    router = make_router(fakes, source)

    outcomes = route(router, 8)

    assert drilled(outcomes) == []
    assert source.drill_requests == []


def test_the_source_is_asked_once_per_document_whether_it_takes_part() -> None:
    asked: list[int] = []

    class Source(FakeChainClient):
        def takes_part(self, drill: Drill) -> bool:
            asked.append(drill.id)
            return True

    source = Source(with_drill(share_bp=2500, services=("0" * 64,)), registry=fake_registry())
    router = make_router(fakes_for(), source)

    outcomes = route(router, 8)
    source.set(with_drill(share_bp=2500, drill_id=8))
    route(router, 2)

    assert drilled(outcomes) == [3, 7]
    assert asked == [7, 8]


@pytest.mark.parametrize(
    "now", [NOW - 301, NOW + 600, NOW + 10**6], ids=["before-the-window", "at-ends-at", "long-after"]
)
def test_outside_its_window_a_drill_is_no_drill(wall_clock: Any, now: float) -> None:
    source = FakeChainClient(with_drill(share_bp=2500), registry=fake_registry())
    fakes = fakes_for()
    router = make_router(fakes, source)
    wall_clock.move_to(now)

    outcomes = route(router, 8)

    assert drilled(outcomes) == []
    assert fakes.attempts == ["alpha"] * 8
    assert source.drill_requests == []


def test_a_timeout_fault_advances_a_test_clock_by_the_attempts_timeout() -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    router = make_router(fakes, with_drill(fault="timeout", share_bp=2500), deadline_s=15)
    route(router, 3)
    before = clock.now()

    outcome = route(router, 1)[0]

    # min(step timeout 10 s, budget 15 s) waited; beta then has the 5 s left.
    assert clock.now() - before == 10
    assert [(a.outcome, a.timeout_s, a.elapsed_s) for a in outcome.attempts] == [("timeout", 10, 10), ("ok", 5, 0)]


def test_a_timeout_fault_cut_by_the_budget_ends_the_request_as_a_deadline() -> None:
    clock = FakeClock()
    router = make_router(fakes_for(clock=clock), with_drill(fault="timeout", share_bp=2500), deadline_s=4)

    outcome = route(router, 4)[3]

    assert type(outcome).__name__ == "DeadlineExceeded"
    assert [(a.outcome, a.elapsed_s) for a in outcome.attempts] == [("timeout", 4)]


def test_without_a_test_clock_a_timeout_fault_waits_the_attempts_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[float] = []
    fakes = fakes_for()
    document = with_drill(fault="first_chunk_late", share_bp=2500)
    if router_fixtures.kind == "sync":
        monkeypatch.setattr(sync_router_module.time, "sleep", waited.append)
        router: Any = Router(document, transports=fakes.transports, registry=fake_registry())
    else:

        async def asleep(seconds: float) -> None:
            waited.append(seconds)

        monkeypatch.setattr(asyncio, "sleep", asleep)
        router = router_fixtures.Blocking(
            AsyncRouter(document, transports=fakes.async_transports, registry=fake_registry())
        )

    outcome = route(router, 4)[3]

    assert waited == [10.0]
    assert outcome.provider == "beta"


def test_without_a_drill_a_router_reads_time_only_on_its_own_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wall clock is read only for a document that carries a drill.
    calls: list[float] = []
    real = time.time
    monkeypatch.setattr(time, "time", lambda: calls.append(1) or real())
    router = make_router(fakes_for(), fake_document())

    route(router, 5)

    assert calls == []


# --- streams ---------------------------------------------------------------------------------


def stream_router(streams: FakeStreams, document: ChainDocument, **options: Any) -> Any:
    registry = fake_registry()
    if router_fixtures.kind == "sync":
        return Router(document, transports={}, stream_transports=streams.transports, registry=registry, **options)
    return AsyncRouter(
        document, transports={}, stream_transports=streams.async_transports, registry=registry, **options
    )


def read(router: Any, **options: Any) -> tuple[list[Any], Any]:
    if isinstance(router, Router):
        with router.stream("hi", **options) as stream:
            chunks = list(stream)
        return chunks, stream.result

    async def go() -> tuple[list[Any], Any]:
        async with router.stream("hi", **options) as stream:
            chunks = [chunk async for chunk in stream]
        return chunks, stream.result

    return run_async(go())


@pytest.mark.parametrize("fault", ["stream_cut_before_first_chunk", "first_chunk_late", "server_error"])
def test_a_drilled_stream_attempt_never_opens_a_stream(fault: str) -> None:
    clock = FakeClock()
    streams = FakeStreams(clock)
    router = stream_router(streams, with_drill(fault=fault, share_bp=2500), clock=clock)

    results = [read(router, first_chunk_s=2) for _ in range(4)]

    assert streams.attempts == ["alpha"] * 3 + ["beta"]
    chunks, result = results[3]
    assert chunks == ["beta ", "answers"]
    first = result.attempts[0]
    assert (first.drill, first.dispatch, first.chunks) == (7, "not_dispatched", 0)
    assert first.elapsed_s == (2 if fault == "first_chunk_late" else 0)
    assert result.attempts[1].provider == "beta"


def test_a_drilled_stream_whose_fallback_fails_raises_before_any_chunk() -> None:
    streams = FakeStreams().script("beta", fails_with=503).script("gamma", fails_with=503)
    router = stream_router(streams, with_drill(share_bp=2500))
    for _ in range(3):
        read(router)

    with pytest.raises(AllProvidersFailed) as failed:
        read(router)

    assert [a.provider for a in failed.value.attempts] == ["alpha", "beta", "gamma"]
    assert failed.value.attempts[0].drill == 7
