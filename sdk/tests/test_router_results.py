"""What a request returns and reports: verify, report(), marking, snapshots, receipts."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import (
    AllProvidersFailed,
    ChainDocument,
    Contract,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    RequestRejected,
    Router,
    Step,
    VerificationFailed,
)
from chainclient.testing import FakeChainClient, FakeClock, fake_chain, fake_document

pytestmark = pytest.mark.usefixtures("router_kind")


def test_verify_rejecting_the_head_s_answer_falls_through() -> None:
    fakes = fakes_for()
    router = make_router(fakes)

    result = router.complete("hello", verify=lambda value: value != "answer from alpha")

    assert result.provider == "beta"
    first = result.attempts[0]
    assert (first.outcome, first.dispatch) == ("verify_failed", "dispatched_known")
    assert "failed verify()" in first.reason


def test_verify_applies_to_every_fallback_as_it_does_to_the_head() -> None:
    fakes = fakes_for({"alpha": 503})
    router = make_router(fakes)

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello", verify=lambda value: False)

    assert [a.outcome for a in caught.value.attempts] == ["failed", "verify_failed", "verify_failed"]


def test_a_verify_that_raises_counts_as_a_failed_answer() -> None:
    def strict(value: Any) -> bool:
        raise ValueError("not JSON")

    router = make_router(fakes_for({"beta": 503}))

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello", verify=strict)

    assert "verify() raised ValueError: not JSON" in caught.value.attempts[0].error


def test_report_counts_each_way_a_request_can_end() -> None:
    clock = FakeClock()
    fakes = fakes_for(clock=clock)
    router = make_router(fakes, deadline_s=15)

    def attempt(**options: Any) -> None:
        # Each ending is asserted elsewhere; here only the tally matters.
        with contextlib.suppress(
            AllProvidersFailed,
            DeadlineExceeded,
            NoEligibleRoute,
            OutcomeUnknown,
            RequestRejected,
            VerificationFailed,
        ):
            router.complete("hello", **options)

    attempt()  # first_attempt_success
    fakes.fail("alpha", 503)
    attempt()  # recovered_success
    attempt(contract=Contract(requires={"video"}))  # refusals
    fakes.fail("alpha", 400)
    attempt()  # rejections
    fakes.configure({"alpha": 503, "beta": 503, "gamma": 503})
    attempt()  # all_failed
    fakes.configure({"alpha": "timeout", "beta": "timeout"})
    attempt()  # deadline
    attempt(side_effects=True)  # unresolved
    fakes.configure({"alpha": "ok"})
    attempt(side_effects=True, verify=lambda value: False)  # verify_failed
    fakes.configure({"alpha": 401, "beta": "ok"})
    attempt()  # recovered_success + credential_alerts

    assert router.report() == {
        "first_attempt_success": 1,
        "recovered_success": 2,
        "refusals": 1,
        "rejections": 1,
        "all_failed": 1,
        "deadline": 1,
        "unresolved": 1,
        "verify_failed": 1,
        "credential_alerts": 1,
        "skipped_no_transport": 0,
        "interrupted": 0,  # streams only: tests/test_router_stream.py
    }
    router.reset_report()
    assert set(router.report().values()) == {0}


def test_the_preset_s_marking_is_passed_through() -> None:
    marking = {"degraded": True, "note": "local model only: answers are shorter"}
    document = fake_document(fake_chain(["gamma"]), preset="local_only", marking=marking)
    router = make_router(fakes_for(), document)

    result = router.complete("hello")

    assert result.marking == marking
    assert result.degraded is True
    assert result.receipt.preset == "local_only"


def test_a_plain_list_of_steps_is_marked_not_degraded() -> None:
    result = make_router(fakes_for(), fake_chain()).complete("hello")

    assert result.marking == {"degraded": False, "note": ""}
    assert result.degraded is False


def test_the_router_reads_the_client_s_current_chain_once_per_request() -> None:
    class ChangingClient:
        def __init__(self) -> None:
            self.reads = 0
            self.document = fake_document(fake_chain(["alpha", "beta"]), version=7)

        def current(self) -> ChainDocument:
            self.reads += 1
            return self.document

    client = ChangingClient()
    router = make_router(fakes_for({"alpha": 503}), client)
    client.reads = 0  # construction reads it once, to warn about providers without a transport

    assert router.complete("first").provider == "beta"
    client.document = fake_document(fake_chain(["gamma", "alpha"]), version=8)
    second = router.complete("second")

    assert second.provider == "gamma"
    assert second.receipt.version == 8
    assert client.reads == 2


def test_a_chain_change_mid_request_does_not_move_the_request_in_flight() -> None:
    client = FakeChainClient(fake_chain(["alpha", "beta"]))

    def alpha(step: Step, request: Any, timeout_s: float) -> Any:
        client.set(fake_chain(["gamma"]))  # on-call selects a preset right now
        raise TimeoutError("too slow")

    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes, client)

    assert tried(router.complete("in flight")) == ["alpha", "beta"]
    assert tried(router.complete("next")) == ["gamma"]


def test_a_result_receipt_reads_as_one_line_per_attempt() -> None:
    router = make_router(fakes_for({"alpha": 503, "beta": "timeout"}))

    text = str(router.complete("hello", task_id="order-42"))

    lines = text.splitlines()
    assert lines[0] == "served by gamma/chat"
    assert lines[1].startswith("task order-42 (preset 'compiled-default', version 0, contract none): 3 attempt(s)")
    assert lines[2].strip().startswith("order-42-1 alpha/chat @ alpha-us: failed HTTP 503")
    assert "HTTP 503 is retryable" in lines[2]
    assert lines[3].strip().startswith("order-42-2 beta/chat @ beta-us: timeout (dispatched_unknown")
    assert lines[4].strip().startswith("order-42-3 gamma/chat @ gamma-us: ok")
    assert len(lines) == 5


def test_an_error_reads_as_a_headline_then_its_receipt() -> None:
    router = make_router(fakes_for({"alpha": 503, "beta": 401, "gamma": 400}))

    with pytest.raises(RequestRejected) as caught:
        router.complete("hello", task_id="t")

    lines = str(caught.value).splitlines()
    assert lines[0].startswith("gamma/chat rejected the request (HTTP 400")
    assert "t-1 alpha/chat @ alpha-us: failed HTTP 503" in lines[2]
    assert "credentials rejected" in lines[3]
    assert "the request itself was rejected; not tried elsewhere" in lines[4]


def test_task_ids_default_to_fresh_ones_and_attempt_ids_follow_them() -> None:
    router = make_router(fakes_for({"alpha": 503}))

    first, second = router.complete("a"), router.complete("b")

    assert first.task_id != second.task_id
    assert len(first.task_id) == 32
    assert [a.attempt_id for a in first.attempts] == [f"{first.task_id}-1", f"{first.task_id}-2"]
    assert {a.task_id for a in first.attempts} == {first.task_id}


def test_the_router_refuses_a_source_it_cannot_read_a_chain_from() -> None:
    with pytest.raises(TypeError, match="ChainClient"):
        Router(object(), transports={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty list of Step"):
        Router([], transports={})
