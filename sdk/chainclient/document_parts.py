"""The parts a chain document carries beside its chain, each parsed from JSON and checked.

The chain's default preset (``DefaultChain``: what a pin falls back to at its expiry), the
served preset's failure policy (``FailurePolicy``), the failover drill running on the chain
(``Drill``) and the control plane's signature (``DocumentSignature``); and the RFC 3339
times a document's instants are written in (``parse_time``). A part this client cannot
apply raises ``DocumentInvalid``; the document (``types.ChainDocument``) says whether that
ignores the part or refuses the whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeGuard

from chainclient.steps import DocumentInvalid, Step
from chainclient.wire import (
    DRILL_FAULTS,
    DRILL_SHARE_MAX_BP,
    DRILL_SHARE_MIN_BP,
    FAILURE_POLICY_BOUND_MAX_MS,
    FAILURE_POLICY_BOUND_MIN_MS,
    FAILURE_POLICY_COMMITS,
    FAILURE_POLICY_RETRY_MAX_WAIT_MS,
)

NO_MARKING: Mapping[str, Any] = {"degraded": False, "note": ""}

# RFC 3339 as the control plane writes it ("2026-11-29T06:03:04.123Z"; older servers omit
# the milliseconds). Parsed by hand: Python 3.10's fromisoformat refuses the "Z", and 3.11
# accepts forms 3.10 does not, so a document must not be valid on one and not the other.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def environment_refusal(document: Mapping[str, Any], environment: str | None) -> str | None:
    """Why a client that applies only ``environment``'s documents (None: any) refuses
    ``document`` (its ``environment`` field, signed); None when it does not."""
    named = document.get("environment")
    if environment is None or named == environment:
        return None
    return (
        f"document is of the {named!r} environment, not {environment!r}: "
        "point the client at that environment's documents"
    )


def parse_time(text: str) -> float:
    """Epoch seconds of an RFC 3339 time with a zone; ValueError if it is not one."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time with a time zone")
    year, month, day, hour, minute, second, fraction, zulu, sign, zone_h, zone_m = match.groups()
    offset = timedelta(0)
    if not zulu:
        offset = timedelta(hours=int(zone_h), minutes=int(zone_m))
        if sign == "-":
            offset = -offset
    moment = datetime(
        int(year),
        int(month),
        int(day),
        int(hour),
        int(minute),
        int(second),
        int((fraction or "0").ljust(6, "0")),
        tzinfo=timezone(offset),
    )
    return moment.timestamp()


@dataclass(frozen=True)
class FailurePolicy:
    """What the routers do on a failure for a preset's callers, reviewed with the presets
    and carried by the chain document (``failure_policy``); a call's own arguments override
    it. ``commit``: when a stream's chunks start to reach the caller, at its first chunk
    with content (``first_chunk``) or once the whole answer came (``complete``: a stream cut,
    stalled or malformed before its end falls back to the next step). ``first_chunk_ms`` and
    ``idle_ms``: a stream's bounds (None: the step's timeout). ``retry_max_wait_ms``: retry a
    429, 500, 503 or 529 (or a refused connection) once on the same step, waiting its
    ``Retry-After`` if it is no longer than this; None: no same-step retry."""

    commit: str = "first_chunk"
    first_chunk_ms: int | None = None
    idle_ms: int | None = None
    retry_max_wait_ms: int | None = None

    @classmethod
    def from_json(cls, data: Any, where: str = "failure_policy") -> FailurePolicy:
        """The document's policy object; DocumentInvalid naming what is wrong (the caller
        ignores such a policy: the document stays valid). Keys it leaves out take their
        defaults, and keys this client does not know are ignored (a newer server's)."""
        if not isinstance(data, dict):
            raise DocumentInvalid(f"{where} must be an object, got {type(data).__name__}")
        commit = data.get("commit", FAILURE_POLICY_COMMITS[0])
        if commit not in FAILURE_POLICY_COMMITS:
            raise DocumentInvalid(f"{where}.commit {json.dumps(commit)} is not one this client knows")
        bounds = []
        for key in ("first_chunk_ms", "idle_ms"):
            value = data.get(key)
            if value is not None and not (
                _whole(value) and FAILURE_POLICY_BOUND_MIN_MS <= value <= FAILURE_POLICY_BOUND_MAX_MS
            ):
                raise DocumentInvalid(
                    f"{where}.{key} must be null or an integer within "
                    f"{FAILURE_POLICY_BOUND_MIN_MS}..{FAILURE_POLICY_BOUND_MAX_MS}"
                )
            bounds.append(value)
        retry = data.get("retry_same_step")
        wait = None
        if retry is not None:
            wait = retry.get("max_wait_ms") if isinstance(retry, dict) else None
            if not (_whole(wait) and 0 <= wait <= FAILURE_POLICY_RETRY_MAX_WAIT_MS):
                raise DocumentInvalid(
                    f"{where}.retry_same_step must be null or an object whose max_wait_ms is an integer within "
                    f"0..{FAILURE_POLICY_RETRY_MAX_WAIT_MS}"
                )
        return cls(commit, bounds[0], bounds[1], wait)

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "first_chunk_ms": self.first_chunk_ms,
            "idle_ms": self.idle_ms,
            "retry_same_step": {"max_wait_ms": self.retry_max_wait_ms} if self.retry_max_wait_ms is not None else None,
        }

    def describe(self) -> str:
        """The policy in words, as a receipt names it."""
        parts = [f"commit {self.commit}"]
        if self.first_chunk_ms is not None:
            parts.append(f"first chunk within {self.first_chunk_ms} ms")
        if self.idle_ms is not None:
            parts.append(f"idle at most {self.idle_ms} ms")
        if self.retry_max_wait_ms is not None:
            parts.append(f"retry the same step once (Retry-After up to {self.retry_max_wait_ms} ms)")
        return ", ".join(parts)


