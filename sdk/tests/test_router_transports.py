"""A provider the chain names but the service wired no transport for is never a silent
second choice: warned about at construction, counted and shown when skipped. A router built
on a client reads the client's registry."""

from __future__ import annotations

import logging

import pytest
from router_fixtures import make_router, tried

from chainclient import BreakerSettings, Contract, NoEligibleRoute
from chainclient.testing import FakeChainClient, FakeProviders, fake_chain, fake_registry

pytestmark = pytest.mark.usefixtures("router_kind")


def test_a_chain_provider_without_a_transport_is_warned_about_at_construction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="chainclient.router"):
        router = make_router(FakeProviders(providers=("beta", "gamma")))

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "chainclient: no transport for provider(s) alpha: a chain step on them is skipped "
        "(transports given: beta, gamma)"
    ]
    assert router.health()["providers_without_transport"] == ["alpha"]


def test_a_registry_provider_without_a_transport_is_warned_about_too(caplog: pytest.LogCaptureFixture) -> None:
    registry = fake_registry(["alpha", "beta", "gamma", "delta"])

    with caplog.at_level(logging.WARNING, logger="chainclient.router"):
        router = make_router(FakeProviders(), registry=registry)

    assert "no transport for provider(s) delta" in caplog.text
    assert router.health()["providers_without_transport"] == ["delta"]


def test_skipping_a_step_without_a_transport_is_counted_and_named_in_the_receipt() -> None:
    router = make_router(FakeProviders(providers=("beta", "gamma")))

    result = router.complete("hello")

    assert tried(result) == ["beta"]
    assert [(str(step), why) for step, why in result.receipt.refused] == [
        ("alpha/chat", "no transport for provider 'alpha'")
    ]
    assert router.report()["skipped_no_transport"] == 1
    assert router.report()["first_attempt_success"] == 1


def test_a_live_chain_change_onto_an_unwired_provider_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    client = FakeChainClient(fake_chain(["alpha", "beta"]))
    registry = fake_registry(["alpha", "beta"])
    router = make_router(FakeProviders(providers=("alpha", "beta")), client, registry=registry)
    assert router.health()["providers_without_transport"] == []

    client.set(fake_chain(["gamma", "beta"]))  # a preset the service was not built for
    with caplog.at_level(logging.WARNING, logger="chainclient.router"):
        for _ in range(3):
            assert router.complete("hello").provider == "beta"

    lines = [r.getMessage() for r in caplog.records if "no transport" in r.getMessage()]
    assert lines == [
        "chainclient: chain chat v1 routes to gamma/chat but this router has no transport for 'gamma': skipped"
    ]
    assert router.health()["providers_without_transport"] == ["gamma"]
    assert router.report()["skipped_no_transport"] == 3


def test_health_shows_each_breaker_state() -> None:
    router = make_router(FakeProviders(), breaker=None)
    assert router.health() == {"providers_without_transport": [], "breakers": {}}

    router = make_router(FakeProviders(), breaker=BreakerSettings())
    assert router.health()["breakers"] == {"alpha": "closed", "beta": "closed", "gamma": "closed"}


def test_a_router_built_on_a_client_uses_the_client_s_registry() -> None:
    registry = fake_registry(capabilities={"beta": {"text", "images"}})
    client = FakeChainClient(fake_chain(), registry=registry)
    router = make_router(FakeProviders(), client, registry=None)

    result = router.complete("describe this", contract=Contract(requires={"images"}))

    assert result.provider == "beta"
    assert result.destination == "beta-us"


def test_without_any_registry_a_contract_cannot_be_checked() -> None:
    router = make_router(FakeProviders(), FakeChainClient(fake_chain()), registry=None)

    with pytest.raises(NoEligibleRoute):
        router.complete("describe this", contract=Contract(requires={"images"}))
    assert router.complete("hello").destination == "unknown"
