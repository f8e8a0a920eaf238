"""Test your fallback chain without vendors, sockets or sleeping.

``FakeProviders`` builds transports for ``Router`` defined by behaviour, not by any
vendor's schema, and records every call::

    clock = FakeClock()
    fakes = FakeProviders(clock=clock)
    fakes.configure({"alpha": 503, "beta": "timeout", "gamma": "ok"})
    router = Router(fake_chain(), transports=fakes.transports, registry=fake_registry(),
                    clock=clock)
    router.complete("hi").provider == "gamma"
    fakes.attempts == ["alpha", "beta", "gamma"]

Every provider named at construction (default: alpha, beta and gamma) answers ``"ok"``
until configured otherwise, so ``fakes.configure({"alpha": 503})`` is a whole test of "the
head fails, the second serves". Configure any other provider before building the Router (it
copies ``fakes.transports``); changing a behaviour afterwards is fine and takes effect on
its next call. ``fakes.async_transports`` are the same fakes for ``AsyncRouter``.

Fakes honour the attempt's timeout as a real transport must: a fake due to answer (or fail)
after ``after_s`` seconds raises ``ProviderTimeout(dispatched=True)`` instead when
``after_s`` exceeds the ``timeout_s`` the router gave it. With a ``FakeClock`` a fake
advances the clock by the time it took (``after_s``, or the whole ``timeout_s`` when it
timed out), so budget tests never sleep; without one, every fake returns at once.

``run_drill(router, {"hop": 1, "fault": "server_error", "share": 10})`` runs a failover
drill against a service's own Router (its fakes) in CI, and prints and returns the report
the control plane would: whether the chain's order holds when that hop fails.

The kit's parts have modules of their own, all importable from here: ``fake_providers``
(``FakeProviders``, ``FakeClock``), ``fake_streams`` (``FakeStream``, ``FakeStreams``),
``fake_chains`` (``FakeChainClient``, ``fake_registry``, ``fake_chain``,
``fake_document``) and ``drill_runs`` (``run_drill``).
"""

from __future__ import annotations

from chainclient.drill_runs import _run_coroutine as _run_coroutine
from chainclient.drill_runs import drill_report_text as drill_report_text
from chainclient.drill_runs import run_drill
from chainclient.fake_chains import (
    FAKE_MODEL,
    FAKE_PROVIDERS,
    FakeChainClient,
    fake_chain,
    fake_document,
    fake_registry,
)
from chainclient.fake_providers import FakeCall, FakeClock, FakeProviders, Spec
from chainclient.fake_streams import FakeStream, FakeStreams

__all__ = [
    "FAKE_MODEL",
    "FAKE_PROVIDERS",
    "FakeCall",
    "FakeChainClient",
    "FakeClock",
    "FakeProviders",
    "FakeStream",
    "FakeStreams",
    "Spec",
    "fake_chain",
    "fake_document",
    "fake_registry",
    "run_drill",
]
