"""The value types shared by the poller and the router.

They mirror the control plane's chain document (field names are fixed by the API) and
the service's own compiled-in provider registry.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeGuard, TypeVar

from chainclient.wire import (
    CHAIN_MAX_STEPS,
    CHAIN_MIN_STEPS,
    DRILL_FAULTS,
    DRILL_SHARE_MAX_BP,
    DRILL_SHARE_MIN_BP,
    FAILURE_POLICY_BOUND_MAX_MS,
    FAILURE_POLICY_BOUND_MIN_MS,
    FAILURE_POLICY_COMMITS,
    FAILURE_POLICY_RETRY_MAX_WAIT_MS,
    STEP_MAX_TIMEOUT_MS,
    STEP_MIN_TIMEOUT_MS,
)

NO_MARKING: Mapping[str, Any] = {"degraded": False, "note": ""}

# RFC 3339 as the control plane writes it ("2026-11-29T06:03:04.123Z"; older servers omit
# the milliseconds). Parsed by hand: Python 3.10's fromisoformat refuses the "Z", and 3.11
# accepts forms 3.10 does not, so a document must not be valid on one and not the other.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


class DocumentInvalid(ValueError):
    """A chain document that must not be applied; ``str()`` says why."""


@dataclass(frozen=True)
class Step:
    """One place a request may be served from: a provider's model with a timeout."""

    provider: str
    model: str
    timeout_ms: int

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"

    def to_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "timeout_ms": self.timeout_ms}


@dataclass(frozen=True)
class Provider:
    """A provider the service is built to call: where its data goes and its models.
    ``context_windows``: the models' context windows in tokens, where known; a request that
    did not fit one step's window skips the later steps whose window is not larger."""

    destination: str
    models: Mapping[str, frozenset[str] | set[str]] = field(default_factory=dict)
    context_windows: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for model, tokens in self.context_windows.items():
            if model not in self.models:
                raise ValueError(f"context_windows names {model!r}, which is not one of this provider's models")
            if type(tokens) is not int or tokens < 1:
                raise ValueError(f"context_windows[{model!r}] must be a positive number of tokens, got {tokens!r}")

    def capabilities(self, model: str) -> frozenset[str]:
        return frozenset(self.models.get(model, ()))


