"""The failure policy a chain document carries: the commit point and bounds of streams, and a
same-step retry, reviewed with the presets; a call's own arguments override it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from router_fixtures import fakes_for as shared_fakes_for
from router_fixtures import make_router, tried
from test_router_stream import drain
from test_router_stream import make as make_stream_router

from chainclient import (
    AllProvidersFailed,
    BreakerSettings,
    ChainDocument,
    FailurePolicy,
    ProviderError,
    ProviderUnavailable,
    RequestRejected,
    Step,
    StreamInterrupted,
)
from chainclient.snapshot import expired_pin
from chainclient.testing import FakeClock, FakeProviders, FakeStreams, fake_chain, fake_document

COMPLETE = FailurePolicy(commit="complete")
RETRY = FailurePolicy(retry_max_wait_ms=2000)
ALPHA = Step("alpha", "chat", 10_000)


def document(policy: FailurePolicy | None) -> ChainDocument:
    return fake_document(preset="normal", failure_policy=policy)


# --- in the document ---------------------------------------------------------------------------

WIRE = {"commit": "complete", "first_chunk_ms": 5000, "idle_ms": None, "retry_same_step": {"max_wait_ms": 2000}}


def served_json(**extra: Any) -> dict[str, Any]:
    body = fake_document().to_json()
    body["default"] = {"preset": "normal", "chain": [s.to_json() for s in fake_chain()], "marking": body["marking"]}
    body.update(extra)
    return body


def test_the_document_carries_the_presets_policy_and_its_defaults() -> None:
    body = served_json(failure_policy=WIRE)
    body["default"]["failure_policy"] = {**WIRE, "commit": "first_chunk", "retry_same_step": None}
    parsed = ChainDocument.from_json(body)
    assert parsed.failure_policy == FailurePolicy("complete", 5000, None, 2000)
    assert parsed.default is not None and parsed.default.failure_policy == FailurePolicy("first_chunk", 5000)
    assert parsed.failure_policy_ignored is None
    assert parsed.to_json() == body  # as received: what was signed
    assert ChainDocument.from_json(served_json()).failure_policy is None
    built = dataclasses.replace(parsed)  # written from its fields, as the server writes it
    assert built.to_json()["failure_policy"] == WIRE


def test_keys_left_out_take_their_defaults_and_unknown_ones_are_ignored() -> None:
    parsed = ChainDocument.from_json(served_json(failure_policy={"idle_ms": 800, "newer": True}))
    assert parsed.failure_policy == FailurePolicy("first_chunk", None, 800, None)


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({**WIRE, "commit": "later"}, 'failure_policy.commit "later" is not one this client knows'),
        ({**WIRE, "first_chunk_ms": 10}, "failure_policy.first_chunk_ms must be null or an integer within 500..120000"),
        ({**WIRE, "idle_ms": 2.5}, "failure_policy.idle_ms must be null or an integer within 500..120000"),
        ({**WIRE, "retry_same_step": {"max_wait_ms": 60_000}}, "retry_same_step must be null or an object whose"),
        ({**WIRE, "retry_same_step": True}, "retry_same_step must be null or an object whose"),
        ("complete", "failure_policy must be an object, got str"),
    ],
)
def test_a_policy_this_client_cannot_apply_is_ignored_and_the_document_applied(policy: Any, says: str) -> None:
    parsed = ChainDocument.from_json(served_json(failure_policy=policy))
    assert parsed.failure_policy is None
    assert parsed.failure_policy_ignored is not None and says in parsed.failure_policy_ignored
    assert parsed.version == 1


def test_a_pin_that_expires_here_serves_the_defaults_policy() -> None:
    body = served_json(failure_policy=WIRE, expires_at="2026-12-06T10:00:00Z")
    body["default"]["failure_policy"] = {**WIRE, "commit": "first_chunk"}
    pin = ChainDocument.from_json(body)
    assert expired_pin(pin, fake_chain()).failure_policy == FailurePolicy("first_chunk", 5000, None, 2000)
    del body["default"]["failure_policy"]
    assert expired_pin(ChainDocument.from_json(body), fake_chain()).failure_policy is None


def test_a_signed_document_with_a_policy_verifies() -> None:
    pytest.importorskip("cryptography")
    from document_signing import SigningKey

    from chainclient.signatures import TrustedKeys

    key = SigningKey.generate("k1")
    parsed = ChainDocument.from_json(json.loads(json.dumps(key.sign(served_json(failure_policy=WIRE)))))
    trusted = TrustedKeys.load(key.trusted())
    assert trusted.refusal(parsed.to_json()) is None
    tampered = parsed.to_json()
    tampered["failure_policy"]["commit"] = "first_chunk"
    assert trusted.refusal(tampered) is not None


# --- same-step retry ---------------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("router_kind")


def fakes_for(specs: dict[str, Any] | None = None) -> FakeProviders:
    """The shared fakes, on a test clock: a retry's wait advances it."""
    return shared_fakes_for(specs, FakeClock())


