"""Steps, providers and the registry: where a request may be served from, and the step rules.

A chain is a few steps (``Step``: a provider's model with a timeout); a ``Registry`` is the
service's own compiled-in list of the providers it is built to call. ``check_steps`` is
the one home of the step rules, for a document's chain and its default alike, and
``DocumentInvalid`` is what breaking any rule of a chain document raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chainclient.wire import CHAIN_MAX_STEPS, CHAIN_MIN_STEPS, STEP_MAX_TIMEOUT_MS, STEP_MIN_TIMEOUT_MS


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


__all__ = ["DocumentInvalid", "Provider", "Registry", "Step", "check_steps"]
