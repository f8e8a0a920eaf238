"""Route one request along the live fallback chain, with the fallback semantics a service
owner can reason about at 02:00.

Per request the router takes one snapshot of the chain (``current()`` is read once), then
walks it in order. Before every attempt it runs admission (contract capabilities and
destinations, the provider's circuit breaker, ``allow_fallback``), gives the attempt
``min(step timeout, time left in the request's budget)``, classifies what the transport
raised, and either returns, moves on to the next step, or stops. Every attempt is recorded
in the request's receipt, which results and errors carry.

Classification (``ProviderError.status``):

- 429, 500, 502, 503, 504, 529, timeouts and connection failures: fall through;
- 400, 422: stop at once with ``RequestRejected`` (another provider would reject it too);
- 401, 403: fall through *and* raise a credential alert (error log, ``on_alert``, counter);
- any other status: treated as a provider failure and falls through;
- content-policy refusal: stops with ``ContentPolicyRejected`` (a ``RequestRejected``)
  unless ``fall_through_on_content_policy=True``;
- any other exception from a transport: a failure whose outcome is unknown
  (``dispatched_unknown``); it falls through unless the request has side effects.

With ``side_effects=True`` an unknown outcome (timeout after dispatch, a dispatched
``ProviderError`` without a status, an unexpected exception) stops with ``OutcomeUnknown``.
"""

from __future__ import annotations

import logging
import threading
import time
import types
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from chainclient.errors import (
    AllProvidersFailed,
    CarriesReceipt,
    ContentPolicyRefusal,
    ContentPolicyRejected,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RequestRejected,
    RoutingError,
)
from chainclient.types import ChainDocument, Registry, Step

logger = logging.getLogger("chainclient.router")

DispatchState = Literal["not_dispatched", "dispatched_known", "dispatched_unknown"]
NOT_DISPATCHED: DispatchState = "not_dispatched"
DISPATCHED_KNOWN: DispatchState = "dispatched_known"
DISPATCHED_UNKNOWN: DispatchState = "dispatched_unknown"

Outcome = Literal[
    "ok", "failed", "rejected", "refused", "timeout", "unavailable", "verify_failed", "error"
]

Transport = Callable[[Step, Any, float], Any]
"""``call(step, request, timeout_s) -> value``; raises the errors in ``chainclient.errors``."""

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
REJECTING_STATUSES = frozenset({400, 422})
CREDENTIAL_STATUSES = frozenset({401, 403})


class Clock(Protocol):
    """A monotonic clock in seconds; ``chainclient.testing.FakeClock`` is one."""

    def now(self) -> float: ...


class ChainSource(Protocol):
    """Anything with a non-blocking ``current()`` returning the live chain (a ChainClient).

    If it also has ``record_served(provider)`` (a ChainClient does), the router calls it
    on every successful result, for the client's usage reports.
    """

    def current(self) -> ChainDocument: ...


@dataclass(frozen=True)
class Contract:
    """What a request needs from whichever step serves it.

    ``requires``: capabilities the step's model must all have (e.g. ``{"images"}``).
    ``destinations``: where the request's data may go; None means anywhere.
    """

    requires: AbstractSet[str] = frozenset()
    destinations: AbstractSet[str] | None = None

    def __post_init__(self) -> None:
        # Frozen sets make the contract hashable (admission results are cached per contract)
        # and stop a caller's later edits to their set from changing a live contract.
        object.__setattr__(self, "requires", frozenset(self.requires))
        if self.destinations is not None:
            object.__setattr__(self, "destinations", frozenset(self.destinations))


NO_CONTRACT = Contract()


@dataclass(frozen=True)
class BreakerSettings:
    """Per-provider circuit breaker: ``failure_threshold`` counted failures within
    ``window_s`` open it; after ``cooldown_s`` one probe request may try it (half-open);
    the probe's result closes it or opens it again."""

    failure_threshold: int = 5
    window_s: float = 60.0
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1 (use breaker=None to disable)")
        if self.window_s <= 0 or self.cooldown_s <= 0:
            raise ValueError("window_s and cooldown_s must be positive")


