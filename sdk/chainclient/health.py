"""Provider health from the fleet: how each step's attempts ended, how long the served ones
took, how soon streamed ones sent their first chunk, the tokens the provider said they used,
and how often each provider's circuit breaker opened, for the usage report.

The router tells its source about every attempt it settles (``record_attempt``) and every
breaker it opens (``record_breaker_opened``); a ``ChainClient`` tallies them here and its
usage thread sends them as the report's ``"health"`` key. Only counts leave the process:
the provider, the model, an outcome class, latency buckets and token counts, never request
content. Tokens are the sums the attempts' receipts carry (``Attempt.input_tokens``, taken by
the adapters from the libraries' usage fields, streams included), with the number of served
attempts that said both (``served_with_tokens``): the control plane counts the rest of the
served attempts as unknown, never as zero.
Latencies go into a fixed histogram (``LATENCY_BOUNDS_MS``), as do times to a stream's first
chunk (the same buckets), so the control plane merges the fleet's reports by adding them up.

The tally follows the usage report's life: ``take()`` swaps out what was recorded, a report
that fails is merged back with ``put_back()`` and sent later, so nothing is lost and
nothing is counted twice.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from chainclient.outcomes import CREDENTIAL_STATUSES
from chainclient.receipts import Attempt
from chainclient.wire import LATENCY_BOUNDS_MS, OUTCOME_CLASSES, REPORT_MAX_PROVIDERS, REPORT_MAX_STEPS

# The bounds in whole microseconds: a latency is compared as an integer, rounded, so a
# clock's float noise cannot move an attempt that took exactly 100 ms into the next bucket
# (and an integer rounding is a third of the cost of round(ms, 3) on the attempt's path).
LATENCY_BOUNDS_US = tuple(bound * 1000 for bound in LATENCY_BOUNDS_MS)

# The control plane refuses a report naming more (REPORT_MAX_STEPS, REPORT_MAX_PROVIDERS);
# new keys past the caps are dropped, as record_served drops new providers past its own.

# Outcomes whose class does not depend on the status; a "failed" attempt's does.
_BY_OUTCOME = {
    "ok": "served",
    "rejected": "rejected",
    "refused": "content_policy",
    "timeout": "timeout",
    "unavailable": "unavailable",
    "verify_failed": "verify_failed",
    "interrupted": "interrupted",  # a stream that broke after chunks had reached the caller
    "error": "unknown",  # an unexpected exception: nobody knows what happened
}


def outcome_class(attempt: Attempt) -> str:
    """The class (one of ``OUTCOME_CLASSES``) the usage report counts ``attempt`` under."""
    outcome = attempt.outcome
    if outcome != "failed":
        return _BY_OUTCOME.get(outcome, "other")
    status = attempt.status
    if status is None:
        return "unknown"  # sent, and no answer came back
    if status in CREDENTIAL_STATUSES:
        return "credentials"
    if status == 429:
        return "rate_limited"
    if 500 <= status <= 599:
        return "server_error"
    return "other"


def latency_bucket(elapsed_s: float) -> int:
    """The histogram bucket of a served attempt that took ``elapsed_s`` seconds (or of a
    stream whose first chunk came after ``elapsed_s``): bucket i counts latencies in
    (bounds[i-1], bounds[i]] ms, the last one those past 30 s."""
    return bisect_left(LATENCY_BOUNDS_US, int(elapsed_s * 1_000_000.0 + 0.5))


def _histogram() -> list[int]:
    return [0] * (len(LATENCY_BOUNDS_MS) + 1)


@dataclass
class StepHealth:
    """One (provider, model)'s counts: attempts per outcome class, served latencies, and the
    time to the first chunk of every streamed attempt that had one (whatever its outcome)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    latency_ms: list[int] = field(default_factory=_histogram)
    first_chunk_ms: list[int] = field(default_factory=_histogram)
    input_tokens: int = 0
    output_tokens: int = 0
    served_with_tokens: int = 0
    """Served attempts whose input and output tokens are both in the sums."""
    tokens_reported: bool = False
    """An attempt said its tokens (a served one, or one that failed after using some)."""

    def add(self, other: StepHealth) -> None:
        for kind, count in other.outcomes.items():
            self.outcomes[kind] = self.outcomes.get(kind, 0) + count
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.served_with_tokens += other.served_with_tokens
        self.tokens_reported = self.tokens_reported or other.tokens_reported
        self.latency_ms = [mine + theirs for mine, theirs in zip(self.latency_ms, other.latency_ms, strict=True)]
        self.first_chunk_ms = [
            mine + theirs for mine, theirs in zip(self.first_chunk_ms, other.first_chunk_ms, strict=True)
        ]

    def report(self, provider: str, model: str) -> dict[str, Any]:
        """This step's entry in the report's ``"steps"``, with ``first_chunk_ms`` only when
        one of its attempts streamed a chunk and the token counts only when one of them said
        its tokens: a step that never streamed (or never said) reads as it did before."""
        entry: dict[str, Any] = {
            "provider": provider,
            "model": model,
            # Only the classes that happened, in OUTCOME_CLASSES order.
            "outcomes": {kind: self.outcomes[kind] for kind in OUTCOME_CLASSES if self.outcomes.get(kind)},
            "latency_ms": list(self.latency_ms),
        }
        if any(self.first_chunk_ms):
            entry["first_chunk_ms"] = list(self.first_chunk_ms)
        if self.tokens_reported:
            entry["input_tokens"] = self.input_tokens
            entry["output_tokens"] = self.output_tokens
            entry["served_with_tokens"] = self.served_with_tokens
        return entry


