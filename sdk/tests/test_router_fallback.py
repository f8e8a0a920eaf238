"""Which failures fall through, which stop, and what every request's receipt records."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import (
    AllProvidersFailed,
    ContentPolicyRejected,
    CredentialAlert,
    Provider,
    ProviderError,
    Registry,
    RequestRejected,
    RoutingError,
    Step,
)
from chainclient.testing import Spec

pytestmark = pytest.mark.usefixtures("router_kind")

# (failure pattern, content policy falls through?, providers called in order, how it ends:
#  the provider that served the request, or the error raised)
FALLBACK_TABLE: list[tuple[dict[str, Spec], bool, list[str], str | type[RoutingError]]] = [
    ({"alpha": 503}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 503, "beta": 502}, False, ["alpha", "beta", "gamma"], "gamma"),
    ({"alpha": 503, "beta": "timeout", "gamma": "unavailable"}, False, ["alpha", "beta", "gamma"], AllProvidersFailed),
    ({"alpha": 400}, False, ["alpha"], RequestRejected),
    ({"alpha": 422}, False, ["alpha"], RequestRejected),
    ({"alpha": 401}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 403}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 429}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 500}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 502}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 504}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 529}, False, ["alpha", "beta"], "beta"),
    ({"alpha": 404}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "timeout"}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "timeout_before_dispatch"}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "connection_refused"}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "unknown"}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "error"}, False, ["alpha", "beta"], "beta"),
    ({"alpha": "content_policy"}, False, ["alpha"], ContentPolicyRejected),
    ({"alpha": "content_policy"}, True, ["alpha", "beta"], "beta"),
    ({"alpha": 400, "beta": 503}, False, ["alpha"], RequestRejected),
    ({"alpha": 503, "beta": 422}, False, ["alpha", "beta"], RequestRejected),
]
FALLBACK_IDS = [
    "head-fails-second-serves",
    "two-fail-third-serves",
    "all-fail",
    "400-stops-at-once",
    "422-stops-at-once",
    "401-falls-through",
    "403-falls-through",
    "429-falls-through",
    "500-falls-through",
    "502-falls-through",
    "504-falls-through",
    "529-falls-through",
    "unclassified-404-falls-through",
    "timeout-falls-through",
    "timeout-before-dispatch-falls-through",
    "connection-refused-falls-through",
    "dropped-connection-without-status-falls-through",
    "transport-bug-falls-through",
    "content-policy-stops-by-default",
    "content-policy-falls-through-when-told",
    "head-400-never-reaches-beta",
    "rejection-after-a-fallback-stops-there",
]


@pytest.mark.parametrize(
    ("specs", "policy_falls_through", "expected_calls", "ending"), FALLBACK_TABLE, ids=FALLBACK_IDS
)
def test_each_failure_pattern_produces_its_exact_attempt_sequence(
    specs: dict[str, Spec],
    policy_falls_through: bool,
    expected_calls: list[str],
    ending: str | type[RoutingError],
) -> None:
    fakes = fakes_for(specs)
    router = make_router(fakes, fall_through_on_content_policy=policy_falls_through)

    if isinstance(ending, str):
        result = router.complete("hello")
        assert result.provider == ending
        assert result.value == f"answer from {ending}"
        assert tried(result) == expected_calls
        assert [a.outcome for a in result.attempts][-1] == "ok"
    else:
        with pytest.raises(ending) as caught:
            router.complete("hello")
        assert type(caught.value) is ending
        assert tried(caught.value) == expected_calls

    assert fakes.attempts == expected_calls


def test_all_failed_names_every_provider_with_its_last_error() -> None:
    fakes = fakes_for({"alpha": 503, "beta": "timeout", "gamma": "unavailable"})
    router = make_router(fakes)

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello", task_id="t-1")

    error = caught.value
    assert error.providers == ("alpha", "beta", "gamma")
    failures = error.failures
    assert (failures["alpha"].outcome, failures["alpha"].status) == ("failed", 503)
    beta, gamma = failures["beta"], failures["gamma"]
    assert (beta.outcome, beta.dispatch) == ("timeout", "dispatched_unknown")
    assert (gamma.outcome, gamma.dispatch) == ("unavailable", "not_dispatched")
    assert [a.attempt_id for a in error.attempts] == ["t-1-1", "t-1-2", "t-1-3"]
    assert error.task_id == "t-1"
    text = str(error)
    assert "alpha/chat (HTTP 503)" in text
    assert "beta/chat (timeout" in text
    assert "gamma/chat (unavailable" in text
    assert router.report()["all_failed"] == 1


def test_a_provider_listed_twice_is_named_with_its_last_error() -> None:
    fakes = fakes_for({"beta": 502})
    fakes.sequence("alpha", [503, 529])
    registry = Registry(
        {
            "alpha": Provider("alpha-us", {"chat": {"text"}, "big": {"text"}}),
            "beta": Provider("beta-us", {"chat": {"text"}}),
        }
    )
    chain = [Step("alpha", "chat", 1000), Step("alpha", "big", 1000), Step("beta", "chat", 1000)]
    router = make_router(fakes, chain, registry=registry)

    with pytest.raises(AllProvidersFailed) as caught:
        router.complete("hello")

    assert tried(caught.value) == ["alpha", "alpha", "beta"]
    assert caught.value.failures["alpha"].status == 529
    assert caught.value.failures["alpha"].model == "big"


@pytest.mark.parametrize("status", [401, 403], ids=["401", "403"])
def test_rejected_credentials_fall_through_and_raise_an_alert(status: int, caplog: pytest.LogCaptureFixture) -> None:
    alerts: list[CredentialAlert] = []
    fakes = fakes_for({"alpha": status})
    router = make_router(fakes, on_alert=alerts.append)

    with caplog.at_level(logging.ERROR, logger="chainclient.router"):
        result = router.complete("hello", task_id="t-9")

    assert result.provider == "beta"
    assert [(a.provider, a.status, a.attempt_id) for a in alerts] == [("alpha", status, "t-9-1")]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "alpha rejected our credentials" in errors[0].getMessage()
    assert f"HTTP {status}" in errors[0].getMessage()
    assert router.report()["credential_alerts"] == 1
    assert router.report()["recovered_success"] == 1


def test_an_alert_hook_that_raises_does_not_break_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_hook(alert: CredentialAlert) -> None:
        raise RuntimeError("pager is down")

    router = make_router(fakes_for({"alpha": 401}), on_alert=broken_hook)

    with caplog.at_level(logging.ERROR, logger="chainclient.router"):
        result = router.complete("hello")

    assert result.provider == "beta"
    assert any("on_alert hook raised" in r.getMessage() for r in caplog.records)


def test_rejection_carries_the_status_and_is_counted_as_a_rejection() -> None:
    router = make_router(fakes_for({"alpha": 422}))

    with pytest.raises(RequestRejected) as caught:
        router.complete("hello")

    assert caught.value.status == 422
    assert caught.value.attempts[0].outcome == "rejected"
    assert router.report()["rejections"] == 1
    assert router.report()["all_failed"] == 0


def test_a_transport_bug_is_recorded_with_an_unknown_outcome() -> None:
    fakes = fakes_for()
    fakes.error("alpha", KeyError("choices"))
    router = make_router(fakes)

    result = router.complete("hello")

    first = result.attempts[0]
    assert (first.outcome, first.dispatch) == ("error", "dispatched_unknown")
    assert "KeyError" in first.error


def test_twenty_concurrent_requests_each_walk_their_own_snapshot() -> None:
    requests = 20
    # Hold every request inside alpha until all twenty are there, so they truly overlap.
    everyone_in_alpha = threading.Barrier(requests)

    def alpha(step: Step, request: Any, timeout_s: float) -> Any:
        everyone_in_alpha.wait(timeout=5)
        raise ProviderError(503, True, "overloaded")

    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes)
    results: dict[int, list[str]] = {}
    task_ids: set[str] = set()
    lock = threading.Lock()

    def one_request(n: int) -> None:
        result = router.complete(f"request {n}")
        with lock:
            results[n] = tried(result)
            task_ids.add(result.task_id)

    threads = [threading.Thread(target=one_request, args=(n,)) for n in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert results == {n: ["alpha", "beta"] for n in range(requests)}
    assert len(task_ids) == requests
    assert sorted(fakes.attempts) == ["alpha"] * requests + ["beta"] * requests
    assert router.report()["recovered_success"] == requests
