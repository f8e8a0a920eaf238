"""What a receipt tells a reviewer about every attempt: where the data went, which model
served, under which contract, from which chain version."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from router_fixtures import make_router

from chainclient import AllProvidersFailed, Answer, Contract, Provider, Registry, Step
from chainclient.testing import FakeChainClient, FakeProviders, fake_document

pytestmark = pytest.mark.usefixtures("router_kind")

# A seed-style chain: A (US vendor), B (EU vendor), C (self-hosted), each with its registry
# entry, as a service compiles them in.
SEED_REGISTRY = Registry(
    {
        "vendor_a": Provider(destination="vendor_a-us", models={"large": {"text"}}),
        "vendor_b": Provider(destination="vendor_b-eu", models={"large": {"text"}}),
        "self_hosted": Provider(destination="self-hosted", models={"8b": {"text"}}),
    }
)
SEED_CHAIN = [Step("vendor_a", "large", 20_000), Step("vendor_b", "large", 20_000), Step("self_hosted", "8b", 10_000)]
SEED_DOCUMENT = fake_document(SEED_CHAIN, preset="normal", version=12)
EU_CONTRACT = Contract(requires={"text"}, destinations={"vendor_a-us", "vendor_b-eu", "self-hosted"}, name="chat-data")


def seed_router(specs: dict[str, Any], **options: Any) -> Any:
    """A router over the seed chain; every vendor answers unless ``specs`` says otherwise."""
    fakes = FakeProviders(providers=("vendor_a", "vendor_b", "self_hosted")).configure(specs)
    options.setdefault("registry", SEED_REGISTRY)
    return make_router(fakes, SEED_DOCUMENT, **options)


def test_each_attempt_names_its_destination_model_contract_and_chain_version() -> None:
    router = seed_router({"vendor_a": 503, "vendor_b": "timeout", "self_hosted": "ok"})

    result = router.complete("hello", contract=EU_CONTRACT, task_id="order-7")

    rows = [(a.provider, a.destination, a.model_id, a.contract, a.epoch, a.version) for a in result.attempts]
    contract = "'chat-data' (requires [text]; destinations [self-hosted, vendor_a-us, vendor_b-eu])"
    assert rows == [
        ("vendor_a", "vendor_a-us", "vendor_a/large", contract, 0, 12),
        ("vendor_b", "vendor_b-eu", "vendor_b/large", contract, 0, 12),
        ("self_hosted", "self-hosted", "self_hosted/8b", contract, 0, 12),
    ]
    assert (result.destination, result.model_id) == ("self-hosted", "self_hosted/8b")
    assert result.receipt.contract == contract


def test_a_printed_seed_receipt_names_each_destination_and_the_contract() -> None:
    router = seed_router({"vendor_a": 503, "vendor_b": 502, "self_hosted": "ok"})

    text = str(router.complete("hello", contract=EU_CONTRACT, task_id="t"))
    print(text)  # what a reviewer reads in the log

    lines = text.splitlines()
    assert lines[0] == "served by self_hosted/8b"
    assert lines[1] == (
        "task t (preset 'normal', version 12, contract 'chat-data' (requires [text]; destinations "
        "[self-hosted, vendor_a-us, vendor_b-eu])): 3 attempt(s)"
    )
    assert lines[2].strip().startswith("t-1 vendor_a/large @ vendor_a-us: failed HTTP 503")
    assert lines[3].strip().startswith("t-2 vendor_b/large @ vendor_b-eu: failed HTTP 502 (dispatched_unknown")
    assert lines[4].strip().startswith("t-3 self_hosted/8b @ self-hosted: ok")


@pytest.mark.parametrize(
    ("tokens", "kept"),
    [((1200, 300), (1200, 300)), ((-5, True), (None, None)), ((2.5, "7"), (None, None)), ((0, None), (0, None))],
    ids=["counts", "negative-and-bool", "float-and-text", "zero-and-none"],
)
def test_an_answers_token_counts_are_kept_only_as_whole_numbers_of_at_least_0(
    tokens: tuple[Any, Any], kept: tuple[int | None, int | None]
) -> None:
    """The receipt (and the usage report, which sums them) keeps what can be counted; the rest
    is unknown: one bad count would have the control plane refuse the whole report."""

    def vendor_a(step: Step, request: Any, timeout_s: float) -> Any:
        return Answer("hi", model_id="large", input_tokens=tokens[0], output_tokens=tokens[1])

    attempt = seed_router({"vendor_a": vendor_a}).complete("hello").attempts[0]
    assert (attempt.input_tokens, attempt.output_tokens) == kept


def test_an_error_s_receipt_names_the_destinations_too() -> None:
    router = seed_router({"vendor_a": 503, "vendor_b": 503, "self_hosted": 529})

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello")

    assert [a.destination for a in caught.value.attempts] == ["vendor_a-us", "vendor_b-eu", "self-hosted"]
    assert "contract none" in str(caught.value)


def test_the_model_identity_a_provider_reports_is_recorded_and_the_value_unwrapped() -> None:
    def vendor_a(step: Step, request: Any, timeout_s: float) -> Any:
        return Answer("hi there", model_id="large-2026-10-01")

    router = seed_router({"vendor_a": vendor_a})
    seen: list[Any] = []

    result = router.complete("hello", verify=lambda value: seen.append(value) or True)

    assert result.value == "hi there"
    assert seen == ["hi there"]
    assert result.model_id == "large-2026-10-01"
    assert "vendor_a/large as large-2026-10-01 @ vendor_a-us: ok" in str(result)


@pytest.mark.parametrize(
    ("contract", "identity"),
    [
        (None, "none"),
        (Contract(), "none"),
        (Contract(name="plain"), "'plain' (no terms)"),
        (Contract(requires={"images", "text"}), "(requires [images, text])"),
        (Contract(destinations={"vendor_b-eu"}, name="eu"), "'eu' (destinations [vendor_b-eu])"),
    ],
    ids=["no-contract", "empty", "named-empty", "requires", "named-destinations"],
)
def test_the_contract_in_force_is_named_in_every_attempt(contract: Contract | None, identity: str) -> None:
    registry = Registry({"vendor_a": Provider("vendor_b-eu", {"large": {"text", "images"}})})
    router = seed_router({"vendor_a": "ok"}, registry=registry)

    result = router.complete("hello", contract=contract)

    assert result.attempts[0].contract == identity
    assert result.receipt.contract == identity


def test_a_chain_after_an_epoch_raise_shows_epoch_and_version() -> None:
    document = replace(SEED_DOCUMENT, epoch=2, version=3)
    router = make_router(FakeProviders(providers=("vendor_a",)), FakeChainClient(document), registry=SEED_REGISTRY)

    result = router.complete("hello")

    assert (result.attempts[0].epoch, result.attempts[0].version) == (2, 3)
    assert "version 2.3" in str(result)
