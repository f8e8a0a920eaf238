"""The SDK's error types: a small hierarchy whose aggregated errors carry their parts as data.

Two families live here:

- what a *transport* raises to tell the router how a call went wrong (``TransportError``
  and its subclasses); the router catches these and never lets them escape;
- what the *router* raises when a request cannot be served (``RoutingError`` and its
  subclasses). Each carries the request's attempt log (``.attempts``, the "recovery
  receipt", from ``receipts``) and reads as a headline plus one line per attempt when logged.
"""

from __future__ import annotations

from chainclient.receipts import Attempt, CarriesReceipt, Receipt
from chainclient.types import Step


class ChainClientError(Exception):
    """Base of every error the SDK raises."""


# --- What transports raise -------------------------------------------------------------


class TransportError(ChainClientError):
    """Base of the exceptions a transport raises to say how a provider call failed.

    ``dispatched`` says whether the request may have reached the provider; the router uses
    it to decide whether trying another provider could repeat a side effect.
    """

    dispatched: bool = True


class ProviderError(TransportError):
    """The provider answered with an HTTP-level failure (or the exchange broke mid-way).

    ``status`` is the HTTP status, or None when there was none (the connection dropped
    after the request was sent: with ``dispatched=True`` that is an unknown outcome).
    ``retry_after_s``: how long the provider asked us to wait (a 429's or 503's
    ``Retry-After``); the provider's circuit breaker stays open that long.
    """

    def __init__(
        self,
        status: int | None,
        dispatched: bool = True,
        message: str = "",
        *,
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        self.dispatched = dispatched
        self.message = message
        self.retry_after_s = retry_after_s
        label = f"HTTP {status}" if status is not None else "no HTTP status"
        super().__init__(f"{label}: {message}" if message else label)


class ContextLengthExceeded(ProviderError):
    """The provider said the request is longer than the model's context window (an HTTP 400
    that names it). Unlike other rejections, a later step may take it: the router tries the
    next step whose context window is larger (or not known), not the same-sized ones."""

    def __init__(self, dispatched: bool = True, message: str = "", *, status: int = 400) -> None:
        super().__init__(status, dispatched, message)


class ProviderTimeout(TransportError):
    """The call ran out of its ``timeout_s``.

    ``dispatched=True`` (the default, because it is the cautious answer) means the request
    was sent and the provider may have acted on it.
    """

    def __init__(self, dispatched: bool = True, message: str = "") -> None:
        self.dispatched = dispatched
        self.message = message
        where = "after dispatch" if dispatched else "before dispatch"
        super().__init__(f"timed out {where}: {message}" if message else f"timed out {where}")


class ProviderUnavailable(TransportError):
    """The connection failed before the request was sent (refused, DNS, TLS handshake)."""

    dispatched = False

    def __init__(self, message: str = "") -> None:
        self.message = message
        super().__init__(message or "provider unavailable (nothing was sent)")


class ContentPolicyRefusal(TransportError):
    """The provider answered, but refused the content on policy grounds."""

    def __init__(self, message: str = "") -> None:
        self.message = message
        super().__init__(message or "refused by the provider's content policy")


# --- What the router raises ------------------------------------------------------------


class RoutingError(CarriesReceipt, ChainClientError):
    """A request could not be served; ``str()`` is a headline plus the recovery receipt."""

    def __init__(self, message: str, *, receipt: Receipt) -> None:
        super().__init__(message)
        self.message = message
        self.receipt = receipt

    @property
    def refused(self) -> dict[Step, str]:
        """Steps admission would not try for this request, and why."""
        return dict(self.receipt.refused)

    def __str__(self) -> str:
        return f"{self.message}\n{self.receipt}"


class RequestRejected(RoutingError):
    """A provider said the request itself is bad (HTTP 400 or 422): no other step is tried,
    because another provider would most likely reject it too."""

    def __init__(self, message: str, *, receipt: Receipt, status: int | None) -> None:
        super().__init__(message, receipt=receipt)
        self.status = status


class ContentPolicyRejected(RequestRejected):
    """A provider refused the content on policy grounds, and the router was not told to
    fall through on that (``fall_through_on_content_policy=False``)."""


class AllProvidersFailed(RoutingError):
    """Every step that could be tried was tried, and each failed.

    ``failures`` maps each provider tried to its last failed attempt (which holds its
    error, status and dispatch state); ``refused`` lists steps admission skipped.
    """

    @property
    def failures(self) -> dict[str, Attempt]:
        last: dict[str, Attempt] = {}
        for attempt in self.receipt.attempts:
            last[attempt.provider] = attempt
        return last

    @property
    def providers(self) -> tuple[str, ...]:
        """Providers tried, in the order they were first tried."""
        return tuple(self.failures)


class DeadlineExceeded(RoutingError):
    """The request's time budget ran out before any step succeeded; no further attempt
    was started. Distinct from AllProvidersFailed: untried steps may be healthy."""

    def __init__(self, message: str, *, receipt: Receipt, deadline_s: float) -> None:
        super().__init__(message, receipt=receipt)
        self.deadline_s = deadline_s


class NoEligibleRoute(RoutingError):
    """No step of the chain was admissible for this request, so nothing was attempted.

    This is a refusal (the request's contract, breakers or ``allow_fallback=False`` ruled
    every step out), never an outage. ``reasons`` maps each step to why it was refused.
    """

    @property
    def reasons(self) -> dict[Step, str]:
        return dict(self.receipt.refused)


class OutcomeUnknown(RoutingError):
    """A request with side effects was sent and its outcome is unknown (timeout after
    dispatch, or a dropped connection); the provider may have acted, so the router stopped
    rather than risk doing it twice. ``attempt`` is the attempt whose outcome is unknown."""

    @property
    def attempt(self) -> Attempt:
        return self.receipt.attempts[-1]


class StreamInterrupted(RoutingError):
    """A streamed request broke after its commit point: the caller already holds ``chunks``
    chunks from ``provider``, so falling back would show a second answer; nothing else was
    tried. Never a success: the stream was cut short (the connection broke, a bound between
    chunks or the request's deadline passed, or it ended without the provider's terminal
    event). ``attempt`` is the interrupted attempt; the receipt lists every attempt."""

    def __init__(self, message: str, *, receipt: Receipt, chunks: int, provider: str, model: str) -> None:
        super().__init__(message, receipt=receipt)
        self.chunks = chunks
        self.provider = provider
        self.model = model

    @property
    def attempt(self) -> Attempt:
        return self.receipt.attempts[-1]


class VerificationFailed(RoutingError):
    """A request with side effects was answered, and the answer failed ``verify``.

    The provider acted, so trying another one could act twice: the router stopped.
    ``attempt`` is the answered attempt (its ``error`` says how ``verify`` turned it down).
    """

    @property
    def attempt(self) -> Attempt:
        return self.receipt.attempts[-1]


__all__ = [
    "AllProvidersFailed",
    "ChainClientError",
    "ContentPolicyRefusal",
    "ContextLengthExceeded",
    "ContentPolicyRejected",
    "DeadlineExceeded",
    "NoEligibleRoute",
    "OutcomeUnknown",
    "ProviderError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RequestRejected",
    "RoutingError",
    "StreamInterrupted",
    "TransportError",
    "VerificationFailed",
]
