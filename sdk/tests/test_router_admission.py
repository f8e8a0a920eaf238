"""Admission: which steps a request may be tried on, checked before every attempt."""

from __future__ import annotations

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import (
    AllProvidersFailed,
    BreakerSettings,
    Contract,
    NoEligibleRoute,
    Provider,
    Registry,
    Step,
)
from chainclient.testing import FakeProviders, fake_chain, fake_registry

pytestmark = pytest.mark.usefixtures("router_kind")

# alpha: eligible; beta: lacks "images"; gamma: sends data to a destination not allowed.
REGISTRY = fake_registry(
    ["alpha", "beta", "gamma", "delta"],
    capabilities={
        "alpha": {"text", "images"},
        "beta": {"text"},
        "gamma": {"text", "images"},
        "delta": {"text", "images"},
    },
    destinations={"alpha": "alpha-eu", "beta": "beta-eu", "gamma": "gamma-us", "delta": "delta-eu"},
)
CONTRACT = Contract(requires={"images"}, destinations={"alpha-eu", "beta-eu", "delta-eu"})


def test_only_the_step_that_meets_the_contract_serves_the_request() -> None:
    fakes = fakes_for()
    router = make_router(fakes, fake_chain(["beta", "gamma", "alpha"]), registry=REGISTRY)

    result = router.complete("describe this image", contract=CONTRACT)

    assert result.provider == "alpha"
    assert fakes.attempts == ["alpha"]


@pytest.mark.parametrize("alpha", [503, "timeout"], ids=["alpha-503", "alpha-timeout"])
def test_when_the_only_eligible_step_fails_no_ineligible_step_is_tried(alpha: str | int) -> None:
    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes, registry=REGISTRY)

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("describe this image", contract=CONTRACT)

    assert fakes.attempts == ["alpha"]
    assert tried(caught.value) == ["alpha"]
    refused = {step.provider: why for step, why in caught.value.refused.items()}
    assert "lacks required capabilities ['images']" in refused["beta"]
    assert "destination 'gamma-us' is not allowed" in refused["gamma"]
    assert "skipped beta/chat: model lacks required capabilities" in str(caught.value)


def test_nothing_eligible_is_refused_with_every_step_s_reason_and_no_call() -> None:
    fakes = fakes_for()  # no transport for delta
    chain = fake_chain(["beta", "gamma", "delta"])
    router = make_router(fakes, chain, registry=REGISTRY)

    with pytest.raises(NoEligibleRoute) as caught:
        router.complete("describe this image", contract=CONTRACT)

    reasons = caught.value.reasons
    assert list(reasons) == chain
    assert "lacks required capabilities" in reasons[chain[0]]
    assert "is not allowed" in reasons[chain[1]]
    assert "no transport for provider 'delta'" in reasons[chain[2]]
    assert caught.value.attempts == ()
    assert fakes.attempts == []
    assert router.report()["refusals"] == 1
    assert router.report()["all_failed"] == 0


def test_a_request_without_a_contract_may_use_any_step_with_a_transport() -> None:
    fakes = fakes_for({"alpha": 503})
    router = make_router(fakes, registry=REGISTRY)

    assert router.complete("hello").provider == "beta"


def test_a_provider_missing_from_the_registry_is_not_eligible() -> None:
    fakes = fakes_for()
    registry = fake_registry(["beta", "gamma"])
    router = make_router(fakes, registry=registry)

    result = router.complete("hello")

    assert result.provider == "beta"
    assert "not in the registry" in str(result)


def test_without_a_registry_a_contract_cannot_be_checked_so_nothing_is_eligible() -> None:
    router = make_router(fakes_for(), registry=None)

    assert router.complete("hello").provider == "alpha"
    with pytest.raises(NoEligibleRoute, match="no registry"):
        router.complete("hello", contract=Contract(requires={"text"}))


def test_with_fallback_not_allowed_only_the_head_is_tried() -> None:
    fakes = fakes_for({"alpha": 503})
    router = make_router(fakes)

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello", allow_fallback=False)

    assert fakes.attempts == ["alpha"]
    assert all("fallback not permitted" in why for why in caught.value.refused.values())
    assert len(caught.value.refused) == 2


def test_with_fallback_not_allowed_an_ineligible_head_means_no_route() -> None:
    fakes = fakes_for()
    router = make_router(fakes, fake_chain(["beta", "alpha"]), registry=REGISTRY)

    with pytest.raises(NoEligibleRoute) as caught:
        router.complete("describe this image", contract=CONTRACT, allow_fallback=False)

    assert fakes.attempts == []
    assert [why.split(" (")[0] for why in caught.value.reasons.values()] == [
        "model lacks required capabilities ['images']",
        "fallback not permitted",
    ]


def test_admission_runs_again_before_each_fallback() -> None:
    # alpha serves two models; its first failure opens its breaker (threshold 1), so the
    # second alpha step, admitted a moment ago, is refused by the time the walk gets to it.
    registry = Registry(
        {
            "alpha": Provider("alpha-eu", {"chat": {"text"}, "big": {"text"}}),
            "beta": Provider("beta-eu", {"chat": {"text"}}),
        }
    )
    chain = [Step("alpha", "chat", 1_000), Step("alpha", "big", 1_000), Step("beta", "chat", 1_000)]
    fakes = FakeProviders().fail("alpha", 503).ok("beta")
    router = make_router(fakes, chain, registry=registry, breaker=BreakerSettings(failure_threshold=1, cooldown_s=60))

    result = router.complete("hello")

    assert fakes.attempts == ["alpha", "beta"]
    assert "circuit breaker open" in result.receipt.refused[0][1]
    assert result.receipt.refused[0][0] == chain[1]


def test_contract_sets_are_frozen_so_a_contract_is_hashable_and_unchanging() -> None:
    requires = {"images"}
    contract = Contract(requires=requires)
    requires.add("tools")

    assert contract.requires == frozenset({"images"})
    assert hash(contract) == hash(Contract(requires=frozenset({"images"})))
