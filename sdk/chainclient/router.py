"""Route one request along the live fallback chain, with the fallback semantics a service
owner can reason about at 02:00: the synchronous ``Router``.

The walk (admission, the budget, what each outcome leads to, the counts) is
``routing.RouterCore._walking``, shared with ``AsyncRouter``; this module only makes the
calls it yields, one attempt at a time, in the caller's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chainclient.admission import NO_CONTRACT as NO_CONTRACT
from chainclient.admission import Contract
from chainclient.breaker import DEFAULT_BREAKER, BreakerSettings
from chainclient.breaker import BreakerState as BreakerState
from chainclient.breaker import CircuitBreaker as CircuitBreaker
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
from chainclient.types import Step

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
        )
        transports = self._transports
        walking = self._walking(walk)
        try:
            turn = next(walking)
            while True:
                try:
                    answer = _call(transports[turn.step.provider], turn.step, request, turn.timeout)
                except BaseException as interruption:
                    self._interrupted(turn, interruption)
                    raise
                turn = walking.send(answer)
        except StopIteration as done:  # the walk ended with a result
            return done.value  # type: ignore[no-any-return]


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
    "Router",
    "Transport",
]
