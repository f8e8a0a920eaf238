"""The value types shared by the poller and the router: the chain document and its parts.

They mirror the control plane's chain document (field names are fixed by the API) and
the service's own compiled-in provider registry. ``ChainDocument`` and its parsing live
here; the values it is made of have modules of their own and are importable from here as
before: steps, providers, the registry and the step rules (``steps``), and the parts a
document carries beside its chain (``document_parts``: the default preset, the failure
policy, the drill, the signature, and RFC 3339 times).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chainclient.document_parts import NO_MARKING as NO_MARKING
from chainclient.document_parts import DefaultChain as DefaultChain
from chainclient.document_parts import DocumentSignature as DocumentSignature
from chainclient.document_parts import Drill as Drill
from chainclient.document_parts import FailurePolicy as FailurePolicy
from chainclient.document_parts import parse_time as parse_time
from chainclient.steps import DocumentInvalid as DocumentInvalid
from chainclient.steps import Provider as Provider
from chainclient.steps import Registry as Registry
from chainclient.steps import Step as Step
from chainclient.steps import check_steps as check_steps


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
