"""What a router holds from its construction on, what it reports, and whom it tells.

``RouterState`` is built once from a router's options: its transports, the snapshot
reader and the source's hooks (``sources``), the circuit breakers, the contract check, the
destinations and context windows the registry gives, the counts, and the drills
(``drill_injection``). It reports the counts (``report()``), which providers it cannot
call and the breakers (``health()``); it records each attempt settled in the request's
receipt and tells the breaker, the span, the source's health tally and the credential
alerts (``_record``); and it counts each ending (``_ended``). The walk that uses all this
is ``routing.RouterCore``, a ``RouterState``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from chainclient.admission import ContractCheck
from chainclient.breaker import DEFAULT_BREAKER, BreakerSettings, BreakerState, CircuitBreaker
from chainclient.drill_injection import DrillInjection
from chainclient.errors import (
    AllProvidersFailed,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    RequestRejected,
    RoutingError,
    StreamInterrupted,
    VerificationFailed,
)
from chainclient.outcomes import Verdict
from chainclient.receipts import Attempt, CredentialAlert, token_count
from chainclient.sources import ChainSource, Clock, hook, registry_of, snapshot_reader
from chainclient.streaming import StreamProgress
from chainclient.tracing import attempt_ended
from chainclient.types import ChainDocument, Registry, Step
from chainclient.walk import Turn, Walk

logger = logging.getLogger("chainclient.router")

REPORT_KEYS = (
    "first_attempt_success",
    "recovered_success",
    "refusals",
    "rejections",
    "all_failed",
    "deadline",
    "unresolved",
    "verify_failed",
    "credential_alerts",
    "skipped_no_transport",
    "interrupted",
)
# How each ending is counted in ``report()``; the first matching type wins.
_ENDINGS: tuple[tuple[type[RoutingError], str], ...] = (
    (StreamInterrupted, "interrupted"),
    (OutcomeUnknown, "unresolved"),
    (VerificationFailed, "verify_failed"),
    (RequestRejected, "rejections"),  # ContentPolicyRejected included
    (NoEligibleRoute, "refusals"),
    (DeadlineExceeded, "deadline"),
    (AllProvidersFailed, "all_failed"),
)


TransportT = TypeVar("TransportT")
RouterT = TypeVar("RouterT", bound="RouterState[Any]")


class RouterState(Generic[TransportT]):
    """A router's state and accounts, with its options (see ``Router``); ``TransportT`` is
    the kind of transport the router calls."""

    def __init__(
        self,
        source: ChainSource | ChainDocument | Sequence[Step],
        *,
        transports: Mapping[str, TransportT],
        registry: Registry | None = None,
        deadline_s: float = 30.0,
        fall_through_on_content_policy: bool = False,
        on_alert: Callable[[CredentialAlert], None] | None = None,
        clock: Clock | None = None,
        breaker: BreakerSettings | None = DEFAULT_BREAKER,
        stream_transports: Mapping[str, Any] | None = None,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if stream_transports is None:
            # An adapter (chainclient.integrations) is both: called for complete(), its
            # ``stream`` for stream().
            adapters: Mapping[str, Any] = transports
            stream_transports = {
                name: call.stream for name, call in adapters.items() if callable(getattr(call, "stream", None))
            }
        self._check_transports(transports)
        self._check_transports(stream_transports)
        self._transports: dict[str, TransportT] = dict(transports)
        self._stream_transports: dict[str, Any] = dict(stream_transports)
        self._snapshot = snapshot_reader(source)
        self._record_served: Callable[[str], object] | None = hook(source, "record_served")
        self._record_attempt: Callable[[Attempt], object] | None = hook(source, "record_attempt")
        self._record_breaker_opened: Callable[[str], object] | None = hook(source, "record_breaker_opened")
        if registry is None:
            registry = registry_of(source)
        self._deadline_s = float(deadline_s)
        self._fall_through_on_content_policy = fall_through_on_content_policy
        self._on_alert = on_alert
        self._now: Callable[[], float] = clock.now if clock is not None else time.monotonic
        self._real_clock = clock is None
        """Whether bounds may be enforced in real time (a watchdog, a timer); with a test's
        clock a late chunk is only refused when it comes."""
        advance = getattr(clock, "advance", None)
        self._advance: Callable[[float], object] | None = advance if callable(advance) else None
        self._drilling = DrillInjection(source, self._now)
        self._breakers: dict[str, CircuitBreaker] = (
            {name: CircuitBreaker(name, breaker) for name in self._transports.keys() | self._stream_transports.keys()}
            if breaker is not None
            else {}
        )
        self._contracts = ContractCheck(
            transports=self._transports.keys() | self._stream_transports.keys(), registry=registry
        )
        self._destinations = {name: registry[name].destination for name in registry} if registry is not None else {}
        self._windows: dict[tuple[str, str], int] = (
            {(name, model): tokens for name in registry for model, tokens in registry[name].context_windows.items()}
            if registry is not None
            else {}
        )
        self._counts_lock = threading.Lock()
        self._counts = dict.fromkeys(REPORT_KEYS, 0)
        self._transported = frozenset(self._transports) | frozenset(self._stream_transports)
        self._untransported: set[str] = set()
        self._warn_untransported(registry, self._snapshot())

    # --- public ------------------------------------------------------------------------

    def report(self) -> dict[str, int]:
        """Counts since start (or the last ``reset_report()``) by how requests ended, plus
        ``credential_alerts`` and ``skipped_no_transport`` (steps skipped for want of a
        transport)."""
        with self._counts_lock:
            return dict(self._counts)

    def reset_report(self) -> None:
        with self._counts_lock:
            self._counts = dict.fromkeys(REPORT_KEYS, 0)

    def health(self) -> dict[str, Any]:
        """For health endpoints: providers the service cannot call (no transport), and the
        state of each provider's circuit breaker."""
        return {
            "providers_without_transport": sorted(self._untransported),
            "breakers": {name: breaker.state for name, breaker in sorted(self._breakers.items())},
        }

    def breaker_state(self, provider: str) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (``closed`` if breakers are disabled)."""
        breaker = self._breakers.get(provider)
        return breaker.state if breaker is not None else "closed"

    def reset_breakers(self) -> None:
        """Close every breaker and forget counted failures (for tests)."""
        for breaker in self._breakers.values():
            breaker.reset()

    def _check_transports(self, transports: Mapping[str, TransportT]) -> None:
        """Raise TypeError for transports this router cannot call (none, by default)."""

    def _for_drill_run(self: RouterT, source: Any) -> RouterT:
        """A copy of this router over ``source`` (``testing.run_drill``): the same transports,
        registry, clock and options, with breakers, counts and drill counters of its own, and
        ``source``'s hooks only."""
        run = copy.copy(self)
        run._snapshot = snapshot_reader(source)
        run._record_served = hook(source, "record_served")
        run._record_attempt = hook(source, "record_attempt")
        run._record_breaker_opened = hook(source, "record_breaker_opened")
        run._drilling = DrillInjection(source, run._now)
        run._breakers = {name: CircuitBreaker(name, breaker.settings) for name, breaker in self._breakers.items()}
        run._counts_lock = threading.Lock()
        run._counts = dict.fromkeys(REPORT_KEYS, 0)
        run._untransported = set(self._untransported)
        return run

    # --- transports ----------------------------------------------------------------------

    def _warn_untransported(self, registry: Registry | None, document: ChainDocument) -> None:
        """One warning at construction naming the providers this router cannot call."""
        known = set(registry) if registry is not None else set()
        missing = sorted((known | {step.provider for step in document.chain}) - self._transported)
        if missing:
            self._untransported.update(missing)
            logger.warning(
                "chainclient: no transport for provider(s) %s: a chain step on them is skipped (transports given: %s)",
                ", ".join(missing),
                ", ".join(sorted(self._transported)) or "none",
            )

    def _no_transport(self, step: Step, document: ChainDocument) -> None:
        """Count a step skipped for want of a transport; warn the first time per provider."""
        self._count("skipped_no_transport")
        if step.provider in self._untransported:
            return
        with self._counts_lock:
            if step.provider in self._untransported:
                return
            self._untransported.add(step.provider)
        logger.warning(
            "chainclient: chain %s v%s routes to %s but this router has no transport for %r: skipped",
            document.name,
            document.version,
            step,
            step.provider,
        )

    # --- attempts ------------------------------------------------------------------------

    def _record(
        self,
        walk: Walk,
        turn: Turn,
        verdict: Verdict,
        raised: Exception | None,
        model_id: str,
        tokens: tuple[int | None, int | None],
        progress: StreamProgress | None,
        *,
        streamed: bool = False,
    ) -> Attempt:
        """Add the attempt to the walk's receipt and tell everyone who counts it: the breaker,
        the span, the source's health tally, the credential alert; a drilled attempt (whose
        turn has no breaker) only the span: it is no evidence about the provider. ``streamed``:
        an attempt of a streamed request that opened no stream."""
        step, breaker = turn.step, turn.breaker
        now = self._now()
        if breaker is not None:
            if verdict.counts_as_failure:
                if breaker.record_failure(now, verdict.retry_after_s) and self._record_breaker_opened is not None:
                    self._breaker_opened(step.provider)
            else:
                breaker.record_success(now)
        chunks = 0 if streamed else None
        first_chunk_s = None
        if progress is not None:
            chunks, first_chunk_s = progress.chunks, progress.first_chunk_s
            reported = progress.reported("model_id")
            model_id = reported if isinstance(reported, str) else model_id
            tokens = (progress.reported("input_tokens"), progress.reported("output_tokens"))
        document = walk.document
        attempt = Attempt(
            task_id=walk.task_id,
            attempt_id=f"{walk.task_id}-{len(walk.attempts) + 1}",
            provider=step.provider,
            model=step.model,
            dispatch=verdict.dispatch,
            outcome=verdict.outcome,
            status=verdict.status,
            elapsed_s=now - turn.started,
            timeout_s=turn.timeout,
            reason=verdict.reason,
            error=verdict.error,
            destination=self._destinations.get(step.provider, "unknown"),
            model_id=model_id or f"{step.provider}/{step.model}",
            contract=walk.contract.identity,
            epoch=document.epoch,
            version=document.version,
            chunks=chunks,
            first_chunk_s=first_chunk_s,
            input_tokens=token_count(tokens[0]),
            output_tokens=token_count(tokens[1]),
            drill=turn.drill.id if turn.drill is not None else None,
        )
        walk.attempts.append(attempt)
        if turn.span is not None:
            attempt_ended(turn.span, attempt, raised, model_reported=bool(model_id))
        if self._record_attempt is not None and turn.drill is None:
            self._attempted(attempt)
        if verdict.credential_alert:
            self._credential_alert(attempt)
        return attempt

    # --- endings -------------------------------------------------------------------------

    def _ended(self, walk: Walk, error: RoutingError) -> RoutingError:
        """Count how the request ended, in ``report()``, and return its error to raise."""
        for kind, key in _ENDINGS:
            if isinstance(error, kind):
                self._count(key)
                break
        if walk.drill is not None:
            self._drilling.ended(walk, error)
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

    def _attempted(self, attempt: Attempt) -> None:
        assert self._record_attempt is not None
        try:
            self._record_attempt(attempt)
        except Exception:
            # Health accounting must never cost a request its answer (nor its error).
            logger.exception("chainclient: record_attempt(%s) raised", attempt.attempt_id)

    def _breaker_opened(self, provider: str) -> None:
        assert self._record_breaker_opened is not None
        try:
            self._record_breaker_opened(provider)
        except Exception:
            logger.exception("chainclient: record_breaker_opened(%r) raised", provider)


__all__ = ["REPORT_KEYS", "RouterState", "TransportT"]
