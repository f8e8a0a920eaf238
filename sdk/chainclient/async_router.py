"""``AsyncRouter``: the same walk along the chain for asyncio services (FastAPI, aiohttp).

The walk is ``routing.RouterCore._walking``, exactly as for ``Router``: same admission,
budget, classification, receipts, breakers, counts and errors. What differs is the call: each
transport is a coroutine function, awaited in the caller's task (no thread per request),
and the router enforces the attempt's timeout itself with asyncio: an attempt still running
at ``min(step timeout, time left)`` is cancelled and recorded as a timeout after dispatch
(``dispatched_unknown``: the request was sent, the provider may have acted).

Cancelling the request's task cancels the attempt in flight and propagates; nothing else
is tried, and a half-open breaker's probe slot is given back.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from chainclient.admission import Contract
from chainclient.errors import ProviderTimeout, RoutingError
from chainclient.receipts import RouteResult
from chainclient.routing import RouterCore
from chainclient.streaming import NOT_WAITING, StreamBounds, StreamedRoute, StreamProgress, set_by_call, stream_bounds
from chainclient.streams import AsyncStreamTransport
from chainclient.types import Step
from chainclient.walk import Pause, Turn, Walk

AsyncTransport = Callable[[Step, Any, float], Awaitable[Any]]
"""``async def call(step, request, timeout_s) -> value``; raises the errors in
``chainclient.errors``, or returns ``Answer(value, model_id=...)``."""


class AsyncRouter(RouterCore[AsyncTransport]):
    """``Router`` for asyncio: ``await router.complete(request, ...)``.

    Takes the same arguments as ``Router``; ``transports`` maps provider name to an async
    ``call(step, request, timeout_s)``. One router serves one event loop or many (its
    breakers and counts are thread-safe).
    """

    def _check_transports(self, transports: Mapping[str, AsyncTransport]) -> None:
        blocking = sorted(name for name, call in transports.items() if not _is_async(call))
        if blocking:
            raise TypeError(
                f"AsyncRouter needs async transports (async def call(step, request, timeout_s)); "
                f"not async: {', '.join(blocking)}. Use Router for blocking transports."
            )

    async def complete(
        self,
        request: Any,
        *,
        contract: Contract | None = None,
        side_effects: bool = False,
        allow_fallback: bool = True,
        verify: Callable[[Any], bool] | None = None,
        task_id: str | None = None,
        retry_same_step: bool | None = None,
    ) -> RouteResult:
        """As ``Router.complete``, awaiting each attempt; ``verify`` stays a plain function."""
        walk = self._begin(
            task_id=task_id,
            contract=contract,
            side_effects=side_effects,
            allow_fallback=allow_fallback,
            verify=verify,
            retry_same_step=retry_same_step,
            policy_set=("retry_same_step",) if retry_same_step is not None else (),
        )
        transports = self._transports
        walking = self._walking(walk)
        try:
            turn = next(walking)
            while True:
                if isinstance(turn, Pause):  # before a same-step retry
                    await _pause(turn.seconds)
                    turn = walking.send(_NOT_CALLED)
                    continue
                try:
                    if turn.drill is None:
                        answer = await _call(transports[turn.step.provider], turn.step, request, turn.timeout)
                    else:  # a drilled attempt: no call, only the time a timeout would take
                        answer = _NOT_CALLED
                        await _pause(self._drill_pause(turn))
                except BaseException as interruption:  # the task was cancelled (or interrupted)
                    self._interrupted(turn, interruption)
                    raise
                turn = walking.send(answer)
        except StopIteration as done:  # the walk ended with a result
            return done.value  # type: ignore[no-any-return]

    def stream(
        self,
        request: Any,
        *,
        contract: Contract | None = None,
        side_effects: bool = False,
        allow_fallback: bool = True,
        task_id: str | None = None,
        commit_after_chars: int | None = None,
        first_chunk_s: float | None = None,
        idle_s: float | None = None,
        deadline_s: float | None = None,
        retry_same_step: bool | None = None,
    ) -> AsyncRouteStream:
        """As ``Router.stream``: ``async for chunk in router.stream(request)``; use
        ``async with`` (or ``await stream.aclose()``) if you may stop early. A bound that
        passes cancels the wait for the chunk (a timer on the event loop, not a thread)."""
        walk = self._begin(
            task_id=task_id,
            contract=contract,
            side_effects=side_effects,
            allow_fallback=allow_fallback,
            verify=None,
            deadline_s=deadline_s,
            retry_same_step=retry_same_step,
            policy_set=set_by_call(commit_after_chars, first_chunk_s, idle_s, retry_same_step),
        )
        bounds = stream_bounds(walk.document.failure_policy, commit_after_chars, first_chunk_s, idle_s)
        route = AsyncRouteStream()
        route._chunks = self._streaming(walk, request, bounds, route)
        return route

    async def _streaming(
        self, walk: Walk, request: Any, bounds: StreamBounds, route: AsyncRouteStream
    ) -> AsyncGenerator[Any, None]:
        """``Router._streaming``, awaiting the provider; see there."""
        now = self._now
        turn, progress, alarm, ended = await self._first_to_commit(walk, request, bounds)
        self._committed(turn)
        route._commit(turn.step, walk.document, progress)
        try:
            for chunk in progress.release():
                progress.chunks += 1
                yield chunk
            if not ended:
                pull = progress.pull
                for_each = progress.arm
                ring_by_due = alarm.set
                while True:
                    for_each(now())
                    ring_by_due()
                    try:
                        chunk = await pull()
                    except StopAsyncIteration:
                        break
                    except asyncio.CancelledError:
                        if not progress.expired:
                            raise
                        raise _late(progress, alarm, now()) from None
                    arrived = now()
                    if arrived > progress.due or progress.expired:
                        raise _late(progress, alarm, arrived)
                    progress.due = NOT_WAITING
                    progress.chunks += 1
                    yield chunk
        except GeneratorExit:  # the caller stopped reading: its choice, not a failure
            await _close(progress, alarm)
            route.result = self._settle(walk, turn, None, None, progress)
            raise
        except Exception as broke:
            raise await self._broke(walk, turn, progress, alarm, broke) from None
        except BaseException as interruption:
            self._interrupted(turn, interruption)
            await _close(progress, alarm)
            raise
        await _close(progress, alarm)
        route.result = self._settle(walk, turn, None, None, progress)

    async def _first_to_commit(
        self, walk: Walk, request: Any, bounds: StreamBounds
    ) -> tuple[Turn, StreamProgress, _Alarm, bool]:
        """``Router._first_to_commit``, awaiting the provider; also the attempt's alarm."""
        for index, step in self._steps(walk):
            if walk.pause_s:  # before a same-step retry
                await _pause(walk.pause_s)
                walk.pause_s = 0.0
            turn = self._turn(walk, index, step, streaming=True, first_chunk_s=bounds.first_chunk_s)
            if turn is None:
                continue
            if turn.drill is not None:  # a drilled attempt never opens a stream
                try:
                    await _pause(self._drill_pause(turn))
                except BaseException as interruption:  # the task was cancelled
                    self._interrupted(turn, interruption)
                    raise
                self._injected(walk, turn, streaming=True)
                continue
            progress = StreamProgress(
                started=turn.started,
                first_due=turn.started + turn.timeout,
                idle_s=bounds.idle_s or step.timeout_s,
                deadline=walk.deadline,
            )
            alarm: _Alarm = _NO_ALARM
            ended = False
            try:
                raised, opened = await _open(self._stream_transports[step.provider], step, request, turn.timeout)
                if raised is None:
                    progress.attach(opened, aiter(opened).__anext__)
                    alarm = _LoopAlarm(progress, self._now) if self._real_clock else _NO_ALARM
                    raised, ended = await _until_commit(progress, alarm, self._now, bounds.commit_after_chars)
            except BaseException as interruption:  # the task was cancelled
                self._interrupted(turn, interruption)
                await _close(progress, alarm)
                raise
            if raised is not None:
                await _close(progress, alarm)
                self._settle(walk, turn, raised, None, progress)
                continue
            return turn, progress, alarm, ended
        raise self._exhausted(walk)

    async def _broke(
        self, walk: Walk, turn: Turn, progress: StreamProgress, alarm: _Alarm, broke: Exception
    ) -> RoutingError:
        """The error for a stream that broke after its commit point (``Router._broken``),
        once it is closed; a bound that passed takes back its alarm's cancellation (it
        became this timeout)."""
        if progress.expired:
            alarm.uncancel()
        await _close(progress, alarm)
        return self._broken(walk, turn, progress, broke)


