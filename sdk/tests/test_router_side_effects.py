"""Requests with side effects are never silently repeated after an unknown outcome, nor
redone elsewhere after a provider acted and its answer failed ``verify``."""

from __future__ import annotations

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import OutcomeUnknown, VerificationFailed
from chainclient.testing import Spec

pytestmark = pytest.mark.usefixtures("router_kind")

# Answers after dispatch that do not establish whether the provider acted.
UNKNOWN_OUTCOMES: list[Spec] = ["timeout", "unknown", "error", 502, 504]
UNKNOWN_IDS = ["timeout-after-dispatch", "connection-reset-after-send", "transport-bug", "502-gateway", "504-gateway"]


@pytest.mark.parametrize("alpha", UNKNOWN_OUTCOMES, ids=UNKNOWN_IDS)
def test_an_unknown_outcome_with_side_effects_stops_with_nothing_else_attempted(
    alpha: Spec,
) -> None:
    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes)

    with pytest.raises(OutcomeUnknown) as caught:
        router.complete("send the invoice", side_effects=True)

    assert fakes.attempts == ["alpha"]
    assert caught.value.attempt.dispatch == "dispatched_unknown"
    assert "may have acted" in str(caught.value)
    assert router.report()["unresolved"] == 1
    assert router.report()["all_failed"] == 0


@pytest.mark.parametrize("alpha", UNKNOWN_OUTCOMES, ids=UNKNOWN_IDS)
def test_without_side_effects_an_unknown_outcome_falls_through_and_is_recorded(
    alpha: Spec,
) -> None:
    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes)

    result = router.complete("summarise this")

    assert tried(result) == ["alpha", "beta"]
    assert result.attempts[0].dispatch == "dispatched_unknown"
    assert "safe to try the next step" in result.attempts[0].reason


@pytest.mark.parametrize(
    ("alpha", "dispatch"),
    [
        ("unavailable", "not_dispatched"),
        ("timeout_before_dispatch", "not_dispatched"),
        (503, "dispatched_known"),
        (429, "dispatched_known"),
        (500, "dispatched_known"),
        (529, "dispatched_known"),
    ],
    ids=["connection-refused", "timeout-before-dispatch", "known-503", "known-429", "known-500", "known-529"],
)
def test_with_side_effects_a_known_outcome_still_falls_through(alpha: Spec, dispatch: str) -> None:
    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes)

    result = router.complete("send the invoice", side_effects=True)

    assert tried(result) == ["alpha", "beta"]
    assert result.attempts[0].dispatch == dispatch


def test_a_gateway_error_before_dispatch_is_known_and_falls_through_with_side_effects() -> None:
    fakes = fakes_for()
    fakes.fail("alpha", 502, dispatched=False)
    router = make_router(fakes)

    result = router.complete("send the invoice", side_effects=True)

    assert tried(result) == ["alpha", "beta"]
    assert result.attempts[0].dispatch == "not_dispatched"


def test_a_failed_verify_with_side_effects_stops_with_its_own_error_and_receipt() -> None:
    fakes = fakes_for({"alpha": 503})
    router = make_router(fakes)

    with pytest.raises(VerificationFailed) as caught:
        router.complete("send the invoice", side_effects=True, verify=lambda value: False, task_id="inv-1")

    assert fakes.attempts == ["alpha", "beta"]  # a known failure still falls through
    assert caught.value.attempt.provider == "beta"
    assert caught.value.attempt.outcome == "verify_failed"
    assert caught.value.attempt.dispatch == "dispatched_known"
    assert "nothing else was tried" in str(caught.value)
    assert "task inv-1" in str(caught.value)  # the receipt follows the headline
    assert router.report()["verify_failed"] == 1


def test_a_failed_verify_without_side_effects_falls_through() -> None:
    fakes = fakes_for()
    router = make_router(fakes)

    result = router.complete("summarise", verify=lambda value: value != "answer from alpha")

    assert tried(result) == ["alpha", "beta"]
    assert result.attempts[0].outcome == "verify_failed"
