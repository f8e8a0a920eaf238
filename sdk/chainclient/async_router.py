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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from chainclient.admission import Contract
from chainclient.errors import ProviderTimeout
from chainclient.receipts import RouteResult
from chainclient.routing import RouterCore
from chainclient.types import Step

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
    ) -> RouteResult:
        """As ``Router.complete``, awaiting each attempt; ``verify`` stays a plain function."""
        walk = self._begin(
            task_id=task_id,
            contract=contract,
            side_effects=side_effects,
            allow_fallback=allow_fallback,
            verify=verify,
        )
        transports = self._transports
        walking = self._walking(walk)
        try:
            turn = next(walking)
            while True:
                try:
                    answer = await _call(transports[turn.step.provider], turn.step, request, turn.timeout)
                except BaseException as interruption:  # the task was cancelled (or interrupted)
                    self._interrupted(turn, interruption)
                    raise
                turn = walking.send(answer)
        except StopIteration as done:  # the walk ended with a result
            return done.value  # type: ignore[no-any-return]


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


__all__ = ["AsyncRouter", "AsyncTransport"]
