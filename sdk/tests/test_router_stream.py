"""Router.stream and AsyncRouter.stream: fallback only before the commit point, never a
silent success after it, bounds inside one deadline, and receipts that say what reached
the caller. Each test runs for both routers; the fakes spend time on a FakeClock (the
real-time bounds are proven against real sockets in test_conformance.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from chainclient import (
    AllProvidersFailed,
    AsyncRouter,
    BreakerSettings,
    ContentPolicyRefusal,
    ContentPolicyRejected,
    ContextLengthExceeded,
    DeadlineExceeded,
    OutcomeUnknown,
    ProviderError,
    Router,
    Step,
    StreamInterrupted,
)
from chainclient.testing import FakeChainClient, FakeClock, FakeStreams, fake_chain, fake_registry

KINDS = ("sync", "async")
CUT = ProviderError(None, True, "connection broke mid-stream")


def make(kind: str, streams: FakeStreams, **options: Any) -> Any:
    options.setdefault("registry", fake_registry())
    options.setdefault("breaker", None)
    options.setdefault("clock", streams.clock)
    source = options.pop("source", fake_chain(timeout_ms=10_000))
    transports = options.pop("transports", {})
    if kind == "async":
        return AsyncRouter(source, transports=transports, stream_transports=streams.async_transports, **options)
    return Router(source, transports=transports, stream_transports=streams.transports, **options)


def drain(router: Any, **options: Any) -> tuple[list[Any], Any, BaseException | None]:
    """Read a whole stream: (chunks the caller got, the route, the error raised if any)."""
    got: list[Any] = []
    route = router.stream("hello", **options)
    if isinstance(router, AsyncRouter):

        async def read() -> None:
            async for chunk in route:
                got.append(chunk)

        try:
            asyncio.run(read())
        except Exception as error:
            return got, route, error
        return got, route, None
    try:
        for chunk in route:
            got.append(chunk)
    except Exception as error:
        return got, route, error
    return got, route, None


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def streams() -> FakeStreams:
    return FakeStreams(FakeClock())


def test_a_stream_serves_the_heads_chunks_with_a_receipt(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["", "Hel", "lo"], first_after_s=0.4, model_id="alpha-chat-2026", tokens=(7, 2))
    got, route, error = drain(make(kind, streams))
    assert error is None
    assert got == ["", "Hel", "lo"]
    assert (route.provider, route.model, route.chunks) == ("alpha", "chat", 3)
    (attempt,) = route.receipt.attempts
    assert (attempt.outcome, attempt.chunks, attempt.model_id) == ("ok", 3, "alpha-chat-2026")
    assert attempt.first_chunk_s == pytest.approx(0.4)
    assert (attempt.input_tokens, attempt.output_tokens) == (7, 2)
    assert streams.opened[0][1].closed


def test_it_falls_back_when_the_head_fails_before_its_first_chunk(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", fails_with=503)
    got, route, error = drain(make(kind, streams))
    assert error is None and route.provider == "beta"
    assert got == ["beta ", "answers"]
    assert [(a.provider, a.outcome, a.chunks) for a in route.receipt.attempts] == [
        ("alpha", "failed", 0),
        ("beta", "ok", 2),
    ]


def test_chunks_without_content_are_held_and_a_break_before_content_falls_back(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["", ""], end=CUT)
    got, route, error = drain(make(kind, streams))
    assert error is None
    assert got == ["beta ", "answers"], "alpha's empty chunks never reached the caller"
    assert route.receipt.attempts[0].outcome == "failed"


def test_a_break_after_the_first_chunk_is_stream_interrupted_never_a_fallback(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["Hel", "lo"], end=CUT)
    got, _, error = drain(make(kind, streams))
    assert got == ["Hel", "lo"]
    assert isinstance(error, StreamInterrupted)
    assert (error.chunks, error.provider, error.model) == (2, "alpha", "chat")
    assert streams.attempts == ["alpha"], "nothing else was tried: it would show a second answer"
    assert [(a.outcome, a.chunks) for a in error.attempts] == [("interrupted", 2)]
    assert "connection broke mid-stream" in str(error)


def test_a_stream_without_its_terminal_event_is_never_a_success(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["partial answer"], end=ProviderError(None, True, "ended without its terminal event"))
    router = make(kind, streams)
    _, route, error = drain(router)
    assert isinstance(error, StreamInterrupted) and route.result is None
    assert router.report()["interrupted"] == 1
    assert router.report()["first_attempt_success"] == 0


def test_a_late_first_chunk_falls_back(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["late"], first_after_s=5)
    got, route, error = drain(make(kind, streams), first_chunk_s=1)
    assert error is None and got == ["beta ", "answers"]
    first = route.receipt.attempts[0]
    assert (first.outcome, first.dispatch) == ("timeout", "dispatched_unknown")
    assert "first-chunk bound" in first.error


def test_chunks_without_content_do_not_start_the_idle_bound(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["", "", "late content"], gap_s=1.5)
    got, route, error = drain(make(kind, streams), first_chunk_s=4, idle_s=1)
    assert error is None and route.provider == "alpha", "the content came 3 s in, within the 4 s first-chunk bound"
    assert got == ["", "", "late content"]
    assert route.receipt.attempts[0].first_chunk_s == pytest.approx(3.0), "the first chunk is the first with content"


def test_an_idle_gap_after_the_commit_point_interrupts_the_stream(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["a", "b", "c"], gap_s=3)
    got, _, error = drain(make(kind, streams), idle_s=2)
    assert got == ["a"], "the late chunk is not delivered"
    assert isinstance(error, StreamInterrupted)
    assert "idle bound (2s)" in error.attempt.error


def test_the_deadline_holds_across_a_stream(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", [f"c{i}" for i in range(10)], gap_s=1)
    got, _, error = drain(make(kind, streams), deadline_s=3.5, idle_s=5)
    assert got == ["c0", "c1", "c2", "c3"]
    assert isinstance(error, StreamInterrupted)
    assert "deadline" in error.attempt.error


def test_a_deadline_spent_before_any_commit_is_deadline_exceeded(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["late"], first_after_s=10)
    _, _, error = drain(make(kind, streams), deadline_s=2)
    assert isinstance(error, DeadlineExceeded)
    assert [a.provider for a in error.attempts] == ["alpha"]


def test_side_effects_stop_at_an_unknown_outcome_before_the_commit_point(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", [""], end=CUT)
    _, _, error = drain(make(kind, streams), side_effects=True)
    assert isinstance(error, OutcomeUnknown)
    assert streams.attempts == ["alpha"]


def test_commit_after_chars_holds_chunks_back_and_still_falls_back(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", ["abc", "def"], end=CUT)
    got, route, error = drain(make(kind, streams), commit_after_chars=10)
    assert error is None and route.provider == "beta"
    assert got == ["beta ", "answers"], "alpha's six characters were held back, then dropped"


def test_a_content_policy_refusal_before_the_commit_point_stops(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", [""], end=ContentPolicyRefusal("finish_reason content_filter"))
    _, _, error = drain(make(kind, streams))
    assert isinstance(error, ContentPolicyRejected)


def test_a_stream_over_a_steps_context_window_opens_on_the_next_larger_step(kind: str, streams: FakeStreams) -> None:
    streams.script("alpha", fails_with=ContextLengthExceeded(True, "prompt is too long"))
    streams.script("beta", ["from beta"])
    streams.script("gamma", ["from gamma"])
    registry = fake_registry(context_windows={"alpha": 8192, "beta": 4096, "gamma": 200_000})
    got, route, error = drain(make(kind, streams, registry=registry))
    assert (error, got) == (None, ["from gamma"])
    assert [attempt.provider for attempt in route.receipt.attempts] == ["alpha", "gamma"]
    assert dict(route.receipt.refused)[Step("beta", "chat", 10_000)].startswith("context window of 4096 tokens")


def test_every_step_failing_before_its_commit_point_is_all_providers_failed(kind: str, streams: FakeStreams) -> None:
    for name in ("alpha", "beta", "gamma"):
        streams.script(name, fails_with=500)
    _, _, error = drain(make(kind, streams))
    assert isinstance(error, AllProvidersFailed)
    assert error.providers == ("alpha", "beta", "gamma")


def test_a_provider_without_a_stream_transport_is_skipped_with_a_reason(kind: str, streams: FakeStreams) -> None:
    del streams._scripts["alpha"]

    def complete_only(*_: Any) -> str:
        return "alpha answers complete() only"

    async def acomplete_only(*_: Any) -> str:
        return complete_only()

    got, route, error = drain(
        make(kind, streams, transports={"alpha": acomplete_only if kind == "async" else complete_only})
    )
    assert error is None and route.provider == "beta"
    assert "no stream transport" in dict((s.provider, why) for s, why in route.receipt.refused)["alpha"]


def test_a_retry_after_keeps_the_provider_out_until_it_passes(kind: str, streams: FakeStreams) -> None:
    clock = streams.clock
    assert clock is not None
    streams.script("alpha", fails_with=ProviderError(429, True, "slow down", retry_after_s=20))
    router = make(kind, streams, breaker=BreakerSettings())
    drain(router)
    streams.script("alpha", ["alpha is back"])
    clock.advance(10)
    _, route, _ = drain(router)
    assert route.provider == "beta"
    assert "circuit breaker open" in dict((s.provider, why) for s, why in route.receipt.refused)["alpha"]
    clock.advance(11)
    _, route, _ = drain(router)
    assert route.provider == "alpha"


def test_the_source_hears_of_every_streamed_attempt_with_its_first_chunk_time(kind: str, streams: FakeStreams) -> None:
    source = FakeChainClient(fake_chain(), registry=fake_registry())
    streams.script("alpha", fails_with=503)
    streams.script("beta", ["b"], first_after_s=0.25)
    drain(make(kind, streams, source=source))
    assert [(a.provider, a.outcome, a.first_chunk_s) for a in source.attempts] == [
        ("alpha", "failed", None),
        ("beta", "ok", pytest.approx(0.25)),
    ]
    assert source.served == {"beta": 1}


def test_chunks_held_to_the_commit_point_count_only_as_the_caller_takes_them(streams: FakeStreams) -> None:
    streams.script("alpha", ["", "", "Hel", "lo"])
    router = make("sync", streams)
    with router.stream("hello") as route:
        assert next(iter(route)) == ""
    assert route.receipt.attempts[0].chunks == 1, "three were held at the commit point; one was taken"


def test_a_caller_that_stops_early_closes_the_providers_stream(streams: FakeStreams) -> None:
    streams.script("alpha", ["a", "b", "c"])
    router = make("sync", streams)
    with router.stream("hello") as route:
        assert next(iter(route)) == "a"
    assert streams.opened[0][1].closed
    assert route.receipt.attempts[0].chunks == 1
    assert router.report()["first_attempt_success"] == 1


class BlockingStream:
    """A provider stream whose second read blocks until ``abort()`` (as a socket read does
    until it is shut down)."""

    def __init__(self) -> None:
        self.unblocked = threading.Event()
        self.sent = 0

    def __iter__(self) -> BlockingStream:
        return self

    def __next__(self) -> str:
        self.sent += 1
        if self.sent == 1:
            return "first"
        self.unblocked.wait(30)
        raise ProviderError(None, True, "connection shut down")

    def abort(self) -> None:
        self.unblocked.set()

    def close(self) -> None:
        self.unblocked.set()


def test_the_watchdog_breaks_a_blocked_read_at_the_idle_bound_in_real_time() -> None:
    router = Router(fake_chain(["alpha"]), transports={}, stream_transports={"alpha": lambda *_: BlockingStream()})
    started = time.monotonic()
    got, _, error = drain(router, idle_s=0.3)
    elapsed = time.monotonic() - started
    assert got == ["first"] and isinstance(error, StreamInterrupted)
    assert "idle bound (0.3s)" in error.attempt.error
    assert 0.3 <= elapsed < 0.3 + 0.1


def test_the_async_alarm_cancels_only_the_wait_and_the_task_goes_on() -> None:
    class Silent:
        def __aiter__(self) -> Silent:
            return self

        async def __anext__(self) -> str:
            await asyncio.sleep(30)
            return "never"

        async def aclose(self) -> None:
            pass

    async def open_silent(*_: Any) -> Silent:
        return Silent()

    async def scenario() -> tuple[float, BaseException | None, bool]:
        router = AsyncRouter(fake_chain(["alpha", "beta"]), transports={}, stream_transports={"alpha": open_silent})
        started = time.monotonic()
        error: BaseException | None = None
        try:
            async for _ in router.stream("hello", first_chunk_s=0.2):
                pass
        except Exception as raised:
            error = raised
        elapsed = time.monotonic() - started
        await asyncio.sleep(0)  # a cancellation left pending would be delivered here
        task = asyncio.current_task()
        return elapsed, error, task is not None and task.cancelling() == 0

    elapsed, error, clean = asyncio.run(scenario())
    assert isinstance(error, AllProvidersFailed), "beta has no stream transport: alpha was the only try"
    assert 0.2 <= elapsed < 0.2 + 0.1
    assert clean, "the alarm's cancellation was taken back"


def test_the_async_idle_bound_holds_when_it_is_shorter_than_the_first_chunk_bound() -> None:
    class OneThenSilence:
        sent = 0

        def __aiter__(self) -> OneThenSilence:
            return self

        async def __anext__(self) -> str:
            self.sent += 1
            if self.sent > 1:
                await asyncio.sleep(30)
            return "first"

        async def aclose(self) -> None:
            pass

    async def open_stream(*_: Any) -> OneThenSilence:
        return OneThenSilence()

    async def scenario() -> tuple[float, list[str], BaseException | None]:
        router = AsyncRouter(fake_chain(["alpha"]), transports={}, stream_transports={"alpha": open_stream})
        got: list[str] = []
        started = time.monotonic()
        try:
            async for chunk in router.stream("hello", first_chunk_s=5, idle_s=0.2):
                got.append(chunk)
        except Exception as raised:
            return time.monotonic() - started, got, raised
        return time.monotonic() - started, got, None

    elapsed, got, error = asyncio.run(scenario())
    assert got == ["first"] and isinstance(error, StreamInterrupted)
    assert 0.2 <= elapsed < 0.2 + 0.1, "the idle bound, not the first chunk's 5 s"
