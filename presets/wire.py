# Generated from sdk/chainclient/wire.py by `make wire`: edit that file, then run `make wire`.
"""What the control plane and chainclient must agree on, written once: the chain document's
step rules, the long poll's longest wait, the usage report's health section (its outcome
classes, latency and time-to-first-chunk histograms and size), and failover drills (their
faults, share bounds and report cadence).

This file is the one source. The control plane holds a generated copy (``presets/wire.py``,
written by ``make wire``; the suite fails when the two differ), so the server never imports
the SDK. Standard library only: plain constants, and the functions both sides must compute
alike (the bytes a document's signature covers, and the digest naming a service a
failover drill takes part in).
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

CHAIN_MIN_STEPS = 1
CHAIN_MAX_STEPS = 4
"""How many steps a chain (a preset) has."""

STEP_MIN_TIMEOUT_MS = 500
STEP_MAX_TIMEOUT_MS = 120_000
"""The bounds of a step's ``timeout_ms``."""

MAX_WAIT_S = 60
"""The longest long poll (``?wait=``), in seconds."""

OUTCOME_CLASSES = (
    "served",
    "rejected",
    "credentials",
    "rate_limited",
    "server_error",
    "timeout",
    "unknown",
    "content_policy",
    "unavailable",
    "verify_failed",
    "interrupted",
    "other",
)
"""How an attempt ended, as the usage report counts it, in this order. ``interrupted``: a
streamed attempt that broke after chunks had reached the caller (so nothing else could be
tried); the control plane counts it as the provider's failure."""

LATENCY_BOUNDS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 30000)
"""Upper bounds (inclusive) of the served-latency buckets; one more bucket counts the rest.
A step's time-to-first-chunk histogram (``first_chunk_ms``, streamed attempts only) uses the
same buckets."""


def latency_percentile(histogram: Sequence[int], share: float) -> int | None:
    """The upper bound (ms) of the bucket holding the ``share`` quantile of a histogram over
    ``LATENCY_BOUNDS_MS`` (the overflow bucket reads as the highest bound); None without data.
    The control plane's health and drill reports and the testing kit's drill report read
    their p50 and p95 with it."""
    total = sum(histogram)
    if not total:
        return None
    wanted, seen = share * total, 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= wanted:
            return LATENCY_BOUNDS_MS[min(index, len(LATENCY_BOUNDS_MS) - 1)]
    return LATENCY_BOUNDS_MS[-1]


TOKEN_FIELDS = ("input_tokens", "output_tokens", "served_with_tokens")
"""A usage report's step says the tokens its attempts used with these counts, when one of
them said any: input and output tokens summed over the attempts that said them, and how many
served attempts said both. The control plane counts a step's other served attempts (and every
served attempt of a step without them) as unknown, never as zero tokens."""

REPORT_MAX_STEPS = 50
"""The most steps (provider and model) one usage report's health section may name."""

REPORT_MAX_PROVIDERS = 50
"""The most providers one usage report may name (served counts, breaker openings)."""

SIGNATURE_ALGORITHM = "ed25519"
"""How chain documents are signed (``signature.alg``)."""

SIGNATURE_CONTEXT = b"chainclient-document/1\n"
"""Prefixed to what a document's signature covers, so a signature over a document can never
be taken for one over anything else."""


def signed_content(document: Mapping[str, Any]) -> bytes:
    """The bytes a chain document's signature covers: ``SIGNATURE_CONTEXT``, then the whole
    document (every field, the ``signature`` object's ``alg``, ``key_id`` and ``signed_at``
    included, its ``value`` left out) as canonical JSON: keys sorted at every level, no
    spaces, non-ASCII escaped. Documents hold no floats, so the encoding is exact."""
    signature = document.get("signature")
    covered = {key: value for key, value in signature.items() if key != "value"} if isinstance(signature, dict) else {}
    content = {**document, "signature": covered}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return SIGNATURE_CONTEXT + canonical.encode("ascii")


FAILURE_POLICY_COMMITS = ("first_chunk", "complete")
"""A failure policy's ``commit``: when a stream's chunks start to reach the caller. At its
first chunk with content (``first_chunk``, a service streaming to a person), or once the
provider's whole answer came (``complete``: a summary, a tool call, a batch job; a stream cut,
stalled or malformed before its end falls back to the next step like any failure before the
commit point)."""

FAILURE_POLICY_BOUND_MIN_MS = STEP_MIN_TIMEOUT_MS
FAILURE_POLICY_BOUND_MAX_MS = STEP_MAX_TIMEOUT_MS
"""The bounds of a failure policy's ``first_chunk_ms`` and ``idle_ms``: a step's timeout's."""

FAILURE_POLICY_RETRY_MAX_WAIT_MS = 10_000
"""The most a failure policy's same-step retry may wait (``retry_same_step.max_wait_ms``):
past it the next step is the faster way to an answer."""


DRILL_FAULTS = (
    "server_error",
    "rate_limited",
    "timeout",
    "first_chunk_late",
    "stream_cut_before_first_chunk",
    "invalid_answer",
)
"""The faults a failover drill injects (the chain document's ``drill.fault``), in this order."""

DRILL_FAULT_WORDS = {
    "server_error": "a server error (HTTP 500)",
    "rate_limited": "rate limiting (HTTP 429)",
    "timeout": "no answer (a timeout)",
    "first_chunk_late": "a first chunk too late",
    "stream_cut_before_first_chunk": "a stream cut before its first chunk",
    "invalid_answer": "an empty or invalid answer",
}
"""Each fault in words, as the control plane's pages and reports and the testing kit's
report describe a drill."""

DRILL_SHARE_MIN_BP = 10
DRILL_SHARE_MAX_BP = 2500
"""The bounds of a drill's ``share_bp``: the share of requests drilled, in basis points
(hundredths of a percent): 0.1 % to 25 %."""

DRILL_MAX_MINUTES = 60
"""The longest drill window, in minutes."""

DRILL_REPORT_INTERVAL_S = 10
"""While a client takes part in a drill it reports at least this often (its usage report's
``drill`` section, even with nothing counted: that is how the control plane knows it takes
part), and once within this after the drill's end. Ten seconds: the stop conditions act
within seconds of a failing fallback, and an instance stays within its usage reports' limit
per minute (USAGE_REPORTS_PER_INSTANCE_PER_MINUTE, 8: six drill reports and its minute's)."""

DRILL_SERVICE_CONTEXT = b"chainclient-drill/1\n"
"""Prefixed to what a drilled service's digest covers (``drill_service_digest``)."""


def drill_service_digest(drill_id: int, token_sha256_hex: str) -> str:
    """How a drill names a service it drills without naming its token: the SHA-256 (hex) of
    ``DRILL_SERVICE_CONTEXT``, the drill's id, a newline and the SHA-256 (hex) of the
    service's token (the control plane's stored hash; a client hashes its own token)."""
    content = DRILL_SERVICE_CONTEXT + f"{drill_id}\n{token_sha256_hex}".encode("ascii")
    return hashlib.sha256(content).hexdigest()
