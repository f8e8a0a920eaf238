"""How one provider call ended, and what the router does about it: one classification step.

``classify`` maps what a transport did (returned a value, or raised) to a ``Verdict``: how
the attempt is recorded (outcome, dispatch state, status, reason, error), whether it
counts against the provider's circuit breaker, and the ``Action`` the walk along the chain
takes next. The table it applies (``ProviderError.status``):

- 429, 500, 502, 503, 504, 529, timeouts and connection failures: fall through;
- 400, 422: stop at once with ``RequestRejected`` (another provider would reject it too);
- a context-length rejection (``ContextLengthExceeded``, a 400): the next step whose context
  window is larger (or not known) is tried; no mark against the provider;
- 401, 403: fall through *and* raise a credential alert (error log, ``on_alert``, counter);
- any other status: treated as a provider failure and falls through;
- content-policy refusal: stops with ``ContentPolicyRejected`` (a ``RequestRejected``)
  unless ``fall_through_on_content_policy=True``;
- any other exception from a transport: a failure whose outcome is unknown
  (``dispatched_unknown``); it falls through unless the request has side effects.

An answer after dispatch that does not establish the outcome is ``dispatched_unknown``: a
timeout, a dropped connection (no status), an unexpected exception, and a 502 or 504 (a
gateway answered for an upstream that may have acted). With ``side_effects=True`` an unknown
outcome stops with ``OutcomeUnknown``, and an answer that fails ``verify`` stops with
``VerificationFailed`` (the provider acted; redoing it elsewhere could act twice).
Keeping the table in one pure function is what makes it testable and readable at 02:00.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

from chainclient.errors import (
    ContentPolicyRefusal,
    ContextLengthExceeded,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
)
from chainclient.receipts import DISPATCHED_KNOWN, DISPATCHED_UNKNOWN, NOT_DISPATCHED, DispatchState, Outcome

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
REJECTING_STATUSES = frozenset({400, 422})
CREDENTIAL_STATUSES = frozenset({401, 403})
# A gateway's answer for its upstream: whether the upstream acted is not known.
UNKNOWN_OUTCOME_STATUSES = frozenset({502, 504})

_NOT_ELSEWHERE = "content-policy refusal; not tried elsewhere (fall_through_on_content_policy=False)"


class Action(enum.Enum):
    """What an attempt tells the walk along the chain to do next."""

    SERVED = "served"
    """Return the value: the request is served."""
    NEXT = "next"
    """Try the next admissible step."""
    NEXT_LARGER = "next_larger"
    """Try the next admissible step whose context window is larger (or not known): the
    request did not fit this step's."""
    STOP_REJECTED = "stop_rejected"
    """Stop with RequestRejected: the request itself is bad."""
    STOP_CONTENT = "stop_content"
    """Stop with ContentPolicyRejected."""
    STOP_UNKNOWN = "stop_unknown"
    """Stop with OutcomeUnknown: the provider may have acted on a request with side effects."""
    STOP_UNVERIFIED = "stop_unverified"
    """Stop with VerificationFailed: the provider acted, its answer failed ``verify``, and
    the request has side effects."""


class Verdict(NamedTuple):
    """One attempt, classified: its line in the receipt and what follows from it.

    A named tuple rather than a frozen dataclass: one is built per failed attempt, on the
    request's path, and a tuple costs half as much to build."""

    outcome: Outcome
    dispatch: DispatchState
    action: Action
    reason: str
    status: int | None = None
    error: str = ""
    counts_as_failure: bool = True
    """Whether the provider's breaker counts it; only failures that fall through do."""
    retry_after_s: float | None = None
    """How long the provider asked us to wait (``Retry-After``): its breaker opens that long."""

    @property
    def credential_alert(self) -> bool:
        """Whether the provider rejected our credentials: someone must fix the key."""
        return self.status in CREDENTIAL_STATUSES


# Built once: the success of most requests is this verdict, and it is immutable.
_SERVED = Verdict("ok", DISPATCHED_KNOWN, Action.SERVED, reason="", counts_as_failure=False)


def classify(
    raised: Exception | None,
    *,
    value: Any = None,
    verify: Callable[[Any], bool] | None = None,
    timeout_s: float,
    side_effects: bool,
    fall_through_on_content_policy: bool,
) -> Verdict:
    """Classify one provider call: ``raised`` is what the transport raised, or None when it
    returned ``value`` (which ``verify``, if given, must accept for the attempt to count)."""
    if raised is None:
        return _answered(value, verify, side_effects=side_effects)
    verdict = _failed(raised, timeout_s=timeout_s, fall_through_on_content_policy=fall_through_on_content_policy)
    if verdict.dispatch != DISPATCHED_UNKNOWN:
        return verdict
    # The provider may have acted: trying another one could do it twice.
    if side_effects:
        reason = f"{verdict.reason}; outcome unknown and the request has side effects: stopped"
        return verdict._replace(action=Action.STOP_UNKNOWN, reason=reason)
    reason = f"{verdict.reason}; outcome unknown, no side effects: safe to try the next step"
    return verdict._replace(reason=reason)


