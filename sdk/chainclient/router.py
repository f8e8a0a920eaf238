"""Route one request along the live fallback chain, with the fallback semantics a service
owner can reason about at 02:00.

Per request the router takes one snapshot of the chain (``current()`` is read once), then
walks it in order. Before every attempt it runs admission (the contract, from
``admission``; ``allow_fallback``; the provider's circuit breaker, from ``breaker``), gives
the attempt ``min(step timeout, time left in the request's budget)``, classifies how the
call went (``outcomes.classify``: the status table lives there), and either returns, moves
on to the next step, or stops. Every attempt is recorded in the request's receipt
(``receipts``), which results and errors carry.

This module owns the policy of the walk: admission, the budget, one attempt at a time, and
what follows (the counts in ``report()``, credential alerts, usage accounting). The walk's
record and the error each ending raises are ``walk``'s.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from chainclient.admission import NO_CONTRACT, Contract, ContractCheck
from chainclient.breaker import DEFAULT_BREAKER, BreakerSettings, CircuitBreaker
from chainclient.breaker import BreakerState as BreakerState
from chainclient.errors import (
    AllProvidersFailed,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    RequestRejected,
    RoutingError,
)
from chainclient.outcomes import CREDENTIAL_STATUSES as CREDENTIAL_STATUSES
from chainclient.outcomes import REJECTING_STATUSES as REJECTING_STATUSES
from chainclient.outcomes import RETRYABLE_STATUSES as RETRYABLE_STATUSES
from chainclient.outcomes import Action, classify
from chainclient.receipts import (
    DISPATCHED_KNOWN,
    DISPATCHED_UNKNOWN,
    NOT_DISPATCHED,
    Attempt,
    CredentialAlert,
    Receipt,
    RouteResult,
)
from chainclient.receipts import DispatchState as DispatchState
from chainclient.receipts import Outcome as Outcome
from chainclient.types import ChainDocument, Registry, Step
from chainclient.walk import Walk

logger = logging.getLogger("chainclient.router")

Transport = Callable[[Step, Any, float], Any]
"""``call(step, request, timeout_s) -> value``; raises the errors in ``chainclient.errors``."""

REPORT_KEYS = (
    "first_attempt_success",
    "recovered_success",
    "refusals",
    "rejections",
    "all_failed",
    "deadline",
    "unresolved",
    "credential_alerts",
)
# How each ending is counted in ``report()``; the first matching type wins.
_ENDINGS: tuple[tuple[type[RoutingError], str], ...] = (
    (OutcomeUnknown, "unresolved"),
    (RequestRejected, "rejections"),  # ContentPolicyRejected included
    (NoEligibleRoute, "refusals"),
    (DeadlineExceeded, "deadline"),
    (AllProvidersFailed, "all_failed"),
)


class Clock(Protocol):
    """A monotonic clock in seconds; ``chainclient.testing.FakeClock`` is one."""

    def now(self) -> float: ...


class ChainSource(Protocol):
    """Anything with a non-blocking ``current()`` returning the live chain (a ChainClient).

    If it also has ``record_served(provider)`` (a ChainClient does), the router calls it
    on every successful result, for the client's usage reports.
    """

    def current(self) -> ChainDocument: ...


class Router:
    """Route requests along a chain with fallback, deadlines, admission and breakers.

    ``source`` is a ChainClient-like object (anything with ``current()``; read once per
    request; its ``record_served(provider)``, if it has one, is told who served each
    success), a fixed ``ChainDocument``, or a list of ``Step`` (marking: not degraded).
    ``transports`` maps provider name to ``call(step, request, timeout_s) -> value``.
    ``breaker=None`` disables circuit breakers.
    """

    def __init__(
        self,
        source: ChainSource | ChainDocument | Sequence[Step],
        *,
        transports: Mapping[str, Transport],
        registry: Registry | None = None,
        deadline_s: float = 30.0,
        fall_through_on_content_policy: bool = False,
        on_alert: Callable[[CredentialAlert], None] | None = None,
        clock: Clock | None = None,
        breaker: BreakerSettings | None = DEFAULT_BREAKER,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        self._snapshot = _snapshot_reader(source)
        record_served = getattr(source, "record_served", None)
        self._record_served: Callable[[str], object] | None = record_served if callable(record_served) else None
        self._transports: dict[str, Transport] = dict(transports)
        self._deadline_s = float(deadline_s)
        self._fall_through_on_content_policy = fall_through_on_content_policy
        self._on_alert = on_alert
        self._now: Callable[[], float] = clock.now if clock is not None else time.monotonic
        self._breakers: dict[str, CircuitBreaker] = (
            {name: CircuitBreaker(name, breaker) for name in self._transports} if breaker is not None else {}
        )
        self._contracts = ContractCheck(transports=self._transports, registry=registry)
        self._counts_lock = threading.Lock()
        self._counts = dict.fromkeys(REPORT_KEYS, 0)

    # --- public ------------------------------------------------------------------------

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
        ``side_effects=True``: stop with OutcomeUnknown rather than risk acting twice.
        ``allow_fallback=False``: only the chain's head may be tried.
        ``verify(value)``: must return true for a value to count as success; a false result
        or an exception counts as that attempt failing, on any step. The outcome is known
        (the provider answered), so it falls through even with ``side_effects=True``; pass
        ``allow_fallback=False`` if a rejected answer must not be redone elsewhere.
        ``task_id``: names the request in its receipt (default: a fresh uuid4 hex).

        Raises RequestRejected (400/422, or ContentPolicyRejected), OutcomeUnknown,
        NoEligibleRoute (nothing attempted), DeadlineExceeded (the budget ran out before a
        step was started, or cut the last attempt short) or AllProvidersFailed.
        """
        document = self._snapshot()
        deadline = self._now() + self._deadline_s
        walk = Walk(task_id or uuid.uuid4().hex, document)
        if contract is None:
            contract = NO_CONTRACT
        cut_by_deadline = False

        for index, step in enumerate(document.chain):
            breaker = self._breakers.get(step.provider)
            why = self._refusal(step, contract, breaker, fallback_barred=bool(index) and not allow_fallback)
            if why is not None:
                walk.refused.append((step, why))
                continue
            timeout = self._timeout(walk, index, deadline, breaker)
            attempt, action, value = self._attempt(
                step,
                request,
                timeout=timeout,
                task_id=walk.task_id,
                number=len(walk.attempts) + 1,
                side_effects=side_effects,
                verify=verify,
                breaker=breaker,
            )
            walk.attempts.append(attempt)
            if action is Action.SERVED:
                self._count("recovered_success" if len(walk.attempts) > 1 else "first_attempt_success")
                if self._record_served is not None:
                    self._served(step.provider)
                return walk.served(step, value)
            if action is not Action.NEXT:
                raise self._ended(walk.stopped(action))
            # A timeout shortened by the budget failed because the budget ran out.
            cut_by_deadline = attempt.outcome == "timeout" and timeout < step.timeout_s

        raise self._ended(walk.exhausted(cut_by_deadline=cut_by_deadline, deadline_s=self._deadline_s))

    def report(self) -> dict[str, int]:
        """Counts since start (or the last ``reset_report()``) by how requests ended."""
        with self._counts_lock:
            return dict(self._counts)

    def reset_report(self) -> None:
        with self._counts_lock:
            self._counts = dict.fromkeys(REPORT_KEYS, 0)

    def breaker_state(self, provider: str) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (``closed`` if breakers are disabled)."""
        breaker = self._breakers.get(provider)
        return breaker.state if breaker is not None else "closed"

    def reset_breakers(self) -> None:
        """Close every breaker and forget counted failures (for tests)."""
        for breaker in self._breakers.values():
            breaker.reset()

    # --- one step ------------------------------------------------------------------------

    def _refusal(
        self, step: Step, contract: Contract, breaker: CircuitBreaker | None, *, fallback_barred: bool
    ) -> str | None:
        """Why this request may not try ``step`` now, or None. The breaker is asked last:
        admitting a half-open breaker's probe takes its one slot."""
        why = self._contracts.refusal(step, contract)
        if why is None and fallback_barred:
            why = "fallback not permitted (allow_fallback=False)"
        if why is None and breaker is not None:
            why = breaker.admit(self._now())
        return why

    def _timeout(self, walk: Walk, index: int, deadline: float, breaker: CircuitBreaker | None) -> float:
        """The step's timeout, cut to what is left of the budget; DeadlineExceeded if none is."""
        left = deadline - self._now()
        if left <= 0:
            if breaker is not None:
                breaker.release()
            raise self._ended(walk.out_of_time(deadline_s=self._deadline_s, not_started=walk.document.chain[index:]))
        step_timeout = walk.document.chain[index].timeout_s
        return step_timeout if step_timeout <= left else left

    def _attempt(
        self,
        step: Step,
        request: Any,
        *,
        timeout: float,
        task_id: str,
        number: int,
        side_effects: bool,
        verify: Callable[[Any], bool] | None,
        breaker: CircuitBreaker | None,
    ) -> tuple[Attempt, Action, Any]:
        """Call the step's transport once, classify how it went, and tell the breaker."""
        now = self._now
        transport = self._transports[step.provider]
        raised: Exception | None = None
        value: Any = None
        started = now()
        try:
            value = transport(step, request, timeout)
        except Exception as exc:  # classified below: a transport's error never escapes as-is
            raised = exc
        except BaseException:
            if breaker is not None:
                breaker.release()  # interrupted: the probe slot goes back unused
            raise
        verdict = classify(
            raised,
            value=value,
            verify=verify,
            timeout_s=timeout,
            side_effects=side_effects,
            fall_through_on_content_policy=self._fall_through_on_content_policy,
        )
        del raised  # it would keep this frame alive through its traceback
        elapsed = now() - started
        if breaker is not None:
            if verdict.counts_as_failure:
                breaker.record_failure(now())
            else:
                breaker.record_success(now())
        attempt = Attempt(
            task_id=task_id,
            attempt_id=f"{task_id}-{number}",
            provider=step.provider,
            model=step.model,
            dispatch=verdict.dispatch,
            outcome=verdict.outcome,
            status=verdict.status,
            elapsed_s=elapsed,
            timeout_s=timeout,
            reason=verdict.reason,
            error=verdict.error,
        )
        if verdict.credential_alert:
            self._credential_alert(attempt)
        return attempt, verdict.action, value if verdict.action is Action.SERVED else None

    # --- endings -------------------------------------------------------------------------

    def _ended(self, error: RoutingError) -> RoutingError:
        """Count how the request ended, in ``report()``, and return its error to raise."""
        for kind, key in _ENDINGS:
            if isinstance(error, kind):
                self._count(key)
                break
        return error

    def _credential_alert(self, attempt: Attempt) -> None:
        self._count("credential_alerts")
        logger.error(
            "chainclient: %s rejected our credentials (HTTP %s) on attempt %s; check this provider's API key",
            attempt.provider,
            attempt.status,
            attempt.attempt_id,
        )
        if self._on_alert is None:
            return
        alert = CredentialAlert(
            provider=attempt.provider,
            model=attempt.model,
            status=attempt.status or 0,
            task_id=attempt.task_id,
            attempt_id=attempt.attempt_id,
            message=attempt.error,
        )
        try:
            self._on_alert(alert)
        except Exception:
            # An alert hook that breaks must not break the request it is reporting on.
            logger.exception("chainclient: on_alert hook raised")

    def _count(self, key: str) -> None:
        with self._counts_lock:
            self._counts[key] += 1

    def _served(self, provider: str) -> None:
        assert self._record_served is not None
        try:
            self._record_served(provider)
        except Exception:
            # Usage accounting must never cost a request its answer.
            logger.exception("chainclient: record_served(%r) raised", provider)


def _snapshot_reader(
    source: ChainSource | ChainDocument | Sequence[Step],
) -> Callable[[], ChainDocument]:
    if isinstance(source, ChainDocument):
        return lambda: source
    if isinstance(source, (list, tuple)):
        steps = tuple(source)
        if not steps or not all(isinstance(step, Step) for step in steps):
            raise TypeError("a chain given as a list must be a non-empty list of Step")
        document = ChainDocument.compiled_default("router", steps)
        return lambda: document
    current = getattr(source, "current", None)
    if not callable(current):
        raise TypeError(
            "Router needs a ChainClient (anything with current()), a ChainDocument or a "
            f"list of Step, got {type(source).__name__}"
        )
    reader: Callable[[], ChainDocument] = current
    return reader


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
