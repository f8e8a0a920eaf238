"""One request's way along its snapshot of the chain, step by step, and how it ends.

A ``Walk`` holds what the request asked for (its contract, side effects, fallback, verify
and budget), collects the attempts made and the steps admission refused, which become the
request's receipt, and builds what the request ends with: a ``RouteResult``, or the
``RoutingError`` that names the ending (a stop, an exhausted chain, a spent budget) with a
headline that tells the whole story in one log line. Each step admitted for an attempt is
a ``Turn``; a ``Pause`` is the wait before a same-step retry.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from chainclient.admission import Contract
from chainclient.breaker import CircuitBreaker
from chainclient.errors import (
    AllProvidersFailed,
    ContentPolicyRejected,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    RequestRejected,
    RoutingError,
    VerificationFailed,
)
from chainclient.outcomes import Action
from chainclient.receipts import Attempt, Receipt, RouteResult
from chainclient.tracing import AttemptSpan
from chainclient.types import ChainDocument, Drill, Step


class Walk:
    """One request over one snapshot of the chain: what it asked for, and its attempts and
    refusals so far."""

    __slots__ = (
        "allow_fallback",
        "attempts",
        "budget_s",
        "contract",
        "cut_by_deadline",
        "deadline",
        "document",
        "drill",
        "drilled",  # set with ``drill`` (``RouterCore._begin``), read only when it is set
        "outgrown",
        "pause_s",
        "policy_set",
        "refused",
        "retried",
        "retry_in",
        "retry_max_s",
        "side_effects",
        "task_id",
        "verify",
    )

    def __init__(
        self,
        task_id: str,
        document: ChainDocument,
        *,
        contract: Contract,
        side_effects: bool,
        allow_fallback: bool,
        verify: Callable[[Any], bool] | None,
        deadline: float,
        budget_s: float,
    ) -> None:
        self.task_id = task_id
        self.document = document
        self.contract = contract
        self.side_effects = side_effects
        self.allow_fallback = allow_fallback
        self.verify = verify
        self.deadline = deadline
        """When the request's budget runs out, on the router's clock."""
        self.budget_s = budget_s
        """The request's budget, in seconds (``deadline_s``)."""
        self.cut_by_deadline = False
        """Whether the last attempt timed out because the budget cut its timeout short."""
        self.attempts: list[Attempt] = []
        self.refused: list[tuple[Step, str]] = []
        self.outgrown: tuple[Step, int | None] | None = None
        """Once the request did not fit a step's context window: the step with the largest
        such window the registry knows (or the last step that rejected it, none being known)
        and that window; later steps whose window is not larger are skipped."""
        self.retry_max_s: float | None = None
        """The longest ``Retry-After`` a same-step retry waits for (the failure policy's, or the
        call's ``retry_same_step``); None: no same-step retry for this request."""
        self.retried: set[Step] | None = None
        """The steps this request retried once already (None: none)."""
        self.retry_in: float | None = None
        """Set by the router when the attempt it just settled is retried on the same step:
        the seconds to wait first."""
        self.pause_s = 0.0
        """The seconds to wait before the next attempt: a same-step retry's (``RouterCore._steps``)."""
        self.policy_set: tuple[str, ...] = ()
        """The call's own arguments that override the document's failure policy."""
        self.drill: Drill | None = None
        """The failover drill this request is routed in: active when it began, and one the
        source takes part in (``RouterCore._begin``); None for nearly every request. Such a
        request also has ``drilled``: whether a fault was injected into its walk."""
        self.drilled: bool

    def receipt(self) -> Receipt:
        document = self.document
        return Receipt(
            self.task_id,
            tuple(self.attempts),
            tuple(self.refused),
            document.preset,
            document.version,
            document.epoch,
            self.contract.identity,
            document.policy_line if not self.policy_set else self._policy(),
        )

    def _policy(self) -> str:
        """The failure policy the request was routed under, in words (``Receipt.policy``), when
        the call set some of it."""
        said = self.document.policy_line
        return f"{said}; the call set {', '.join(self.policy_set)}" if said else ""

    def served(self, step: Step, value: Any) -> RouteResult:
        """The result of the attempt that succeeded (the last one)."""
        return RouteResult(
            value=value,
            provider=step.provider,
            model=step.model,
            marking=types.MappingProxyType(self.document.marking),
            receipt=self.receipt(),
        )

    def stopped(self, action: Action) -> RoutingError:
        """The error for the last attempt, which stopped the walk (``action`` is a stop)."""
        attempt = self.attempts[-1]
        if action is Action.STOP_UNKNOWN:
            return OutcomeUnknown(
                f"outcome unknown at {attempt.step} for a request with side effects "
                f"({attempt.error or attempt.outcome}); it may have acted, so nothing else "
                "was tried",
                receipt=self.receipt(),
            )
        if action is Action.STOP_UNVERIFIED:
            return VerificationFailed(
                f"{attempt.step} answered but the answer failed verify() ({attempt.error}); the "
                "request has side effects and the provider acted, so nothing else was tried",
                receipt=self.receipt(),
            )
        if action is Action.STOP_CONTENT:
            return ContentPolicyRejected(
                f"{attempt.step} refused the content on policy grounds ({attempt.error})",
                receipt=self.receipt(),
                status=attempt.status,
            )
        return RequestRejected(
            f"{attempt.step} rejected the request ({attempt.error})",
            receipt=self.receipt(),
            status=attempt.status,
        )

    def exhausted(self) -> RoutingError:
        """The error for a walk that reached the end of the chain unserved."""
        if not self.attempts:
            return NoEligibleRoute(
                f"no step of the chain is eligible for this request ({len(self.refused)} refused); "
                "nothing was attempted",
                receipt=self.receipt(),
            )
        if self.cut_by_deadline:
            return self.out_of_time(not_started=())
        last = self.attempts[-1]
        if self.outgrown is not None and last.outcome == "rejected":  # only a context length moves on rejected
            return RequestRejected(
                f"{last.step} rejected the request: context length exceeded, and no later step has a larger "
                f"context window ({last.error})",
                receipt=self.receipt(),
                status=last.status,
            )
        summary = ", ".join(f"{a.provider}/{a.model} ({_short_error(a)})" for a in self.attempts)
        return AllProvidersFailed(f"all providers failed: {summary}", receipt=self.receipt())

    def out_of_time(self, *, not_started: Sequence[Step]) -> DeadlineExceeded:
        """The error for a budget spent before a step could be started (or that cut the last
        attempt short)."""
        attempts, deadline_s = self.attempts, self.budget_s
        tried = ", ".join(f"{a.step} ({_short_error(a)})" for a in attempts) or "nothing"
        untried = f"; not started: {', '.join(map(str, not_started))}" if not_started else ""
        return DeadlineExceeded(
            f"deadline of {deadline_s:g}s exceeded after {len(attempts)} attempt(s): {tried}{untried}",
            receipt=self.receipt(),
            deadline_s=deadline_s,
        )


class Turn(NamedTuple):
    """A step admitted for one attempt: its share of the budget, when it started, and its
    OpenTelemetry span (None without OpenTelemetry: see ``tracing``). ``drill``: the drill
    whose fault this attempt is (no call is made; ``breaker`` is then None)."""

    step: Step
    timeout: float
    breaker: CircuitBreaker | None
    started: float
    span: AttemptSpan | None = None
    drill: Drill | None = None


class Pause(NamedTuple):
    """What the walk yields before a step's same-step retry: its driver waits ``seconds`` (in
    the caller's thread, or awaited), then sends anything back."""

    seconds: float


def _short_error(attempt: Attempt) -> str:
    if attempt.status is not None:
        return f"HTTP {attempt.status}"
    return attempt.outcome if not attempt.error else f"{attempt.outcome}: {attempt.error}"


__all__ = ["Pause", "Turn", "Walk"]