@dataclass(frozen=True)
class DefaultChain:
    """The chain's default preset, carried by every document: what a pin falls back to
    at its expiry, even when the control plane cannot be reached then, with its failure
    policy (None: none, or one this client cannot apply)."""

    preset: str
    chain: tuple[Step, ...]
    marking: Mapping[str, Any] = field(default_factory=lambda: dict(NO_MARKING))
    failure_policy: FailurePolicy | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "chain": [s.to_json() for s in self.chain],
            "marking": dict(self.marking),
            **({"failure_policy": self.failure_policy.to_json()} if self.failure_policy is not None else {}),
        }


@dataclass(frozen=True)
class DocumentSignature:
    """The control plane's signature of a document, as the document carries it.

    ``key_id`` names the key it was made with, ``signed_at`` when (RFC 3339), ``value`` the
    64-byte Ed25519 signature in base64url. Carried means verified only for a client given
    ``trusted_keys`` (``chainclient.signatures``); what it covers is
    ``chainclient.wire.signed_content``.
    """

    alg: str
    key_id: str
    signed_at: str
    value: str

    @classmethod
    def from_json(cls, data: Any) -> DocumentSignature | None:
        """The signature object's fields, or None when it has not their shape (a client
        that verifies refuses such a document; one that does not ignores the field)."""
        if not isinstance(data, dict):
            return None
        alg, key_id, signed_at, value = (data.get(name) for name in ("alg", "key_id", "signed_at", "value"))
        if isinstance(alg, str) and isinstance(key_id, str) and isinstance(signed_at, str) and isinstance(value, str):
            return cls(alg, key_id, signed_at, value)
        return None


@dataclass(frozen=True)
class Drill:
    """A failover drill, as the chain document carries it while it runs: ``share_bp`` of the
    requests that reach step ``hop`` (1-based, never the chain's last) get ``fault`` injected
    there, before dispatch, from ``starts_at`` to ``ends_at`` (wall clock; ``starts_at_s``
    and ``ends_at_s`` are them in epoch seconds, parsed once). ``services``: the digests of
    the services taking part (``wire.drill_service_digest``), empty for every service."""

    id: int
    hop: int
    fault: str
    share_bp: int
    services: tuple[str, ...]
    starts_at: str
    ends_at: str
    starts_at_s: float = field(default=0.0, init=False, repr=False, compare=False)
    ends_at_s: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Parsed once here, not per request: the router compares them with the clock.
        object.__setattr__(self, "starts_at_s", _drill_instant("starts_at", self.starts_at))
        object.__setattr__(self, "ends_at_s", _drill_instant("ends_at", self.ends_at))
        if not self.starts_at_s < self.ends_at_s:
            raise DocumentInvalid("drill.ends_at must be after drill.starts_at")

    def active(self, now_wall: float) -> bool:
        """Whether the drill injects at ``now_wall`` (epoch seconds): from its start, until
        its end (a client stops on its own then, whether it polls again or not)."""
        return self.starts_at_s <= now_wall < self.ends_at_s

    @classmethod
    def from_json(cls, data: Any, *, steps: int) -> Drill:
        """The document's ``drill`` for a chain of ``steps`` steps; DocumentInvalid naming
        what is wrong (the caller ignores such a drill: the document stays valid)."""
        if not isinstance(data, dict):
            raise DocumentInvalid(f"'drill' must be an object, got {type(data).__name__}")
        drill_id, hop, fault, share_bp, services = (data.get(k) for k in ("id", "hop", "fault", "share_bp", "services"))
        if not _whole(drill_id) or drill_id < 1:
            raise DocumentInvalid("drill.id must be a positive integer")
        if not _whole(hop) or not 1 <= hop < steps:
            raise DocumentInvalid(
                f"drill.hop must be a step of the chain but its last (1..{steps - 1}), got {json.dumps(hop)}"
            )
        if not isinstance(fault, str) or fault not in DRILL_FAULTS:
            shown = repr(fault) if isinstance(fault, str) else json.dumps(fault)
            raise DocumentInvalid(f"drill.fault {shown} is not one this client knows")
        if not _whole(share_bp) or not DRILL_SHARE_MIN_BP <= share_bp <= DRILL_SHARE_MAX_BP:
            raise DocumentInvalid(
                f"drill.share_bp must be an integer within {DRILL_SHARE_MIN_BP}..{DRILL_SHARE_MAX_BP}"
            )
        if not isinstance(services, list) or not all(isinstance(digest, str) for digest in services):
            raise DocumentInvalid("drill.services must be a list of strings")
        starts_at, ends_at = data.get("starts_at"), data.get("ends_at")
        if not isinstance(starts_at, str):
            raise DocumentInvalid("drill.starts_at must be a string")
        if not isinstance(ends_at, str):
            raise DocumentInvalid("drill.ends_at must be a string")
        return cls(drill_id, hop, fault, share_bp, tuple(services), starts_at, ends_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hop": self.hop,
            "fault": self.fault,
            "share_bp": self.share_bp,
            "services": list(self.services),
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
        }


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _drill_instant(key: str, text: str) -> float:
    try:
        return parse_time(text)
    except (ValueError, OverflowError) as exc:
        raise DocumentInvalid(f"drill.{key}: {exc}") from None


__all__ = ["NO_MARKING", "DefaultChain", "DocumentSignature", "Drill", "FailurePolicy", "parse_time"]