DEFAULT_BREAKER = BreakerSettings()

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """One provider's breaker. The closed-state checks take no lock: they only read one
    attribute, and a request that races a state change just sees the previous state."""

    def __init__(self, provider: str, settings: BreakerSettings) -> None:
        self.provider = provider
        self.settings = settings
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._failures: deque[float] = deque()
        self._opened_at = 0.0
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        return self._state

    def admit(self, now: float) -> str | None:
        """None if a request may try this provider now (taking the half-open probe slot),
        else why not."""
        if self._state == "closed":
            return None
        with self._lock:
            if self._state == "open":
                left = self.settings.cooldown_s - (now - self._opened_at)
                if left > 0:
                    return f"circuit breaker open ({left:.1f}s of cooldown left)"
                self._state = "half_open"
                self._probe_in_flight = False
            if self._state == "half_open":
                if self._probe_in_flight:
                    return "circuit breaker half-open (a probe request is in flight)"
                self._probe_in_flight = True
            return None

    def record_success(self, now: float) -> None:
        if self._state == "closed":
            return
        with self._lock:
            if self._state == "half_open":
                self._state = "closed"
                self._probe_in_flight = False
                logger.info("chainclient: circuit breaker for %s closed (probe succeeded)",
                            self.provider)

    def record_failure(self, now: float) -> None:
        with self._lock:
            if self._state == "half_open":
                self._open(now, "probe failed")
            elif self._state == "closed":
                failures = self._failures
                failures.append(now)
                horizon = now - self.settings.window_s
                while failures and failures[0] <= horizon:
                    failures.popleft()
                if len(failures) >= self.settings.failure_threshold:
                    self._open(now, f"{len(failures)} failures in {self.settings.window_s:g}s")

    def release(self) -> None:
        """Give back a probe slot taken by ``admit`` for an attempt that never ran."""
        if self._state == "closed":
            return
        with self._lock:
            self._probe_in_flight = False

    def reset(self) -> None:
        with self._lock:
            self._state = "closed"
            self._failures.clear()
            self._probe_in_flight = False

    def _open(self, now: float, why: str) -> None:
        self._state = "open"
        self._opened_at = now
        self._failures.clear()
        self._probe_in_flight = False
        logger.warning("chainclient: circuit breaker for %s opened (%s); cooling down %gs",
                       self.provider, why, self.settings.cooldown_s)


@dataclass(frozen=True)
class Attempt:
    """One try of one step for one request: a line of the recovery receipt."""

    task_id: str
    attempt_id: str
    provider: str
    model: str
    dispatch: DispatchState
    outcome: Outcome
    status: int | None
    elapsed_s: float
    timeout_s: float
    reason: str
    """Why the router moved on (or stopped) after this attempt; empty when it succeeded."""
    error: str = ""
    """The error the transport raised (or the verify failure), as text."""

    @property
    def step(self) -> str:
        return f"{self.provider}/{self.model}"

    def __str__(self) -> str:
        status = f" HTTP {self.status}" if self.status is not None else ""
        line = (
            f"{self.attempt_id} {self.provider}/{self.model}: {self.outcome}{status} "
            f"({self.dispatch}, {self.elapsed_s * 1000:.0f} ms of {self.timeout_s:g} s)"
        )
        if self.reason:
            line += f" -> {self.reason}"
        return line


@dataclass(frozen=True)
class Receipt:
    """A request's attempt log: every attempt in order, plus the steps admission refused."""

    task_id: str
    attempts: tuple[Attempt, ...]
    refused: tuple[tuple[Step, str], ...] = ()
    preset: str = ""
    version: int = 0

    def __str__(self) -> str:
        lines = [f"task {self.task_id} (preset {self.preset!r}, version {self.version}): "
                 f"{len(self.attempts)} attempt(s)"]
        lines.extend(f"  {attempt}" for attempt in self.attempts)
        lines.extend(f"  skipped {step}: {why}" for step, why in self.refused)
        return "\n".join(lines)


@dataclass(frozen=True)
class RouteResult(CarriesReceipt):
    """A served request: the value and where it came from, with its recovery receipt."""

    value: Any
    provider: str
    model: str
    marking: Mapping[str, Any]
    receipt: Receipt = field(repr=False)

    @property
    def recovered(self) -> bool:
        """True when a fallback served the request (an earlier attempt failed)."""
        return len(self.receipt.attempts) > 1

    @property
    def degraded(self) -> bool:
        return bool(self.marking.get("degraded", False))

    def __str__(self) -> str:
        return f"served by {self.provider}/{self.model}\n{self.receipt}"