def flaky(fakes: FakeProviders, *failures: Exception) -> list[float]:
    """alpha raises each of ``failures`` in turn, then answers; returns when it was called."""
    calls: list[float] = []
    left = list(failures)

    def alpha(step: Step, request: Any, timeout_s: float) -> Any:
        calls.append(fakes.clock.now())
        if left:
            raise left.pop(0)
        return "alpha at last"

    fakes.configure({"alpha": alpha})
    return calls


def test_a_429_within_the_policys_wait_is_retried_on_the_same_step_after_its_retry_after() -> None:
    fakes = fakes_for()
    calls = flaky(fakes, ProviderError(429, True, "slow down", retry_after_s=1.0))
    router = make_router(fakes, document(RETRY), breaker=BreakerSettings())

    result = router.complete("hello")

    assert (result.provider, tried(result)) == ("alpha", ["alpha", "alpha"])
    assert calls[1] - calls[0] == pytest.approx(1.0)
    assert result.attempts[0].reason.endswith("; retrying the same step after 1s")
    assert str(result.receipt).splitlines()[1] == (
        "  failure policy of preset 'normal': commit first_chunk, retry the same step once (Retry-After up to 2000 ms)"
    )


def test_a_retry_after_past_the_policys_wait_goes_to_the_next_step() -> None:
    fakes = fakes_for()
    flaky(fakes, ProviderError(429, True, "slow down", retry_after_s=5.0))
    result = make_router(fakes, document(RETRY)).complete("hello")
    assert tried(result) == ["alpha", "beta"]


@pytest.mark.parametrize(
    "failure",
    [ProviderError(500, True, "oops"), ProviderError(503, False, "busy"), ProviderUnavailable("refused")],
    ids=["500", "503", "refused"],
)
def test_a_single_failure_is_retried_once_then_the_walk_moves_on(failure: Exception) -> None:
    fakes = fakes_for()
    flaky(fakes, failure)
    assert tried(make_router(fakes, document(RETRY)).complete("hello")) == ["alpha", "alpha"]

    fakes = fakes_for()
    flaky(fakes, failure, failure, failure)
    assert tried(make_router(fakes, document(RETRY)).complete("hello")) == ["alpha", "alpha", "beta"]


@pytest.mark.parametrize(
    "failure",
    [ProviderError(400, True, "bad"), ProviderError(401, True, "key"), ProviderError(502, True, "gateway")],
    ids=["400", "401", "502"],
)
def test_failures_a_retry_cannot_help_are_not_retried(failure: Exception) -> None:
    fakes = fakes_for()
    flaky(fakes, failure)
    router = make_router(fakes, document(RETRY))
    try:
        outcome: Any = router.complete("hello")
    except RequestRejected as rejected:
        outcome = rejected
    assert tried(outcome)[:2] != ["alpha", "alpha"]


def test_a_timeout_is_not_retried() -> None:
    fakes = fakes_for({"alpha": "timeout"})
    assert tried(make_router(fakes, document(RETRY)).complete("hello")) == ["alpha", "beta"]


def test_no_retry_that_would_start_past_the_deadline() -> None:
    fakes = fakes_for()
    flaky(fakes, ProviderError(429, True, "slow down", retry_after_s=2.0))
    router = make_router(fakes, document(RETRY), deadline_s=1.5)
    assert tried(router.complete("hello")) == ["alpha", "beta"]


def test_the_call_turns_the_retry_off_or_on_whatever_the_policy() -> None:
    fakes = fakes_for()
    flaky(fakes, ProviderError(500, True, "oops"))
    result = make_router(fakes, document(RETRY)).complete("hello", retry_same_step=False)
    assert tried(result) == ["alpha", "beta"]
    assert result.receipt.policy.endswith("; the call set retry_same_step")

    fakes = fakes_for()
    flaky(fakes, ProviderError(500, True, "oops"))
    result = make_router(fakes, document(None)).complete("hello", retry_same_step=True)
    assert tried(result) == ["alpha", "alpha"]
    assert result.receipt.policy == ""  # the document carries no policy


def test_without_a_policy_nothing_is_retried_and_the_receipt_says_nothing_of_one() -> None:
    fakes = fakes_for()
    flaky(fakes, ProviderError(500, True, "oops"))
    result = make_router(fakes, document(None)).complete("hello")
    assert tried(result) == ["alpha", "beta"]
    assert "failure policy" not in str(result)


def test_a_breaker_the_failure_opened_refuses_the_retry() -> None:
    fakes = fakes_for()
    flaky(fakes, ProviderError(500, True, "oops"))
    router = make_router(fakes, document(RETRY), breaker=BreakerSettings(failure_threshold=1))
    result = router.complete("hello")
    assert tried(result) == ["alpha", "beta"]
    assert "circuit breaker open" in dict(result.receipt.refused)[ALPHA]


def test_every_step_retried_once_and_failing_is_all_providers_failed() -> None:
    fakes = fakes_for({"alpha": 503, "beta": 503, "gamma": 503})
    with pytest.raises(AllProvidersFailed) as caught:
        make_router(fakes, document(RETRY)).complete("hello")
    assert tried(caught.value) == ["alpha", "alpha", "beta", "beta", "gamma", "gamma"]


