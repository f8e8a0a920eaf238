"""Route one request along the live fallback chain, with the fallback semantics a service
owner can reason about at 02:00: the synchronous ``Router``.

The walk (admission, the budget, what each outcome leads to, the counts) is
``routing.RouterCore._walking``, shared with ``AsyncRouter``; this module only makes the
calls it yields, one attempt at a time, in the caller's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from chainclient.admission import NO_CONTRACT as NO_CONTRACT
from chainclient.admission import Contract
from chainclient.breaker import DEFAULT_BREAKER, BreakerSettings
from chainclient.breaker import BreakerState as BreakerState
from chainclient.breaker import CircuitBreaker as CircuitBreaker
from chainclient.errors import ProviderTimeout
from chainclient.outcomes import CREDENTIAL_STATUSES as CREDENTIAL_STATUSES
from chainclient.outcomes import REJECTING_STATUSES as REJECTING_STATUSES
from chainclient.outcomes import RETRYABLE_STATUSES as RETRYABLE_STATUSES
from chainclient.receipts import DISPATCHED_KNOWN as DISPATCHED_KNOWN
from chainclient.receipts import DISPATCHED_UNKNOWN as DISPATCHED_UNKNOWN
from chainclient.receipts import NOT_DISPATCHED as NOT_DISPATCHED
from chainclient.receipts import Attempt as Attempt
from chainclient.receipts import CredentialAlert, RouteResult
from chainclient.receipts import DispatchState as DispatchState
from chainclient.receipts import Outcome as Outcome
from chainclient.receipts import Receipt as Receipt
from chainclient.routing import REPORT_KEYS as REPORT_KEYS
from chainclient.routing import ChainSource, Clock, RouterCore
from chainclient.streaming import (
    NOT_WAITING,
    WATCHDOG,
    StreamBounds,
    StreamedRoute,
    StreamProgress,
    Watchdog,
    set_by_call,
    stream_bounds,
)
from chainclient.streams import ProviderStream, StreamTransport
from chainclient.types import Step
from chainclient.walk import Pause, Turn, Walk

Transport = Callable[[Step, Any, float], Any]
"""``call(step, request, timeout_s) -> value``; raises the errors in ``chainclient.errors``.

