"""The value types shared by the poller and the router.

They mirror the control plane's chain document (field names are fixed by the API) and
the service's own compiled-in provider registry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MIN_TIMEOUT_MS = 500
MAX_TIMEOUT_MS = 120_000
MAX_STEPS = 4


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
    """A provider the service is built to call: where its data goes and its models."""

    destination: str
    models: Mapping[str, frozenset[str] | set[str]] = field(default_factory=dict)

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
        steps = list(steps)
        if not 1 <= len(steps) <= MAX_STEPS:
            raise DocumentInvalid(f"a chain has 1..{MAX_STEPS} steps, got {len(steps)}")
        seen: set[tuple[str, str]] = set()
        for i, step in enumerate(steps):
            provider = self._providers.get(step.provider)
            if provider is None:
                raise DocumentInvalid(f"chain[{i}]: unknown provider {step.provider!r}")
            if step.model not in provider.models:
                raise DocumentInvalid(
                    f"chain[{i}]: unknown model {step.model!r} for provider {step.provider!r}"
                )
            if not MIN_TIMEOUT_MS <= step.timeout_ms <= MAX_TIMEOUT_MS:
                raise DocumentInvalid(
                    f"chain[{i}]: timeout_ms {step.timeout_ms} is outside "
                    f"{MIN_TIMEOUT_MS}..{MAX_TIMEOUT_MS}"
                )
            key = (step.provider, step.model)
            if key in seen:
                raise DocumentInvalid(f"chain[{i}]: duplicate step {step}")
            seen.add(key)


@dataclass(frozen=True)
class ChainDocument:
    """The live chain as served by the control plane, plus where this copy came from.

    ``source`` is ``default`` (compiled in, version 0), ``disk`` (last-known-good file)
    or ``live`` (fetched from the control plane).
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
    def from_json(
        cls, data: Any, *, registry: Registry | None = None, source: str = "live"
    ) -> ChainDocument:
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
        is_default = data.get("is_default")
        if not isinstance(is_default, bool):
            raise DocumentInvalid("'is_default' must be a boolean")
        raw_chain = data.get("chain")
        if not isinstance(raw_chain, list):
            raise DocumentInvalid("'chain' must be a list of steps")
        steps = []
        for i, raw in enumerate(raw_chain):
            if not isinstance(raw, dict):
                raise DocumentInvalid(f"chain[{i}] must be an object")
            provider, model, timeout = raw.get("provider"), raw.get("model"), raw.get("timeout_ms")
            if not isinstance(provider, str) or not isinstance(model, str):
                raise DocumentInvalid(f"chain[{i}]: provider and model must be strings")
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise DocumentInvalid(f"chain[{i}]: timeout_ms must be an integer")
            if isinstance(timeout, float):
                if not math.isfinite(timeout) or timeout != int(timeout):
                    raise DocumentInvalid(f"chain[{i}]: timeout_ms must be an integer")
                timeout = int(timeout)
            steps.append(Step(provider, model, timeout))
        marking = data.get("marking", {"degraded": False, "note": ""})
        if marking is None:
            marking = {"degraded": False, "note": ""}
        if not isinstance(marking, dict) or not isinstance(marking.get("degraded", False), bool):
            raise DocumentInvalid("'marking' must be an object with a boolean 'degraded'")
        doc = cls(
            name=text("name"),
            version=version,
            preset=text("preset"),
            is_default=is_default,
            chain=tuple(steps),
            marking=dict(marking),
            updated_by=text("updated_by"),
            reason=text("reason"),
            updated_at=optional_text("updated_at"),
            expires_at=optional_text("expires_at"),
            source=source,
        )
        if registry is not None:
            registry.validate_steps(doc.chain)
        else:
            _check_shape(doc.chain)
        return doc

    def to_json(self) -> dict[str, Any]:
        """The document as the control plane serves it (without ``source``)."""
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
        }

    @property
    def degraded(self) -> bool:
        return bool(self.marking.get("degraded", False))


def _check_shape(steps: tuple[Step, ...]) -> None:
    if not 1 <= len(steps) <= MAX_STEPS:
        raise DocumentInvalid(f"a chain has 1..{MAX_STEPS} steps, got {len(steps)}")
    if len({(s.provider, s.model) for s in steps}) != len(steps):
        raise DocumentInvalid("duplicate step in chain")
    for i, s in enumerate(steps):
        if not MIN_TIMEOUT_MS <= s.timeout_ms <= MAX_TIMEOUT_MS:
            raise DocumentInvalid(f"chain[{i}]: timeout_ms {s.timeout_ms} out of bounds")