@pytest.mark.parametrize("retry_after_s", [0.7, 0.1, 1.3])
def test_the_retry_after_a_retry_after_is_admitted_by_the_breaker_it_opened(retry_after_s: float) -> None:
    """The Retry-After holds the breaker exactly that long; the retry, waiting exactly that
    long, is its half-open probe (on a clock whose sums leave float remainders)."""
    clock = FakeClock(379.684)
    fakes = shared_fakes_for(None, clock)
    flaky(fakes, ProviderError(429, True, "slow down", retry_after_s=retry_after_s))
    router = make_router(fakes, document(RETRY), breaker=BreakerSettings())
    assert tried(router.complete("hello")) == ["alpha", "alpha"]
    assert router.breaker_state("alpha") == "closed"


# --- streams -----------------------------------------------------------------------------------

CUT = ProviderError(None, True, "connection broke mid-stream")
STREAM_KINDS = ("sync", "async")


def stream_router(kind: str, streams: FakeStreams, policy: FailurePolicy | None, **options: Any) -> Any:
    return make_stream_router(kind, streams, source=document(policy), **options)


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_with_commit_complete_a_stream_cut_after_content_falls_back_and_the_caller_sees_one_answer(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["Hel", "lo"], end=CUT)
    streams.script("beta", ["Hi", " there"])
    got, route, error = drain(stream_router(kind, streams, COMPLETE))
    assert (error, got) == (None, ["Hi", " there"])
    assert [a.provider for a in route.receipt.attempts] == ["alpha", "beta"]
    assert "commit complete" in route.receipt.policy


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_with_commit_complete_a_stall_before_the_end_falls_back(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["Hel", "lo", "!"], gap_s=3.0)
    streams.script("beta", ["Hi"])
    policy = FailurePolicy(commit="complete", idle_ms=2000)
    got, route, error = drain(stream_router(kind, streams, policy))
    assert (error, got) == (None, ["Hi"])
    assert route.receipt.attempts[0].outcome == "timeout"


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_with_commit_complete_a_whole_stream_is_handed_over_at_its_end(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["a", "b", "c"], gap_s=0.5)
    got, route, error = drain(stream_router(kind, streams, COMPLETE))
    assert (error, got, route.provider) == (None, ["a", "b", "c"], "alpha")


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_with_commit_first_chunk_the_same_cut_interrupts_the_stream(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["Hel", "lo"], end=CUT)
    streams.script("beta", ["Hi"])
    got, _, error = drain(stream_router(kind, streams, FailurePolicy(commit="first_chunk")))
    assert got == ["Hel", "lo"] and isinstance(error, StreamInterrupted)


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_the_calls_commit_point_overrides_the_policys(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["Hel", "lo"], end=CUT)
    got, route, error = drain(stream_router(kind, streams, COMPLETE), commit_after_chars=1)
    assert got == ["Hel", "lo"] and isinstance(error, StreamInterrupted)
    assert error.receipt.policy.endswith("; the call set commit_after_chars")


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_the_policys_first_chunk_bound_holds_unless_the_call_sets_its_own(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["late"], first_after_s=1.5)
    streams.script("beta", ["Hi"])
    got, route, _ = drain(stream_router(kind, streams, FailurePolicy(first_chunk_ms=1000)))
    assert got == ["Hi"] and route.receipt.attempts[0].outcome == "timeout"

    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["late"], first_after_s=1.5)
    got, _, _ = drain(stream_router(kind, streams, FailurePolicy(first_chunk_ms=1000)), first_chunk_s=2.0)
    assert got == ["late"]


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_a_stream_that_fails_to_open_is_retried_on_the_same_step(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["from alpha"], fails_with=503, failures=1)
    got, route, error = drain(stream_router(kind, streams, RETRY))
    assert (error, got, streams.attempts) == (None, ["from alpha"], ["alpha", "alpha"])
    assert route.receipt.attempts[0].reason.endswith("; retrying the same step after 0s")


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_a_stream_cut_after_content_is_never_retried_on_the_same_step(kind: str) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", ["Hel", "lo"], end=ProviderError(503, True, "cut"))
    got, _, error = drain(stream_router(kind, streams, RETRY))
    assert isinstance(error, StreamInterrupted) and streams.attempts == ["alpha"]


def test_a_policy_whose_wait_is_0_retries_only_at_once_even_when_the_call_turns_the_retry_on() -> None:
    at_once = FailurePolicy(retry_max_wait_ms=0)
    for retry_same_step in (None, True):
        fakes = fakes_for()
        flaky(fakes, ProviderError(429, True, "slow down", retry_after_s=0.5))
        result = make_router(fakes, document(at_once)).complete("hello", retry_same_step=retry_same_step)
        assert tried(result) == ["alpha", "beta"]
        fakes = fakes_for()
        flaky(fakes, ProviderError(500, True, "oops"))
        result = make_router(fakes, document(at_once)).complete("hello", retry_same_step=retry_same_step)
        assert tried(result) == ["alpha", "alpha"]
