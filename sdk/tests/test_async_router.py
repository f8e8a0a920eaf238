"""What only the asyncio router does: it enforces each attempt's timeout itself, it is
cancelled with its caller's task, and many requests share one event loop without threads.
Everything else it shares with ``Router`` and is tested by the router tables (which run
against both)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from router_fixtures import run_async

from chainclient import AsyncRouter, BreakerSettings, DeadlineExceeded, ProviderError, RouteResult, Step
from chainclient.testing import FakeChainClient, FakeClock, FakeProviders, fake_chain, fake_registry


async def slow(step: Step, request: Any, timeout_s: float) -> str:
    await asyncio.sleep(60)  # a vendor that never answers in time
    return "too late"


async def quick(step: Step, request: Any, timeout_s: float) -> str:
    await asyncio.sleep(0)
    return f"{step.provider} answered {request}"


def test_an_attempt_past_its_timeout_is_cancelled_and_the_next_step_serves() -> None:
    chain = [Step("alpha", "chat", 50), Step("beta", "chat", 10_000)]  # alpha allows 50 ms
    router = AsyncRouter(chain, transports={"alpha": slow, "beta": quick}, registry=fake_registry(), breaker=None)

    result = run_async(asyncio.wait_for(router.complete("hi"), timeout=30))

    assert result.provider == "beta"
    first = result.attempts[0]
    assert (first.outcome, first.dispatch) == ("timeout", "dispatched_unknown")
    assert "the router cancelled the call" in first.error


def test_the_request_budget_cancels_the_last_attempt_and_is_a_deadline() -> None:
    router = AsyncRouter(fake_chain(["alpha"]), transports={"alpha": slow}, deadline_s=0.05, breaker=None)

    with pytest.raises(DeadlineExceeded) as caught:
        run_async(asyncio.wait_for(router.complete("hi"), timeout=30))

    assert caught.value.attempts[0].outcome == "timeout"


def test_cancelling_the_caller_cancels_the_attempt_and_gives_back_the_probe_slot() -> None:
    clock = FakeClock()
    fakes = FakeProviders(clock).configure({"alpha": 503})
    router = AsyncRouter(
        fake_chain(["alpha", "beta"]),
        transports=fakes.async_transports,
        clock=clock,
        breaker=BreakerSettings(failure_threshold=1, cooldown_s=30),
    )
    cancelled: list[str] = []

    async def scenario() -> None:
        entered = asyncio.Event()

        async def hanging(step: Step, request: Any, timeout_s: float) -> str:
            entered.set()
            try:
                return await slow(step, request, timeout_s)
            except asyncio.CancelledError:
                cancelled.append(step.provider)
                raise

        await router.complete("trip")  # alpha fails: its breaker opens, beta serves
        assert router.breaker_state("alpha") == "open"
        clock.advance(31)  # past the cooldown: the next request is alpha's probe
        fakes.configure({"alpha": hanging})
        request = asyncio.create_task(router.complete("probe"))
        await entered.wait()
        assert router.breaker_state("alpha") == "half_open"

        request.cancel()

        with pytest.raises(asyncio.CancelledError):
            await request

    run_async(asyncio.wait_for(scenario(), timeout=30))

    assert cancelled == ["alpha"]
    assert fakes.attempts == ["alpha", "beta", "alpha"]  # beta was not tried for the cancelled one
    fakes.configure({"alpha": "ok"})
    # The probe slot went back: the next request may probe alpha, and its success closes it.
    assert run_async(router.complete("again")).provider == "alpha"
    assert router.breaker_state("alpha") == "closed"


def test_blocking_transports_are_refused_with_their_names() -> None:
    def blocking(step: Step, request: Any, timeout_s: float) -> str:
        return "sync"

    with pytest.raises(TypeError, match="not async: alpha, gamma. Use Router"):
        AsyncRouter(fake_chain(), transports={"alpha": blocking, "beta": quick, "gamma": blocking})


def test_a_thousand_concurrent_requests_share_one_loop_no_thread_and_keep_their_snapshot() -> None:
    client = FakeChainClient(fake_chain(["alpha", "beta"]), registry=fake_registry())
    threads: set[str] = set()
    thread_counts: set[int] = set()

    async def alpha(step: Step, request: int, timeout_s: float) -> str:
        threads.add(threading.current_thread().name)
        thread_counts.add(threading.active_count())
        await asyncio.sleep(0)  # every request is in flight at once
        client.set(fake_chain(["gamma"]))  # an on-call change mid-flight moves no request
        raise ProviderError(503, True, "overloaded")

    router = AsyncRouter(client, transports={"alpha": alpha, "beta": quick, "gamma": quick}, breaker=None)

    async def fleet() -> tuple[int, list[RouteResult]]:
        threads_before = threading.active_count()
        requests = [router.complete(n) for n in range(1000)]
        return threads_before, await asyncio.gather(*requests)

    threads_before, results = run_async(fleet())

    assert len(threads) == 1  # the event loop's own
    assert thread_counts == {threads_before}  # no thread was started for any request
    assert all(result.provider == "beta" for result in results)
    assert [r.value for r in results[:2]] == ["beta answered 0", "beta answered 1"]
    assert router.report()["recovered_success"] == 1000
    assert run_async(router.complete("after")).provider == "gamma"
