"""Chains, registries and a chain source for tests: the testing kit's stand-ins for what a
service builds and what its ``ChainClient`` serves.

``fake_registry``, ``fake_chain`` and ``fake_document`` make the registry, the steps and a
live-looking document for the fake providers (``FAKE_PROVIDERS``, each with one model,
``FAKE_MODEL``); ``FakeChainClient`` serves a document a test sets and records what a
Router tells its source. Importable from ``chainclient.testing``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chainclient.drills import DrillRequest
from chainclient.receipts import Attempt
from chainclient.types import ChainDocument, Drill, FailurePolicy, Provider, Registry, Step

FAKE_PROVIDERS = ("alpha", "beta", "gamma")
FAKE_MODEL = "chat"


class FakeChainClient:
    """A stand-in for ``ChainClient``: ``current()`` returns whatever was last ``set()``;
    ``served`` counts, per provider, the successes a Router recorded (``record_served``);
    ``attempts`` lists every attempt it told (``record_attempt``) and ``breaker_openings``
    counts the breakers it opened (``record_breaker_opened``); ``drill_requests`` lists how
    each request routed in a failover drill ended (``record_drill``: the drill and a
    ``drills.DrillRequest``); ``registry``, if given, is the one a Router built on it uses
    (as a ChainClient's). It has no ``takes_part``: a Router then takes part in a drill of
    every service only, as a client without a token."""

    def __init__(self, chain: ChainDocument | Sequence[Step], *, registry: Registry | None = None) -> None:
        self.registry = registry
        self._document = _as_document(chain)
        self._lock = threading.Lock()
        self._served: dict[str, int] = {}
        self._attempts: list[Attempt] = []
        self._openings: dict[str, int] = {}
        self._drill_requests: list[tuple[Drill, DrillRequest]] = []

    def current(self) -> ChainDocument:
        return self._document

    def record_served(self, provider: str) -> None:
        with self._lock:
            self._served[provider] = self._served.get(provider, 0) + 1

    @property
    def served(self) -> dict[str, int]:
        """Requests served per provider, as ``ChainClient`` would report them."""
        with self._lock:
            return dict(self._served)

    def record_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts.append(attempt)

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt a Router recorded, in order (what ``ChainClient`` tallies for health)."""
        with self._lock:
            return list(self._attempts)

    def record_breaker_opened(self, provider: str) -> None:
        with self._lock:
            self._openings[provider] = self._openings.get(provider, 0) + 1

    @property
    def breaker_openings(self) -> dict[str, int]:
        """Circuit breaker openings per provider, as ``ChainClient`` would report them."""
        with self._lock:
            return dict(self._openings)

    def record_drill(self, drill: Drill, request: DrillRequest) -> None:
        with self._lock:
            self._drill_requests.append((drill, request))

    @property
    def drill_requests(self) -> list[tuple[Drill, DrillRequest]]:
        """How each request a Router routed in a drill ended, in order (what ``ChainClient``
        counts for the usage report's ``drill`` section)."""
        with self._lock:
            return list(self._drill_requests)

    def set(self, chain: ChainDocument | Sequence[Step]) -> None:
        """Make ``chain`` live, as a selection reaching the poller would."""
        self._document = _as_document(chain)


def fake_registry(
    names: Iterable[str] = FAKE_PROVIDERS,
    *,
    capabilities: Mapping[str, Iterable[str]] | None = None,
    destinations: Mapping[str, str] | None = None,
    context_windows: Mapping[str, int] | None = None,
) -> Registry:
    """A Registry with one model (``"chat"``) per fake provider.

    Capabilities default to ``{"text"}`` and destinations to ``"<name>-us"``; override them
    per provider, e.g. ``capabilities={"alpha": {"text", "images"}}``. ``context_windows``:
    the model's context window per provider, where known (``{"alpha": 8192}``).
    """
    capabilities = capabilities or {}
    destinations = destinations or {}
    context_windows = context_windows or {}
    return Registry(
        {
            name: Provider(
                destination=destinations.get(name, f"{name}-us"),
                models={FAKE_MODEL: frozenset(capabilities.get(name, ("text",)))},
                context_windows={FAKE_MODEL: context_windows[name]} if name in context_windows else {},
            )
            for name in names
        }
    )


def fake_chain(names: Iterable[str] = FAKE_PROVIDERS, *, timeout_ms: int = 10_000) -> list[Step]:
    """Steps for the fake providers in order, each with the same timeout."""
    return [Step(name, FAKE_MODEL, timeout_ms) for name in names]


def fake_document(
    chain: Sequence[Step] | None = None,
    *,
    preset: str = "test-preset",
    version: int = 1,
    marking: Mapping[str, Any] | None = None,
    name: str = "chat",
    failure_policy: FailurePolicy | None = None,
) -> ChainDocument:
    """A live-looking ChainDocument (default chain: alpha, beta, gamma), with the preset's
    ``failure_policy`` if given."""
    return ChainDocument(
        name=name,
        version=version,
        preset=preset,
        is_default=False,
        chain=tuple(chain if chain is not None else fake_chain()),
        marking=dict(marking) if marking is not None else {"degraded": False, "note": ""},
        updated_by="tests",
        reason="test document",
        updated_at=None,
        expires_at=None,
        failure_policy=failure_policy,
    )


def _as_document(chain: ChainDocument | Sequence[Step]) -> ChainDocument:
    return chain if isinstance(chain, ChainDocument) else fake_document(list(chain))


__all__ = ["FAKE_MODEL", "FAKE_PROVIDERS", "FakeChainClient", "fake_chain", "fake_document", "fake_registry"]
