"""Helpers shared by the router tests (plain functions, so no fixture magic to import)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chainclient import Router, RouteResult, RoutingError, Step
from chainclient.testing import FakeClock, FakeProviders, Spec, fake_chain, fake_registry

ALL_OK: dict[str, Spec] = {"alpha": "ok", "beta": "ok", "gamma": "ok"}


def fakes_for(specs: Mapping[str, Spec] | None = None, clock: FakeClock | None = None) -> FakeProviders:
    """Fakes for alpha, beta and gamma: every provider answers unless ``specs`` says otherwise."""
    return FakeProviders(clock).configure({**ALL_OK, **(specs or {})})


def make_router(fakes: FakeProviders, chain: Sequence[Step] | Any = None, **options: Any) -> Router:
    """A router over alpha -> beta -> gamma (10 s each) with breakers off unless asked for."""
    options.setdefault("registry", fake_registry())
    options.setdefault("breaker", None)
    options.setdefault("clock", fakes.clock)
    return Router(chain if chain is not None else fake_chain(), transports=fakes.transports, **options)


def tried(outcome: RouteResult | RoutingError) -> list[str]:
    """Providers a result or an error says were attempted, in order."""
    return [attempt.provider for attempt in outcome.attempts]
