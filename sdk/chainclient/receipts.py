"""What a routed request leaves behind: its attempts, its receipt, its result, its alerts.

These are plain records, shared by the routers (which write them) and the routing errors
(which carry them). They depend on nothing but ``types``, so ``errors`` and ``router`` can
both import them without importing each other. ``Answer`` is the one record a transport may
build: a value with the model identity the provider says served it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chainclient.types import Step

DispatchState = Literal["not_dispatched", "dispatched_known", "dispatched_unknown"]
NOT_DISPATCHED: DispatchState = "not_dispatched"
DISPATCHED_KNOWN: DispatchState = "dispatched_known"
DISPATCHED_UNKNOWN: DispatchState = "dispatched_unknown"

Outcome = Literal[
    "ok", "failed", "rejected", "refused", "timeout", "unavailable", "verify_failed", "error", "interrupted"
]
"""How an attempt ended; ``interrupted``: a stream broke after its commit point (chunks had
reached the caller), so nothing else could be tried."""


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
    destination: str = ""
    """Where the request's data went: the provider's ``destination`` in the registry
    (``"unknown"`` when the router has no registry)."""
    model_id: str = ""
    """The resolved model identity: what the provider said served it (a transport returning
    ``Answer(value, model_id=...)``), else ``provider/model``."""
    contract: str = "none"
    """The contract in force for the request (``Contract.identity``)."""
    epoch: int = 0
    version: int = 0
    """The chain document (epoch, version) the attempt's step was taken from."""
    chunks: int | None = None
    """For a streamed request: the chunks this attempt handed to the caller (0 when it
    failed before its commit point); None for ``complete()``."""
    first_chunk_s: float | None = None
    """For a streamed request: seconds from the attempt's start to its first chunk (None when
    no chunk came)."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    """The token usage the provider reported for this attempt, when it did."""
    drill: int | None = None
    """The failover drill whose fault this attempt was (its id): no call was made, the
    outcome was injected (``chainclient.drills``); None for every real attempt."""

    @property
    def step(self) -> str:
        return f"{self.provider}/{self.model}"

    def __str__(self) -> str:
        status = f" HTTP {self.status}" if self.status is not None else ""
        resolved = f" as {self.model_id}" if self.model_id and self.model_id != self.step else ""
        streamed = ""
        if self.chunks is not None:
            first = f", first after {self.first_chunk_s * 1000:.0f} ms" if self.first_chunk_s is not None else ""
            streamed = f", {self.chunks} chunk(s) delivered{first}"
        line = (
            f"{self.attempt_id} {self.provider}/{self.model}{resolved} @ {self.destination or 'unknown'}: "
            f"{self.outcome}{status} ({self.dispatch}, {self.elapsed_s * 1000:.0f} ms of {self.timeout_s:g} s"
            f"{streamed})"
        )
        if self.drill is not None:
            line += f" drill={self.drill}"
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
    epoch: int = 0
    contract: str = "none"
    """The contract in force for the request (``Contract.identity``)."""
    policy: str = ""
    """The failure policy the request was routed under, in words (the preset's, from the
    chain document, and which of its settings the call's own arguments set); "" when the
    document carries none."""

    def __str__(self) -> str:
        version = f"{self.epoch}.{self.version}" if self.epoch else str(self.version)
        lines = [
            f"task {self.task_id} (preset {self.preset!r}, version {version}, contract {self.contract}): "
            f"{len(self.attempts)} attempt(s)"
        ]
        if self.policy:
            lines.append(f"  {self.policy}")
        lines.extend(f"  {attempt}" for attempt in self.attempts)
        lines.extend(f"  skipped {step}: {why}" for step, why in self.refused)
        return "\n".join(lines)


class CarriesReceipt:
    """What results and routing errors share: the request's recovery receipt."""

    receipt: Receipt

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every attempt made for this request, in order."""
        return self.receipt.attempts

    @property
    def task_id(self) -> str:
        return self.receipt.task_id


@dataclass(frozen=True)
class RouteResult(CarriesReceipt):
    """A served request: the value and where it came from, with its recovery receipt."""

    value: Any
    provider: str
    model: str
    marking: Mapping[str, Any]
    receipt: Receipt = field(repr=False)

    @property
    def destination(self) -> str:
        """Where the request's data went to be served (the serving attempt's destination)."""
        return self.receipt.attempts[-1].destination

    @property
    def model_id(self) -> str:
        """The resolved identity of the model that served it (see ``Attempt.model_id``)."""
        return self.receipt.attempts[-1].model_id

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
class Answer:
    """What a transport may return instead of a bare value, to name the model that served.

    Vendors resolve aliases (``large``, ``gpt-4o``) to a dated model and say which in their
    response; ``return Answer(response.text, model_id=response.model)`` puts that identity
    in the attempt's receipt. The router unwraps it: ``RouteResult.value`` and ``verify``
    see ``value``.
    """

    value: Any
    model_id: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Token usage the provider reported, for the attempt's receipt."""


def token_count(tokens: object) -> int | None:
    """A token count a transport or a stream reported, as an attempt keeps it: a whole number
    of at least 0, else None (unknown). Nothing checks a transport's answer, and the usage
    report sums these: the control plane refuses a whole report over one bad count."""
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None


@dataclass(frozen=True)
class CredentialAlert:
    """A provider rejected our credentials (HTTP 401/403): someone must fix the key."""

    provider: str
    model: str
    status: int
    task_id: str
    attempt_id: str
    message: str


__all__ = [
    "DISPATCHED_KNOWN",
    "DISPATCHED_UNKNOWN",
    "NOT_DISPATCHED",
    "Answer",
    "Attempt",
    "CarriesReceipt",
    "CredentialAlert",
    "DispatchState",
    "Outcome",
    "Receipt",
    "RouteResult",
    "token_count",
]
