"""Failover drills in the client: which requests a router drills, whether a service takes
part, what the routers tell their client about the requests routed while a drill is active
(the usage report's ``drill`` section), and how a drill's result is judged.

A drill makes a share of the chain's requests fail on purpose at one hop, before dispatch
(the hop gets no call), so the fallback to the next hop is proven on live traffic. The
document carries it while it runs (``types.Drill``, parsed with the document); the routers
inject it (``drill_injection``, asked by ``routing.RouterCore``: ``_begin`` whether a request
is routed in an active drill, ``_turn`` whether it is drilled at the hop; ``_settle`` records
the fault instead of a call); a ``ChainClient`` tallies what they tell it (``DrillTally``)
and reports it. ``verdict`` is the control plane's rule (``audit.drills``, which repeats it: the server
never imports the SDK), and the percentiles and the faults' words are the wire's
(``wire.latency_percentile``, ``wire.DRILL_FAULT_WORDS``, which the server's copy shares), so
``chainclient.testing.run_drill`` judges and describes a drill run in CI as the control plane
does one on live traffic. Standard library only.
"""

from __future__ import annotations

import hashlib
import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from chainclient.health import LATENCY_BOUNDS_US
from chainclient.receipts import Outcome
from chainclient.types import Drill, Step
from chainclient.wire import DRILL_FAULT_WORDS, LATENCY_BOUNDS_MS, drill_service_digest

INJECTED: dict[str, tuple[Outcome, int | None]] = {
    "server_error": ("failed", 500),
    "rate_limited": ("failed", 429),
    "timeout": ("timeout", None),
    "first_chunk_late": ("timeout", None),
    "stream_cut_before_first_chunk": ("failed", None),
    "invalid_answer": ("verify_failed", None),
}
"""What a drilled attempt's receipt says, per fault: its outcome and HTTP status."""

WAITING_FAULTS = frozenset({"timeout", "first_chunk_late"})
"""The faults that cost what the real one costs: the attempt's timeout passes before the
walk moves on."""

MIN_FALLBACK_ATTEMPTS = 20
MAX_FALLBACK_ERROR_BP = 1000
"""A drill fails when the fallback hop failed more than 10 % (in basis points) of the drilled
requests' attempts on it, once there are at least 20 (a few failures of the first attempts
are no rate): the control plane's default stop condition."""


def drilled_at(n: int, share_bp: int) -> bool:
    """Whether request number ``n`` (0-based, among the requests that reached the drilled
    hop) is drilled: over any window of requests the share is exact to one request."""
    return (n + 1) * share_bp // 10000 != n * share_bp // 10000


def takes_part_in(drill: Drill, token_sha256_hex: str | None) -> bool:
    """Whether the service whose token hashes to ``token_sha256_hex`` takes part in
    ``drill``: every service when it names none, else those it names by their digest; a
    client without a token (``None``: published copies) only in a drill of every service."""
    if not drill.services:
        return True
    return token_sha256_hex is not None and drill_service_digest(drill.id, token_sha256_hex) in drill.services


class TakingPart:
    """``takes_part_in`` for the service holding ``token``: worked out once per drill id and
    services (the digest included), then read."""

    def __init__(self, token: str | None) -> None:
        # The token's SHA-256, as the control plane stores it: a drill names the services
        # taking part by digests of it (``wire.drill_service_digest``). Hashed once.
        self._token_sha256 = hashlib.sha256(token.encode()).hexdigest() if token else None
        self._known: tuple[int, tuple[str, ...], bool] | None = None

    def __call__(self, drill: Drill) -> bool:
        known = self._known
        if known is not None and known[0] == drill.id and known[1] == drill.services:
            return known[2]
        part = takes_part_in(drill, self._token_sha256)
        self._known = (drill.id, drill.services, part)
        return part


class DrillRequest(NamedTuple):
    """How one request routed while a drill was active ended, as a router tells its source
    (``record_drill(drill, request)``)."""

    drilled: bool
    """A fault was injected at the drilled hop."""
    ended_on: int | None
    """The 1-based step of the chain that served it, for a drilled request; None when it
    failed, and for a request not drilled (the report counts drilled requests' only)."""
    error: str | None
    """The name of the RoutingError it ended with (``DeadlineExceeded``, ``NoEligibleRoute``,
    ...); None when it was served."""
    fallback_attempts: int
    fallback_failures: int
    """Attempts on step ``hop + 1`` (0 or 1), and those of them that did not serve; drilled
    requests only."""
    elapsed_s: float
    """The whole request's duration, on the router's clock."""


def _histogram() -> list[int]:
    return [0] * (len(LATENCY_BOUNDS_MS) + 1)