class Registry:
    """The service's own compiled-in list of providers (model name -> capabilities)."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._providers: dict[str, Provider] = dict(providers)

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def __getitem__(self, name: str) -> Provider:
        return self._providers[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._providers)

    def get(self, name: str) -> Provider | None:
        return self._providers.get(name)

    def validate_steps(self, steps: Iterable[Step]) -> None:
        """Raise DocumentInvalid unless the steps form a chain this service can route."""
        check_steps(steps, self)


def check_steps(steps: Iterable[Step], registry: Registry | None = None) -> None:
    """Raise DocumentInvalid unless ``steps`` form a chain; the one home of the step rules.

    A chain has ``CHAIN_MIN_STEPS..CHAIN_MAX_STEPS`` steps (``chainclient.wire``), each with
    a timeout within its bounds and none twice. With a
    registry every step must also name a provider and model the service is built to call:
    the chain is then one it can route. Without one (a document parsed on its own) only
    the shape is checked. Either way the first problem, in chain order, is reported.
    """
    steps = tuple(steps)
    if not CHAIN_MIN_STEPS <= len(steps) <= CHAIN_MAX_STEPS:
        raise DocumentInvalid(f"a chain has {CHAIN_MIN_STEPS}..{CHAIN_MAX_STEPS} steps, got {len(steps)}")
    seen: set[tuple[str, str]] = set()
    for i, step in enumerate(steps):
        problem = _unknown_to(registry, step) if registry is not None else None
        if problem is None and not STEP_MIN_TIMEOUT_MS <= step.timeout_ms <= STEP_MAX_TIMEOUT_MS:
            problem = f"timeout_ms {step.timeout_ms} is outside {STEP_MIN_TIMEOUT_MS}..{STEP_MAX_TIMEOUT_MS}"
        if problem is not None:
            raise DocumentInvalid(f"chain[{i}]: {problem}")
        if (step.provider, step.model) in seen:
            # Without a registry 0.2.0 named no index here, and callers match on that
            # (``default.chain: duplicate step``, tests/test_client_epoch.py): kept.
            raise DocumentInvalid(
                f"chain[{i}]: duplicate step {step}" if registry is not None else "duplicate step in chain"
            )
        seen.add((step.provider, step.model))


def _unknown_to(registry: Registry, step: Step) -> str | None:
    """Why ``registry`` cannot route ``step``, or None when it can."""
    provider = registry.get(step.provider)
    if provider is None:
        return f"unknown provider {step.provider!r}"
    if step.model not in provider.models:
        return f"unknown model {step.model!r} for provider {step.provider!r}"
    return None


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


@dataclass(frozen=True)
class ChainDocument:
    """The live chain as served by the control plane, plus where this copy came from.

    ``source`` is ``default`` (compiled in, version 0), ``disk`` (last-known-good file)
    or ``live`` (fetched from the control plane). Documents are ordered by ``order``,
    (epoch, version): the epoch is raised after a database restore took versions back.
    ``expires_at_s`` is ``expires_at`` in epoch seconds (None without an expiry).
    ``signature`` is the control plane's signature the document carried (None for an
    unsigned one, and for one built in code or changed with ``dataclasses.replace``: its
    content is then not what was signed). ``drill`` is the failover drill the document
    carries (``Drill``), or None: none, or one this client cannot apply (malformed, a fault
    it does not know, a hop that is not a step of the chain but its last), which is
    ignored rather than making the document invalid; ``drill_ignored`` then says why.
    ``failure_policy``: the served preset's (``FailurePolicy``), or None; one this client
    cannot apply is ignored the same way (``failure_policy_ignored`` says why).
    """

    name: str
    version: int
    preset: str
    is_default: bool
    chain: tuple[Step, ...]
    marking: Mapping[str, Any]
    updated_by: str
    reason: str
    updated_at: str | None
    expires_at: str | None
    source: str = "live"
    epoch: int = 0
    default: DefaultChain | None = None
    drill: Drill | None = None
    failure_policy: FailurePolicy | None = None
    expires_at_s: float | None = field(default=None, init=False, repr=False, compare=False)
    drill_ignored: str | None = field(default=None, init=False, repr=False, compare=False)
    failure_policy_ignored: str | None = field(default=None, init=False, repr=False, compare=False)
    signature: DocumentSignature | None = field(default=None, init=False, repr=False, compare=False)
    # The JSON object this document was parsed from, as text (immutable): what to_json()
    # returns, so the state file holds exactly what was signed. Not an __init__ argument,
    # so dataclasses.replace() (an expired pin's derived document) drops it, with the
    # signature: the changed content is no longer what was signed.
    _received_json: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Parsed once here, not per request: current() compares it with the clock.
        expires_at_s = None
        if self.expires_at is not None:
            try:
                expires_at_s = parse_time(self.expires_at)
            except (ValueError, OverflowError) as exc:
                raise DocumentInvalid(f"'expires_at': {exc}") from None
        object.__setattr__(self, "expires_at_s", expires_at_s)
        drill = self.drill
        if drill is not None and not drill.hop < len(self.chain):
            # Only the chain's steps but its last can be drilled (a drilled last step would
            # have nothing to fall back to): such a drill is no drill.
            object.__setattr__(self, "drill", None)
            object.__setattr__(self, "drill_ignored", f"drill.hop {drill.hop} is not a step of the chain but its last")

    @property
    def ignored(self) -> list[tuple[str, str]]:
        """The parts of this document the client does not apply, each with why: ("failover
        drill", ...), ("failure policy", ...)."""
        parts = (("failover drill", self.drill_ignored), ("failure policy", self.failure_policy_ignored))
        return [(part, why) for part, why in parts if why is not None]

    @property
    def order(self) -> tuple[int, int]:
        """What "newer" means: a higher epoch wins even with a lower version."""
        return (self.epoch, self.version)

    @functools.cached_property
    def retry_max_s(self) -> float | None:
        """The longest ``Retry-After`` a same-step retry waits for under this document's
        failure policy, in seconds; None: no same-step retry."""
        policy = self.failure_policy
        return policy.retry_max_wait_ms / 1000 if policy is not None and policy.retry_max_wait_ms is not None else None

    @functools.cached_property
    def policy_line(self) -> str:
        """The receipts' line naming this document's failure policy ("" without one): worked
        out once per document, not per request."""
        policy = self.failure_policy
        return f"failure policy of preset {self.preset!r}: {policy.describe()}" if policy is not None else ""

    @classmethod
    def compiled_default(cls, name: str, steps: Iterable[Step]) -> ChainDocument:
        return cls(
            name=name,
            version=0,
            preset="compiled-default",
            is_default=True,
            chain=tuple(steps),
            marking={"degraded": False, "note": ""},
            updated_by="compiled-in",
            reason="compiled-in default",
            updated_at=None,
            expires_at=None,
            source="default",
        )

    @classmethod
    def from_json(cls, data: Any, *, registry: Registry | None = None, source: str = "live") -> ChainDocument:
        """Parse and validate a document; raise DocumentInvalid naming the first problem."""
        if not isinstance(data, dict):
            raise DocumentInvalid(f"document must be a JSON object, got {type(data).__name__}")

        def text(key: str, *, required: bool = True) -> str:
            value = data.get(key)
            if not isinstance(value, str):
                raise DocumentInvalid(f"{key!r} must be a string")
            if required and not value.strip():
                raise DocumentInvalid(f"{key!r} must not be blank")
            return value

        def optional_text(key: str) -> str | None:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise DocumentInvalid(f"{key!r} must be a string or null")
            return value

        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise DocumentInvalid("'version' must be a non-negative integer")
        # Older servers send no epoch: their documents are all in epoch 0.
        epoch = data.get("epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise DocumentInvalid("'epoch' must be a non-negative integer")
        is_default = data.get("is_default")
        if not isinstance(is_default, bool):
            raise DocumentInvalid("'is_default' must be a boolean")
        steps = _parse_steps(data.get("chain"))
        check_steps(steps, registry)
        # A drill or a policy this client cannot apply (a newer server's fault, say) is
        # ignored: the document it came with is still the chain, and must be applied.
        drill, drill_ignored = _unless_invalid(data.get("drill"), lambda raw: Drill.from_json(raw, steps=len(steps)))
        policy, policy_ignored = _parse_policy(data.get("failure_policy"), "failure_policy")
        default, default_policy_ignored = _parse_default(data.get("default"), registry)
        doc = cls(
            name=text("name"),
            version=version,
            preset=text("preset"),
            is_default=is_default,
            chain=steps,
            marking=_parse_marking(data.get("marking"), "'marking'"),
            updated_by=text("updated_by"),
            reason=text("reason"),
            updated_at=optional_text("updated_at"),
            expires_at=optional_text("expires_at"),
            source=source,
            epoch=epoch,
            default=default,
            drill=drill,
            failure_policy=policy,
        )
        object.__setattr__(doc, "drill_ignored", drill_ignored)
        object.__setattr__(doc, "failure_policy_ignored", policy_ignored or default_policy_ignored)
        object.__setattr__(doc, "signature", DocumentSignature.from_json(data.get("signature")))
        try:
            received = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):  # a dict built in code holding what JSON cannot
            received = None
        object.__setattr__(doc, "_received_json", received)
        return doc

    def to_json(self) -> dict[str, Any]:
        """The document as the control plane serves it (without ``source``).

        A parsed document returns the object it was parsed from, unchanged (a fresh copy
        each call): its signature and any field this SDK does not know yet included, so
        it verifies again when read back. One built in code is written from its fields.
        """
        if self._received_json is not None:
            received: dict[str, Any] = json.loads(self._received_json)
            return received
        return {
            "name": self.name,
            "version": self.version,
            "preset": self.preset,
            "is_default": self.is_default,
            "chain": [s.to_json() for s in self.chain],
            "marking": dict(self.marking),
            "updated_by": self.updated_by,
            "reason": self.reason,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "epoch": self.epoch,
            "default": self.default.to_json() if self.default is not None else None,
            # Only while a drill runs: a document without one is what it was before drills.
            **({"drill": self.drill.to_json()} if self.drill is not None else {}),
            **({"failure_policy": self.failure_policy.to_json()} if self.failure_policy is not None else {}),
        }

    @property
    def degraded(self) -> bool:
        return bool(self.marking.get("degraded", False))


def _parse_steps(raw_chain: Any, where: str = "") -> tuple[Step, ...]:
    """The steps of a JSON chain; ``where`` prefixes messages (``default.``)."""
    if not isinstance(raw_chain, list):
        raise DocumentInvalid(f"{where}chain must be a list of steps" if where else "'chain' must be a list of steps")
    steps = []
    for i, raw in enumerate(raw_chain):
        if not isinstance(raw, dict):
            raise DocumentInvalid(f"{where}chain[{i}] must be an object")
        provider, model, timeout = raw.get("provider"), raw.get("model"), raw.get("timeout_ms")
        if not isinstance(provider, str) or not isinstance(model, str):
            raise DocumentInvalid(f"{where}chain[{i}]: provider and model must be strings")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise DocumentInvalid(f"{where}chain[{i}]: timeout_ms must be an integer")
        if isinstance(timeout, float):
            if not math.isfinite(timeout) or timeout != int(timeout):
                raise DocumentInvalid(f"{where}chain[{i}]: timeout_ms must be an integer")
            timeout = int(timeout)
        steps.append(Step(provider, model, timeout))
    return tuple(steps)


def _parse_marking(marking: Any, label: str) -> dict[str, Any]:
    if marking is None:
        return dict(NO_MARKING)
    if not isinstance(marking, dict) or not isinstance(marking.get("degraded", False), bool):
        raise DocumentInvalid(f"{label} must be an object with a boolean 'degraded'")
    return dict(marking)


T = TypeVar("T")


def _unless_invalid(raw: Any, parse: Callable[[Any], T]) -> tuple[T | None, str | None]:
    """``parse(raw)`` (None when ``raw`` is absent) and, for a part this client cannot apply,
    None and why it is ignored instead."""
    if raw is None:
        return None, None
    try:
        return parse(raw), None
    except DocumentInvalid as exc:
        return None, str(exc)


def _parse_policy(raw: Any, where: str) -> tuple[FailurePolicy | None, str | None]:
    """A document's failure policy (None when it has none) and, for one this client cannot
    apply, why it is ignored instead."""
    return _unless_invalid(raw, lambda policy: FailurePolicy.from_json(policy, where))


def _parse_default(raw: Any, registry: Registry | None) -> tuple[DefaultChain | None, str | None]:
    """The document's default preset, validated exactly as its chain is, and why its
    failure policy is ignored (None: it is not).

    A pin falls back to it when no server may be reachable, so a default this service
    cannot route makes the whole document invalid rather than a surprise at expiry.
    Missing (or null, for a chain without a default) from older servers: None.
    """
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise DocumentInvalid(f"default.{{preset, chain, marking}}: an object is required, got {type(raw).__name__}")
    preset = raw.get("preset")
    if not isinstance(preset, str) or not preset.strip():
        raise DocumentInvalid("default.preset must be a non-blank string")
    steps = _parse_steps(raw.get("chain"), "default.")
    try:
        check_steps(steps, registry)
    except DocumentInvalid as exc:
        why = str(exc)
        raise DocumentInvalid(f"default.{why}" if why.startswith("chain") else f"default.chain: {why}") from None
    policy, ignored = _parse_policy(raw.get("failure_policy"), "default.failure_policy")
    return DefaultChain(preset, steps, _parse_marking(raw.get("marking"), "default.marking"), policy), ignored