def _answered(value: Any, verify: Callable[[Any], bool] | None, *, side_effects: bool) -> Verdict:
    """The transport returned: served, unless ``verify`` turns the answer down."""
    if verify is None:
        return _SERVED
    ok, error = _verified(verify, value)
    if ok:
        return _SERVED
    if side_effects:
        reason = "the answer failed verify(); the provider acted and the request has side effects: stopped"
        return Verdict("verify_failed", DISPATCHED_KNOWN, Action.STOP_UNVERIFIED, reason=reason, error=error)
    return Verdict("verify_failed", DISPATCHED_KNOWN, Action.NEXT, reason="the answer failed verify()", error=error)


def _failed(raised: Exception, *, timeout_s: float, fall_through_on_content_policy: bool) -> Verdict:
    """The transport raised: what its exception says about the call."""
    if isinstance(raised, ProviderError):
        return _provider_error(raised)
    error = str(raised)
    if isinstance(raised, ProviderTimeout):
        dispatch = DISPATCHED_UNKNOWN if raised.dispatched else NOT_DISPATCHED
        return Verdict("timeout", dispatch, Action.NEXT, reason=f"timed out after {timeout_s:g}s", error=error)
    if isinstance(raised, ProviderUnavailable):
        reason = "provider unavailable (nothing was sent)"
        return Verdict("unavailable", NOT_DISPATCHED, Action.NEXT, reason=reason, error=error)
    if isinstance(raised, ContentPolicyRefusal):
        if not fall_through_on_content_policy:
            action, reason = Action.STOP_CONTENT, _NOT_ELSEWHERE
        else:
            action, reason = Action.NEXT, "content-policy refusal (fall_through_on_content_policy=True)"
        return Verdict("refused", DISPATCHED_KNOWN, action, reason=reason, error=error, counts_as_failure=False)
    # A transport bug must not escape as-is; nobody knows whether the request went out.
    name = type(raised).__name__
    return Verdict(
        "error",
        DISPATCHED_UNKNOWN,
        Action.NEXT,
        reason=f"unexpected {name} from the transport",
        error=f"{name}: {raised}",
    )


def _provider_error(raised: ProviderError) -> Verdict:
    """An HTTP-level failure, classified by its status."""
    status, error = raised.status, str(raised)
    if status is None:
        dispatch = DISPATCHED_UNKNOWN if raised.dispatched else NOT_DISPATCHED
        return Verdict("failed", dispatch, Action.NEXT, reason="no HTTP status", error=error)
    dispatch = NOT_DISPATCHED
    if raised.dispatched:
        dispatch = DISPATCHED_UNKNOWN if status in UNKNOWN_OUTCOME_STATUSES else DISPATCHED_KNOWN
    if isinstance(raised, ContextLengthExceeded):
        return Verdict(
            "rejected",
            dispatch,
            Action.NEXT_LARGER,
            reason=f"HTTP {status}: context length exceeded; trying a step with a larger context window",
            status=status,
            error=error,
            counts_as_failure=False,
        )
    if status in REJECTING_STATUSES:
        # The provider is answering, so this is no mark against it.
        reason = f"HTTP {status}: the request itself was rejected; not tried elsewhere"
        return Verdict(
            "rejected",
            dispatch,
            Action.STOP_REJECTED,
            reason=reason,
            status=status,
            error=error,
            counts_as_failure=False,
        )
    if dispatch == DISPATCHED_UNKNOWN:
        reason = f"HTTP {status}: a gateway answered for an upstream that may have acted"
    elif status in RETRYABLE_STATUSES:
        reason = f"HTTP {status} is retryable"
    elif status in CREDENTIAL_STATUSES:
        reason = f"HTTP {status}: credentials rejected (credential alert raised)"
    else:
        reason = f"HTTP {status} (unclassified: treated as a provider failure)"
    retry_after_s = getattr(raised, "retry_after_s", None)
    if retry_after_s is not None:
        reason += f"; the provider asked to retry after {retry_after_s:g}s (breaker open until then)"
    return Verdict(
        "failed", dispatch, Action.NEXT, reason=reason, status=status, error=error, retry_after_s=retry_after_s
    )


def _verified(verify: Callable[[Any], bool], value: Any) -> tuple[bool, str]:
    try:
        return (True, "") if verify(value) else (False, "verify() returned false")
    except Exception as exc:  # a failing check is a failed answer
        return False, f"verify() raised {type(exc).__name__}: {exc}"


__all__ = [
    "CREDENTIAL_STATUSES",
    "REJECTING_STATUSES",
    "RETRYABLE_STATUSES",
    "UNKNOWN_OUTCOME_STATUSES",
    "Action",
    "Verdict",
    "classify",
]