class AsyncRouteStream(StreamedRoute):
    """What ``AsyncRouter.stream`` returns: ``async for`` it for the chunks; ``provider``,
    ``model``, ``chunks``, and once it completed ``result`` and ``receipt``."""

    _chunks: AsyncGenerator[Any, None]

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        """Stop reading: the provider's stream is closed (the attempt counts as served)."""
        await self._chunks.aclose()

    async def __aenter__(self) -> AsyncRouteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Alarm(Protocol):
    """What bounds an attempt's waits for a chunk: ``set()`` before each wait,
    ``uncancel()`` once its ringing became a timeout, ``stop()`` when the stream is closed."""

    def set(self) -> None: ...

    def uncancel(self) -> None: ...

    def stop(self) -> None: ...


class _NoAlarm:
    """The alarm of an attempt under a test's clock: it never rings (a late chunk is only
    refused when it comes), so waiting for a chunk asks nothing of the event loop."""

    __slots__ = ()

    def set(self) -> None:
        pass

    def uncancel(self) -> None:
        pass

    def stop(self) -> None:
        pass


_NO_ALARM = _NoAlarm()


class _LoopAlarm:
    """Cancels the task waiting for a chunk once its ``due`` passes: one timer handle on the
    event loop, re-armed only when it fires early (a chunk moved ``due`` on), so waiting
    for a chunk costs a store, not a timer."""

    __slots__ = ("at", "handle", "loop", "now", "progress", "task")

    def __init__(self, progress: StreamProgress, now: Callable[[], float]) -> None:
        self.progress = progress
        self.now = now
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.handle: asyncio.TimerHandle | None = None
        self.at = NOT_WAITING
        """When the timer rings, on the router's clock."""

    def set(self) -> None:
        """About to wait: make sure a timer rings by ``due`` (a timer set for later, such
        as the first-chunk bound's when the idle bound is shorter, is moved earlier)."""
        due = self.progress.due
        if self.at > due:
            if self.handle is not None:
                self.handle.cancel()
            self._ring_at(due, self.now())

    def _ring_at(self, due: float, now: float) -> None:
        self.at = due
        self.handle = self.loop.call_later(max(0.0, due - now), self._ring)

    def _ring(self) -> None:
        self.handle, self.at = None, NOT_WAITING
        progress = self.progress
        due = progress.due
        if due == NOT_WAITING or progress.expired:
            return
        now = self.now()
        if now < due:
            self._ring_at(due, now)
            return
        progress.expired = True
        progress.why_late = progress.late(now)
        if self.task is not None:
            self.task.cancel()

    def uncancel(self) -> None:
        """Take back the cancellation this alarm asked for (it became a timeout)."""
        task = self.task
        if task is not None and sys.version_info >= (3, 11) and task.cancelling():
            task.uncancel()

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle, self.at = None, NOT_WAITING