@dataclass
class DrillCounts:
    """What the routers recorded of one drill: the usage report's ``drill`` section's counts."""

    requests: int = 0
    drilled: int = 0
    ended_on: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    deadline: int = 0
    refusals: int = 0
    fallback_attempts: int = 0
    fallback_failures: int = 0
    latency_drilled: list[int] = field(default_factory=_histogram)
    latency_other: list[int] = field(default_factory=_histogram)

    def add(self, request: DrillRequest, bucket: int) -> None:
        """Count one drilled request, whose duration falls in latency bucket ``bucket``."""
        self.requests += 1
        self.drilled += 1
        self.latency_drilled[bucket] += 1
        if request.ended_on is not None:
            self.ended_on[request.ended_on] = self.ended_on.get(request.ended_on, 0) + 1
        if request.error is not None:
            self.failed += 1
            if request.error == "DeadlineExceeded":
                self.deadline += 1
            elif request.error == "NoEligibleRoute":
                self.refusals += 1
        self.fallback_attempts += request.fallback_attempts
        self.fallback_failures += request.fallback_failures

    def merge(self, other: DrillCounts) -> None:
        """Add ``other``'s counts to these."""
        for name in ("requests", "drilled", "failed", "deadline", "refusals", "fallback_attempts", "fallback_failures"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for step, count in other.ended_on.items():
            self.ended_on[step] = self.ended_on.get(step, 0) + count
        self.latency_drilled = [a + b for a, b in zip(self.latency_drilled, other.latency_drilled, strict=True)]
        self.latency_other = [a + b for a, b in zip(self.latency_other, other.latency_other, strict=True)]

    def section(self, drill_id: int) -> dict[str, Any]:
        """The usage report's ``drill`` value for drill ``drill_id``."""
        return {
            "id": drill_id,
            "requests": self.requests,
            "drilled": self.drilled,
            "ended_on": {str(step): count for step, count in sorted(self.ended_on.items())},
            "failed": self.failed,
            "deadline": self.deadline,
            "refusals": self.refusals,
            "fallback_attempts": self.fallback_attempts,
            "fallback_failures": self.fallback_failures,
            "latency_ms": {"drilled": list(self.latency_drilled), "other": list(self.latency_other)},
        }


MAX_DRILLS = 8
"""The most drills whose counts a tally keeps at once (a document carries one)."""


class DrillTally:
    """What the routers recorded per drill since the last accepted report; thread-safe.

    It follows the usage report's life, as the health tally does: ``take`` swaps a drill's
    counts out for a report, ``put_back`` merges them back when the report failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[int, DrillCounts] = {}

    def record(self, drill_id: int, request: DrillRequest) -> None:
        """Count one request routed while drill ``drill_id`` was active. Every request in a
        drill's window pays this, so a request not drilled is two additions under the lock."""
        bucket = bisect_left(LATENCY_BOUNDS_US, int(request.elapsed_s * 1_000_000.0 + 0.5))  # health.latency_bucket
        with self._lock:
            counts = self._counts.get(drill_id)
            if counts is None:
                if len(self._counts) >= MAX_DRILLS:
                    return
                counts = self._counts[drill_id] = DrillCounts()
            if request.drilled:
                counts.add(request, bucket)
            else:
                counts.requests += 1
                counts.latency_other[bucket] += 1

    def pending(self) -> list[int]:
        """The drills with counts not yet reported, oldest first."""
        with self._lock:
            return list(self._counts)

    def take(self, drill_id: int) -> DrillCounts:
        """Drill ``drill_id``'s counts (all zero when none), removed from the tally."""
        with self._lock:
            return self._counts.pop(drill_id, None) or DrillCounts()

    def put_back(self, drill_id: int, taken: DrillCounts) -> None:
        """Merge a batch whose report failed with what was recorded since it was taken."""
        with self._lock:
            since = self._counts.get(drill_id)
            if since is not None:
                taken.merge(since)
            elif len(self._counts) >= MAX_DRILLS:
                return
            self._counts[drill_id] = taken


class _NoDrillTally(DrillTally):
    """The tally of a client that sends no usage reports: it counts nothing."""

    def record(self, drill_id: int, request: DrillRequest) -> None:
        return

    def put_back(self, drill_id: int, taken: DrillCounts) -> None:
        return


NO_DRILL_TALLY: DrillTally = _NoDrillTally()


def verdict(counts: DrillCounts, *, hop: int) -> tuple[str, list[str]]:
    """``("passed" | "failed", reasons)`` for a drill on ``hop`` that counted ``counts``:
    failed when a drilled request failed for the caller, when the fallback hop failed more
    than 10 % of at least 20 attempts, or when no request was drilled (nothing was proven)."""
    reasons = []
    if counts.failed > 0:
        missed = f", {counts.deadline} missing their deadline" if counts.deadline else ""
        reasons.append(f"{counts.failed} drilled request(s) failed for the caller{missed}")
    else:
        attempts, failures = counts.fallback_attempts, counts.fallback_failures
        if attempts >= MIN_FALLBACK_ATTEMPTS and failures * 10000 > MAX_FALLBACK_ERROR_BP * attempts:
            reasons.append(
                f"the fallback hop {hop + 1} failed {failures} of {attempts} drilled requests' attempts "
                f"({100 * failures / attempts:.1f} %, above the {MAX_FALLBACK_ERROR_BP / 100:g} % it allows)"
            )
    if counts.drilled == 0:
        reasons.append("no request was drilled: nothing was proven")
    if reasons:
        return "failed", reasons
    return "passed", [
        f"all {counts.drilled} drilled request(s) were served by the fallback ({counts.drilled} served, none failed "
        "for the caller)"
    ]


def describe(drill: Drill, chain: Sequence[Step]) -> str:
    """One line: "hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of
    requests"."""
    where = f" ({chain[drill.hop - 1]})" if 0 < drill.hop <= len(chain) else ""
    return (
        f"hop {drill.hop}{where} fails with {DRILL_FAULT_WORDS.get(drill.fault, drill.fault)} for "
        f"{drill.share_bp / 100:g} % of requests"
    )


__all__ = [
    "INJECTED",
    "MAX_FALLBACK_ERROR_BP",
    "MIN_FALLBACK_ATTEMPTS",
    "NO_DRILL_TALLY",
    "WAITING_FAULTS",
    "DrillCounts",
    "DrillRequest",
    "DrillTally",
    "TakingPart",
    "describe",
    "drilled_at",
    "takes_part_in",
    "verdict",
]