@dataclass(frozen=True)
class CredentialAlert:
    """A provider rejected our credentials (HTTP 401/403): someone must fix the key."""

    provider: str
    model: str
    status: int
    task_id: str
    attempt_id: str
    message: str


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

# What an attempt tells the walk to do next.
_SERVED, _NEXT, _STOP_REJECTED, _STOP_CONTENT, _STOP_UNKNOWN = range(5)
_MAX_CACHED_ADMISSIONS = 4096


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
        self._record_served: Callable[[str], object] | None = (
            record_served if callable(record_served) else None
        )
        self._transports: dict[str, Transport] = dict(transports)
        self._registry = registry
        self._deadline_s = float(deadline_s)
        self._fall_through_on_content_policy = fall_through_on_content_policy
        self._on_alert = on_alert
        self._now: Callable[[], float] = clock.now if clock is not None else time.monotonic
        self._breakers: dict[str, CircuitBreaker] = (
            {name: CircuitBreaker(name, breaker) for name in self._transports}
            if breaker is not None
            else {}
        )
        # Admission by contract depends only on (step, contract): cache it off the hot path.
        self._admission: dict[tuple[Step, Contract], str | None] = {}
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
        now = self._now
        deadline = now() + self._deadline_s
        task_id = task_id or uuid.uuid4().hex
        if contract is None:
            contract = NO_CONTRACT
        attempts: list[Attempt] = []
        refused: list[tuple[Step, str]] = []
        cut_by_deadline = False

        for index, step in enumerate(document.chain):
            why = self._admission.get((step, contract), _UNCACHED)
            if why is _UNCACHED:
                why = self._check_contract(step, contract)
            if why is None and index and not allow_fallback:
                why = "fallback not permitted (allow_fallback=False)"
            breaker = self._breakers.get(step.provider)
            if why is None and breaker is not None:
                why = breaker.admit(now())
            if why is not None:
                refused.append((step, str(why)))
                continue

            left = deadline - now()
            if left <= 0:
                if breaker is not None:
                    breaker.release()
                raise self._deadline_exceeded(task_id, document, attempts, refused,
                                              document.chain[index:])
            step_timeout = step.timeout_ms / 1000.0
            timeout = step_timeout if step_timeout <= left else left
            attempt, action, value = self._attempt(
                step, request, timeout, task_id, len(attempts) + 1, side_effects, verify,
                breaker,
            )
            attempts.append(attempt)
            if action == _SERVED:
                self._count("recovered_success" if len(attempts) > 1 else "first_attempt_success")
                if self._record_served is not None:
                    self._served(step.provider)
                return RouteResult(
                    value=value,
                    provider=step.provider,
                    model=step.model,
                    marking=types.MappingProxyType(document.marking),
                    receipt=Receipt(task_id, tuple(attempts), tuple(refused),
                                    document.preset, document.version),
                )
            if action != _NEXT:
                raise self._stopped(action, attempt, task_id, document, attempts, refused)
            # A timeout shortened by the budget failed because the budget ran out.
            cut_by_deadline = attempt.outcome == "timeout" and timeout < step_timeout

        receipt = Receipt(task_id, tuple(attempts), tuple(refused), document.preset,
                          document.version)
        if not attempts:
            self._count("refusals")
            raise NoEligibleRoute(
                f"no step of the chain is eligible for this request ({len(refused)} refused); "
                "nothing was attempted",
                receipt=receipt,
            )
        if cut_by_deadline:
            raise self._deadline_exceeded(task_id, document, attempts, refused, ())
        self._count("all_failed")
        summary = ", ".join(f"{a.provider}/{a.model} ({_short_error(a)})" for a in attempts)
        raise AllProvidersFailed(f"all providers failed: {summary}", receipt=receipt)

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

    # --- one attempt ---------------------------------------------------------------------

    def _attempt(
        self,
        step: Step,
        request: Any,
        timeout: float,
        task_id: str,
        number: int,
        side_effects: bool,
        verify: Callable[[Any], bool] | None,
        breaker: CircuitBreaker | None,
    ) -> tuple[Attempt, int, Any]:
        now = self._now
        transport = self._transports[step.provider]
        attempt_id = f"{task_id}-{number}"
        status: int | None = None
        value: Any = None
        error = ""
        # Whether this attempt counts against the provider's breaker: only failures that
        # fall through do; a rejection or a policy refusal shows the provider is answering.
        counts_as_failure = True
        started = now()
        try:
            value = transport(step, request, timeout)
        except ProviderError as exc:
            status, error = exc.status, str(exc)
            if status is None:
                dispatch = DISPATCHED_UNKNOWN if exc.dispatched else NOT_DISPATCHED
                outcome: Outcome = "failed"
                reason = "no HTTP status"
            else:
                dispatch = DISPATCHED_KNOWN if exc.dispatched else NOT_DISPATCHED
                if status in REJECTING_STATUSES:
                    elapsed = now() - started
                    if breaker is not None:
                        breaker.record_success(now())
                    return Attempt(
                        task_id, attempt_id, step.provider, step.model, dispatch, "rejected",
                        status, elapsed, timeout,
                        f"HTTP {status}: the request itself was rejected; not tried elsewhere",
                        error,
                    ), _STOP_REJECTED, None
                outcome = "failed"
                if status in RETRYABLE_STATUSES:
                    reason = f"HTTP {status} is retryable"
                elif status in CREDENTIAL_STATUSES:
                    reason = f"HTTP {status}: credentials rejected (credential alert raised)"
                else:
                    reason = f"HTTP {status} (unclassified: treated as a provider failure)"
        except ProviderTimeout as exc:
            error, outcome = str(exc), "timeout"
            dispatch = DISPATCHED_UNKNOWN if exc.dispatched else NOT_DISPATCHED
            reason = f"timed out after {timeout:g}s"
        except ProviderUnavailable as exc:
            error, outcome, dispatch = str(exc), "unavailable", NOT_DISPATCHED
            reason = "provider unavailable (nothing was sent)"
        except ContentPolicyRefusal as exc:
            error, outcome, dispatch = str(exc), "refused", DISPATCHED_KNOWN
            counts_as_failure = False
            if not self._fall_through_on_content_policy:
                elapsed = now() - started
                if breaker is not None:
                    breaker.record_success(now())
                return Attempt(
                    task_id, attempt_id, step.provider, step.model, dispatch, outcome, None,
                    elapsed, timeout,
                    "content-policy refusal; not tried elsewhere "
                    "(fall_through_on_content_policy=False)",
                    error,
                ), _STOP_CONTENT, None
            reason = "content-policy refusal (fall_through_on_content_policy=True)"
        except Exception as exc:  # a transport bug must not escape as-is
            error, outcome, dispatch = f"{type(exc).__name__}: {exc}", "error", DISPATCHED_UNKNOWN
            reason = f"unexpected {type(exc).__name__} from the transport"
        except BaseException:
            if breaker is not None:
                breaker.release()
            raise
        else:
            ok, error = _verified(verify, value) if verify is not None else (True, "")
            elapsed = now() - started
            if ok:
                if breaker is not None:
                    breaker.record_success(now())
                return Attempt(
                    task_id, attempt_id, step.provider, step.model, DISPATCHED_KNOWN, "ok",
                    None, elapsed, timeout, "",
                ), _SERVED, value
            outcome, dispatch = "verify_failed", DISPATCHED_KNOWN
            reason = "the answer failed verify()"

        elapsed = now() - started
        if dispatch == DISPATCHED_UNKNOWN and side_effects:
            action = _STOP_UNKNOWN
            reason += "; outcome unknown and the request has side effects: stopped"
        else:
            action = _NEXT
            if dispatch == DISPATCHED_UNKNOWN:
                reason += "; outcome unknown, no side effects: safe to try the next step"
        if breaker is not None:
            if counts_as_failure:
                breaker.record_failure(now())
            else:
                breaker.record_success(now())
        attempt = Attempt(
            task_id, attempt_id, step.provider, step.model, dispatch, outcome, status, elapsed,
            timeout, reason, error,
        )
        if status in CREDENTIAL_STATUSES:
            self._credential_alert(attempt)
        return attempt, action, None

    # --- admission and endings ---------------------------------------------------------

    def _check_contract(self, step: Step, contract: Contract) -> str | None:
        why = self._contract_refusal(step, contract)
        if len(self._admission) >= _MAX_CACHED_ADMISSIONS:
            self._admission.clear()
        self._admission[(step, contract)] = why
        return why

    def _contract_refusal(self, step: Step, contract: Contract) -> str | None:
        if step.provider not in self._transports:
            return f"no transport for provider {step.provider!r}"
        registry = self._registry
        if registry is None:
            if contract.requires or contract.destinations is not None:
                return "no registry to check the request's contract against"
            return None
        provider = registry.get(step.provider)
        if provider is None:
            return f"provider {step.provider!r} is not in the registry"
        if step.model not in provider.models:
            return f"model {step.model!r} is not in the registry for {step.provider!r}"
        missing = contract.requires - provider.capabilities(step.model)
        if missing:
            return f"model lacks required capabilities {sorted(missing)}"
        if contract.destinations is not None and provider.destination not in contract.destinations:
            return (f"destination {provider.destination!r} is not allowed "
                    f"(allowed: {sorted(contract.destinations)})")
        return None

    def _stopped(
        self,
        action: int,
        attempt: Attempt,
        task_id: str,
        document: ChainDocument,
        attempts: list[Attempt],
        refused: list[tuple[Step, str]],
    ) -> RoutingError:
        receipt = Receipt(task_id, tuple(attempts), tuple(refused), document.preset,
                          document.version)
        if action == _STOP_UNKNOWN:
            self._count("unresolved")
            return OutcomeUnknown(
                f"outcome unknown at {attempt.step} for a request with side effects "
                f"({attempt.error or attempt.outcome}); it may have acted, so nothing else "
                "was tried",
                receipt=receipt,
            )
        self._count("rejections")
        if action == _STOP_CONTENT:
            return ContentPolicyRejected(
                f"{attempt.step} refused the content on policy grounds ({attempt.error})",
                receipt=receipt, status=attempt.status,
            )
        return RequestRejected(
            f"{attempt.step} rejected the request ({attempt.error})",
            receipt=receipt, status=attempt.status,
        )

    def _deadline_exceeded(
        self,
        task_id: str,
        document: ChainDocument,
        attempts: list[Attempt],
        refused: list[tuple[Step, str]],
        not_started: Sequence[Step],
    ) -> DeadlineExceeded:
        self._count("deadline")
        receipt = Receipt(task_id, tuple(attempts), tuple(refused), document.preset,
                          document.version)
        tried = ", ".join(f"{a.step} ({_short_error(a)})" for a in attempts) or "nothing"
        untried = f"; not started: {', '.join(map(str, not_started))}" if not_started else ""
        return DeadlineExceeded(
            f"deadline of {self._deadline_s:g}s exceeded after {len(attempts)} attempt(s): "
            f"{tried}{untried}",
            receipt=receipt, deadline_s=self._deadline_s,
        )

    def _credential_alert(self, attempt: Attempt) -> None:
        self._count("credential_alerts")
        logger.error(
            "chainclient: %s rejected our credentials (HTTP %s) on attempt %s; "
            "check this provider's API key",
            attempt.provider, attempt.status, attempt.attempt_id,
        )
        if self._on_alert is None:
            return
        alert = CredentialAlert(
            provider=attempt.provider, model=attempt.model, status=attempt.status or 0,
            task_id=attempt.task_id, attempt_id=attempt.attempt_id, message=attempt.error,
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


_UNCACHED: Any = object()


def _verified(verify: Callable[[Any], bool], value: Any) -> tuple[bool, str]:
    try:
        return (True, "") if verify(value) else (False, "verify() returned false")
    except Exception as exc:  # a failing check is a failed answer
        return False, f"verify() raised {type(exc).__name__}: {exc}"


def _short_error(attempt: Attempt) -> str:
    if attempt.status is not None:
        return f"HTTP {attempt.status}"
    return attempt.outcome if not attempt.error else f"{attempt.outcome}: {attempt.error}"


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