def _late(progress: StreamProgress, alarm: _Alarm, now: float) -> ProviderTimeout:
    """The timeout for a chunk that did not come in time (the alarm's cancellation taken back)."""
    if progress.expired:
        alarm.uncancel()
    return ProviderTimeout(True, progress.why_late or progress.late(now))


async def _open(
    transport: AsyncStreamTransport, step: Step, request: Any, timeout: float
) -> tuple[Exception | None, Any]:
    """The provider stream the transport opened within ``timeout``, or the exception it
    raised (as ``_call``)."""
    try:
        return None, await _within(transport(step, request, timeout), timeout)
    except _TIMEOUTS:
        return ProviderTimeout(True, f"no stream within {timeout:g}s; the router cancelled the call"), None
    except Exception as exc:
        return exc, None


async def _until_commit(
    progress: StreamProgress, alarm: _Alarm, now: Callable[[], float], commit_after_chars: int
) -> tuple[Exception | None, bool]:
    """Read and hold chunks until the commit point (as the synchronous one)."""
    pull = progress.pull
    ring_by_due = alarm.set
    while True:
        ring_by_due()
        try:
            chunk = await pull()
        except StopAsyncIteration:
            return None, True
        except asyncio.CancelledError:
            if not progress.expired:
                raise
            return _late(progress, alarm, now()), False
        except Exception as exc:
            if progress.expired:
                return _late(progress, alarm, now()), False
            return exc, False
        arrived = now()
        if arrived > progress.due or progress.expired:
            return _late(progress, alarm, arrived), False
        if progress.hold(chunk, arrived, commit_after_chars):
            return None, False


async def _close(progress: StreamProgress, alarm: _Alarm) -> None:
    """Close the attempt's provider stream (whatever happened) and stop its alarm."""
    progress.due = NOT_WAITING
    alarm.stop()
    stream = progress.stream
    if stream is None:
        return
    try:
        await stream.aclose()
    except Exception:  # a stream that fails to close must not change the request's outcome
        pass


_NOT_CALLED: tuple[Exception | None, Any] = (None, None)


async def _pause(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


async def _call(transport: AsyncTransport, step: Step, request: Any, timeout: float) -> tuple[Exception | None, Any]:
    """What the transport returned within ``timeout``, or the exception it raised; an
    attempt still running at ``timeout`` is cancelled and becomes a ProviderTimeout."""
    try:
        return None, await _within(transport(step, request, timeout), timeout)
    except _TIMEOUTS:
        return ProviderTimeout(True, f"no answer within {timeout:g}s; the router cancelled the call"), None
    except Exception as exc:
        return exc, None


if sys.version_info >= (3, 11):
    _TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError,)

    async def _within(call: Awaitable[Any], timeout: float) -> Any:
        async with asyncio.timeout(timeout):
            return await call

else:  # pragma: no cover - Python 3.10: asyncio.TimeoutError is not yet the builtin one
    _TIMEOUTS = (TimeoutError, asyncio.TimeoutError)

    async def _within(call: Awaitable[Any], timeout: float) -> Any:
        return await asyncio.wait_for(call, timeout)


def _is_async(call: object) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (partials included)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)


__all__ = ["AsyncRouteStream", "AsyncRouter", "AsyncTransport"]
