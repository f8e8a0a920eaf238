"""Helpers shared by the router tests (plain functions, so no fixture magic to import).

Every router test module runs twice, once per router (``pytestmark`` uses the
``router_kind`` fixture in conftest.py): ``make_router`` builds a ``Router`` or an
``AsyncRouter`` over the same fakes, so one table of expectations holds both to the same
semantics. An ``AsyncRouter`` is driven through ``Blocking``, which runs each request on a
fresh event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chainclient import AsyncRouter, Router, RouteResult, RoutingError, Step
from chainclient.testing import FakeClock, FakeProviders, Spec, _run_coroutine, fake_chain, fake_registry

ALL_OK: dict[str, Spec] = {"alpha": "ok", "beta": "ok", "gamma": "ok"}
ROUTER_KINDS = ("sync", "async")
# Which router ``make_router`` builds; set per test by the ``router_kind`` fixture.
kind = "sync"


class Blocking:
    """An AsyncRouter with a blocking ``complete``: ``asyncio.run`` per request."""

    def __init__(self, router: AsyncRouter) -> None:
        self.router = router

    def complete(self, request: Any, **options: Any) -> RouteResult:
        return run_async(self.router.complete(request, **options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)


# ``asyncio.run(coroutine)``, on a thread of its own when this thread already runs an event
# loop (a transport calling the router mid-request; Playwright's sync API, which keeps one
# running in the main thread while the browser tests' session lasts): the testing kit's.
run_async = _run_coroutine


def fakes_for(specs: Mapping[str, Spec] | None = None, clock: FakeClock | None = None) -> FakeProviders:
    """Fakes for alpha, beta and gamma: every provider answers unless ``specs`` says otherwise."""
    return FakeProviders(clock).configure({**ALL_OK, **(specs or {})})


def make_router(fakes: FakeProviders, chain: Sequence[Step] | Any = None, **options: Any) -> Any:
    """A router (of the test's kind) over alpha -> beta -> gamma (10 s each), breakers off
    unless asked for."""
    options.setdefault("registry", fake_registry())
    options.setdefault("breaker", None)
    options.setdefault("clock", fakes.clock)
    source = chain if chain is not None else fake_chain()
    if kind == "async":
        return Blocking(AsyncRouter(source, transports=fakes.async_transports, **options))
    return Router(source, transports=fakes.transports, **options)


def tried(outcome: RouteResult | RoutingError) -> list[str]:
    """Providers a result or an error says were attempted, in order."""
    return [attempt.provider for attempt in outcome.attempts]