@dataclass
class HealthCounts:
    """A batch of counts taken from the tally for one usage report."""

    steps: dict[tuple[str, str], StepHealth] = field(default_factory=dict)
    breaker_openings: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.steps and not self.breaker_openings

    def body(self) -> dict[str, Any] | None:
        """The usage report's ``"health"`` value; None when there is nothing to say."""
        if self.empty:
            return None
        return {
            "latency_bounds_ms": list(LATENCY_BOUNDS_MS),
            "steps": [step.report(provider, model) for (provider, model), step in self.steps.items()],
            "breaker_openings": dict(self.breaker_openings),
        }


class HealthTally:
    """What the router told a client since its last accepted report; thread-safe.

    ``record`` is on every attempt's path: one classification, then a lock and a few dict
    operations, never I/O.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, str], StepHealth] = {}
        self._openings: dict[str, int] = {}

    def record(self, attempt: Attempt) -> None:
        """Count one settled attempt under its (provider, model)."""
        kind = outcome_class(attempt)
        bucket = latency_bucket(attempt.elapsed_s) if kind == "served" else -1
        first_chunk_s = attempt.first_chunk_s
        first = latency_bucket(first_chunk_s) if first_chunk_s is not None else -1
        input_tokens, output_tokens = attempt.input_tokens, attempt.output_tokens  # checked: ``token_count``
        key = (attempt.provider, attempt.model)
        with self._lock:
            steps = self._steps
            step = steps.get(key)
            if step is None:
                if len(steps) >= REPORT_MAX_STEPS:
                    return
                step = steps[key] = StepHealth()
            step.outcomes[kind] = step.outcomes.get(kind, 0) + 1
            if bucket >= 0:
                step.latency_ms[bucket] += 1
            if first >= 0:
                step.first_chunk_ms[first] += 1
            if input_tokens is not None or output_tokens is not None:
                step.tokens_reported = True
                step.input_tokens += input_tokens or 0
                step.output_tokens += output_tokens or 0
                if bucket >= 0 and input_tokens is not None and output_tokens is not None:
                    step.served_with_tokens += 1

    def record_opening(self, provider: str) -> None:
        """Count one opening of ``provider``'s circuit breaker."""
        with self._lock:
            openings = self._openings
            if provider in openings:
                openings[provider] += 1
            elif len(openings) < REPORT_MAX_PROVIDERS:
                openings[provider] = 1

    def take(self) -> HealthCounts:
        """Everything recorded so far, leaving the tally empty (for a report)."""
        with self._lock:
            taken = HealthCounts(self._steps, self._openings)
            self._steps, self._openings = {}, {}
        return taken

    def put_back(self, taken: HealthCounts) -> None:
        """Merge a batch whose report failed with what was recorded since it was taken.

        The batch's keys come first: past the caps, keys first seen since are the ones
        dropped, as they would have been had the batch never been taken."""
        with self._lock:
            steps, openings = taken.steps, taken.breaker_openings
            for key, step in self._steps.items():
                held = steps.get(key)
                if held is not None:
                    held.add(step)
                elif len(steps) < REPORT_MAX_STEPS:
                    steps[key] = step
            for provider, count in self._openings.items():
                if provider in openings:
                    openings[provider] += count
                elif len(openings) < REPORT_MAX_PROVIDERS:
                    openings[provider] = count
            self._steps, self._openings = steps, openings


__all__ = [
    "LATENCY_BOUNDS_MS",
    "REPORT_MAX_STEPS",
    "OUTCOME_CLASSES",
    "HealthCounts",
    "HealthTally",
    "StepHealth",
    "latency_bucket",
    "outcome_class",
]