It must give up within ``timeout_s`` (the router cannot interrupt a thread): pass it on as
the vendor client's timeout. It may return ``Answer(value, model_id=...)`` to record the
model identity the provider reported."""


class Router(RouterCore[Transport]):
    """Route requests along a chain with fallback, deadlines, admission and breakers.

    ``source`` is a ChainClient-like object (anything with ``current()``; read once per
    request; its ``record_served(provider)``, ``record_attempt(attempt)`` and
    ``record_breaker_opened(provider)``, if it has them, are told who served each success,
    every attempt and every breaker opening; its ``registry``, if it has one, is used unless
    ``registry=`` is given), a
    fixed ``ChainDocument``, or a list of ``Step`` (marking: not degraded).
    ``transports`` maps provider name to ``call(step, request, timeout_s) -> value``; a
    provider in the registry or the chain without one is warned about at construction and
    its steps are skipped (``report()["skipped_no_transport"]``, ``health()``).
    ``breaker=None`` disables circuit breakers.
    """

    def complete(
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
        """Serve ``request`` from the first step that succeeds; raise a RoutingError if none.

        ``contract``: what the serving step must offer (capabilities, destinations).
        ``side_effects=True``: stop with OutcomeUnknown rather than risk acting twice when
        an attempt's outcome is unknown (a timeout after dispatch, a dropped connection, a
        502 or 504), and with VerificationFailed when an answer fails ``verify``.
        ``allow_fallback=False``: only the chain's head may be tried.
        ``verify(value)``: must return true for a value to count as success; a false result
        or an exception counts as that attempt failing, on any step (it falls through,
        unless the request has side effects).
        ``task_id``: names the request in its receipt (default: a fresh random 32-hex-digit id).

        Raises RequestRejected (400/422, or ContentPolicyRejected), OutcomeUnknown,
        VerificationFailed, NoEligibleRoute (nothing attempted), DeadlineExceeded (the
        budget ran out before a step was started, or cut the last attempt short) or
        AllProvidersFailed.
        """
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
                    _pause(turn.seconds)
                    turn = walking.send(_NOT_CALLED)
                    continue
                try:
                    if turn.drill is None:
                        answer = _call(transports[turn.step.provider], turn.step, request, turn.timeout)
                    else:  # a drilled attempt: no call, only the time a timeout would take
                        answer = _NOT_CALLED
                        _pause(self._drill_pause(turn))
                except BaseException as interruption:
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
    ) -> RouteStream:
        """Stream ``request`` from the first step whose stream reaches its commit point.

        Iterate the returned ``RouteStream`` for the provider's chunks (use it as a context
        manager, or ``close()`` it, if you may stop early). Fallback happens only before the
        commit point: the first chunk with content (``commit_after_chars=1``), or once that
        many characters arrived (they are held back until then). Each attempt's first chunk
        must come within ``first_chunk_s`` and each later one within ``idle_s`` of asking
        for it (both default to the step's timeout), inside the request's budget
        (``deadline_s``, default the router's, starting now).

        Raises, when iteration starts, what ``complete()`` raises when no step reached its
        commit point; after it, ``StreamInterrupted`` (chunks delivered, provider, receipt)
        when the stream breaks, passes a bound or the deadline, or ends without the
        provider's terminal event: never a silent success. ``side_effects=True`` stops at an
        unknown outcome before the commit point, as in ``complete()``. Providers are
        streamed through ``stream_transports`` (an adapter's ``stream`` by default); a step
        without one is skipped.
        """
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
        route = RouteStream()
        route._chunks = self._streaming(walk, request, bounds, route)
        return route

    def _streaming(
        self, walk: Walk, request: Any, bounds: StreamBounds, route: RouteStream
    ) -> Generator[Any, None, None]:
        """The walk for a stream: each admitted step is opened and read to its commit point
        (``_first_to_commit``); the first to reach it is handed over chunk by chunk. Written
        apart from ``_walking`` because the request outlives its last attempt's settling: it
        settles when the stream ends, after the caller has read it. The loop below runs once
        per chunk: it stays in this one frame (a generator delegated to would add a frame's
        resumption to every chunk)."""
        now = self._now
        watchdog = WATCHDOG if self._real_clock else None
        turn, progress, ended = self._first_to_commit(walk, request, bounds, watchdog)
        self._committed(turn)
        route._commit(turn.step, walk.document, progress)
        try:
            for chunk in progress.release():
                progress.chunks += 1
                yield chunk
            if not ended:
                pull = progress.pull
                for_each = progress.arm
                while True:
                    for_each(now())
                    try:
                        chunk = pull()
                    except StopIteration:
                        break
                    arrived = now()
                    if arrived > progress.due or progress.expired:
                        raise ProviderTimeout(True, progress.why_late or progress.late(arrived))
                    progress.due = NOT_WAITING
                    progress.chunks += 1
                    yield chunk
        except GeneratorExit:  # the caller stopped reading: its choice, not a failure
            _close(progress, watchdog)
            route.result = self._settle(walk, turn, None, None, progress)
            raise
        except Exception as broke:
            _close(progress, watchdog)
            raise self._broken(walk, turn, progress, broke) from None
        except BaseException as interruption:
            self._interrupted(turn, interruption)
            _close(progress, watchdog)
            raise
        _close(progress, watchdog)
        route.result = self._settle(walk, turn, None, None, progress)

    def _first_to_commit(
        self, walk: Walk, request: Any, bounds: StreamBounds, watchdog: Watchdog | None
    ) -> tuple[Turn, StreamProgress, bool]:
        """Open each admitted step's stream in turn and read it to its commit point: the first
        attempt to reach it (its turn, its stream, and whether the stream already ended);
        an attempt that fails before it is settled, and the next step tried. Raises the
        request's error when no step reaches it."""
        for index, step in self._steps(walk):
            if walk.pause_s:  # before a same-step retry
                _pause(walk.pause_s)
                walk.pause_s = 0.0
            turn = self._turn(walk, index, step, streaming=True, first_chunk_s=bounds.first_chunk_s)
            if turn is None:
                continue
            if turn.drill is not None:  # a drilled attempt never opens a stream
                try:
                    _pause(self._drill_pause(turn))
                except BaseException as interruption:
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
            ended = False
            try:
                raised, opened = _open(self._stream_transports[step.provider], step, request, turn.timeout)
                if raised is None:
                    progress.attach(opened, iter(opened).__next__)
                    if watchdog is not None:
                        watchdog.watch(progress)
                    raised, ended = _until_commit(progress, self._now, bounds.commit_after_chars)
            except BaseException as interruption:  # Ctrl-C while waiting
                self._interrupted(turn, interruption)
                _close(progress, watchdog)
                raise
            if raised is not None:
                _close(progress, watchdog)
                self._settle(walk, turn, raised, None, progress)
                continue
            return turn, progress, ended
        raise self._exhausted(walk)


class RouteStream(StreamedRoute):
    """What ``Router.stream`` returns: iterate it for the chunks; ``provider``, ``model``,
    ``chunks``, and once it completed ``result`` and ``receipt`` (see ``StreamedRoute``)."""

    _chunks: Generator[Any, None, None]

    def __iter__(self) -> Iterator[Any]:
        return self._chunks

    def __next__(self) -> Any:
        return next(self._chunks)

    def close(self) -> None:
        """Stop reading: the provider's stream is closed (the attempt counts as served)."""
        self._chunks.close()

    def __enter__(self) -> RouteStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _open(transport: StreamTransport, step: Step, request: Any, timeout: float) -> tuple[Exception | None, Any]:
    """The provider stream the transport opened, or the exception it raised (as ``_call``)."""
    try:
        return None, transport(step, request, timeout)
    except Exception as exc:
        return exc, None


def _until_commit(
    progress: StreamProgress, now: Callable[[], float], commit_after_chars: int
) -> tuple[Exception | None, bool]:
    """Read and hold chunks until the commit point: (what went wrong, whether the stream
    ended). A failure here is an attempt that failed: the caller saw nothing of it."""
    pull = progress.pull
    while True:
        try:
            chunk = pull()
        except StopIteration:
            return None, True
        except Exception as exc:
            if progress.expired:
                return ProviderTimeout(True, progress.why_late), False
            return exc, False
        arrived = now()
        if arrived > progress.due or progress.expired:
            return ProviderTimeout(True, progress.why_late or progress.late(arrived)), False
        if progress.hold(chunk, arrived, commit_after_chars):
            return None, False


def _close(progress: StreamProgress, watchdog: Watchdog | None) -> None:
    """Close the attempt's provider stream (whatever happened) and stop watching it."""
    progress.due = NOT_WAITING
    stream: ProviderStream | None = progress.stream
    if stream is None:
        return
    if watchdog is not None:
        watchdog.unwatch(progress)
    try:
        stream.close()
    except Exception:  # a stream that fails to close must not change the request's outcome
        pass


_NOT_CALLED: tuple[Exception | None, Any] = (None, None)


def _pause(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _call(transport: Transport, step: Step, request: Any, timeout: float) -> tuple[Exception | None, Any]:
    """What the transport returned, or the exception it raised (classified by the router:
    a transport's error never escapes as-is). A function of its own, so the exception's
    traceback does not hold the request's frame alive."""
    try:
        return None, transport(step, request, timeout)
    except Exception as exc:
        return exc, None


__all__ = [
    "DEFAULT_BREAKER",
    "DISPATCHED_KNOWN",
    "DISPATCHED_UNKNOWN",
    "NOT_DISPATCHED",
    "NO_CONTRACT",
    "Attempt",
    "BreakerSettings",
    "ChainSource",
    "CircuitBreaker",
    "Clock",
    "Contract",
    "CredentialAlert",
    "Receipt",
    "RouteResult",
    "RouteStream",
    "Router",
    "Transport",
]
