"""What a router reads its chain from, and the clock it reads the time from.

A router is given a ``ChainSource`` (anything with a non-blocking ``current()``: a
``ChainClient``), a fixed ``ChainDocument`` or a list of ``Step``; ``snapshot_reader``
makes each a function returning the chain, read once per request. A source's accounting
hooks, where it has them, and its registry are looked up once, when the router is built
(``hook``, ``registry_of``): a request then pays a None check per hook, not a lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from chainclient.types import ChainDocument, Registry, Step


class Clock(Protocol):
    """A monotonic clock in seconds; ``chainclient.testing.FakeClock`` is one. A clock that
    also has ``advance(seconds)`` (a FakeClock does) is advanced, not waited on, when a
    drill injects a timeout."""

    def now(self) -> float: ...


class ChainSource(Protocol):
    """Anything with a non-blocking ``current()`` returning the live chain (a ChainClient).

    If it also has ``record_served(provider)`` (a ChainClient does), the router calls it
    on every successful result, for the client's usage reports; ``record_attempt(attempt)``,
    on every attempt it settles (served or not), and ``record_breaker_opened(provider)``,
    whenever a provider's circuit breaker opens, for the provider health in those reports.
    Failover drills: ``takes_part(drill) -> bool`` says whether the source's service takes
    part in a drill its document carries (without it: only in a drill of every service), and
    ``record_drill(drill, request)`` is told how each request routed while the drill was
    active ended (a ``drills.DrillRequest``), for the reports' ``drill`` section.
    If it has a ``registry`` (a ChainClient does), the router uses it unless given one.
    Each hook is looked up once, when the router is built.
    """

    def current(self) -> ChainDocument: ...


def hook(source: object, name: str) -> Callable[..., object] | None:
    """The source's accounting method ``name``, if it has one: looked up once, at
    construction; a router over a plain list of steps only checks for None per attempt."""
    method = getattr(source, name, None)
    return method if callable(method) else None


def registry_of(source: object) -> Registry | None:
    """The registry a ChainClient was built with, so it need not be passed twice."""
    registry = getattr(source, "registry", None)
    return registry if isinstance(registry, Registry) else None


def snapshot_reader(
    source: ChainSource | ChainDocument | Sequence[Step],
) -> Callable[[], ChainDocument]:
    """``source`` as a function returning the chain to route along (TypeError when it is
    none of the three a router takes)."""
    if isinstance(source, ChainDocument):
        return lambda: source
    if isinstance(source, (list, tuple)):
        steps = tuple(source)
        if not steps or not all(isinstance(step, Step) for step in steps):
            raise TypeError("a chain given as a list must be a non-empty list of Step")
        document = ChainDocument.compiled_default("router", steps)
        return lambda: document
    current = getattr(source, "current", None)
    if not callable(current):
        raise TypeError(
            "a router needs a ChainClient (anything with current()), a ChainDocument or a "
            f"list of Step, got {type(source).__name__}"
        )
    reader: Callable[[], ChainDocument] = current
    return reader


__all__ = ["ChainSource", "Clock", "hook", "registry_of", "snapshot_reader"]
