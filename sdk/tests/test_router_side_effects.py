"""Requests with side effects are never silently repeated after an unknown outcome."""

from __future__ import annotations

import pytest
from router_fixtures import fakes_for, make_router, tried

from chainclient import OutcomeUnknown
from chainclient.testing import Spec

UNKNOWN_OUTCOMES: list[Spec] = ["timeout", "unknown", "error"]
UNKNOWN_IDS = ["timeout-after-dispatch", "dispatched-without-status", "transport-bug"]


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
    [("unavailable", "not_dispatched"), ("timeout_before_dispatch", "not_dispatched"), (503, "dispatched_known")],
    ids=["connection-refused", "timeout-before-dispatch", "known-503"],
)
def test_with_side_effects_a_known_outcome_still_falls_through(alpha: Spec, dispatch: str) -> None:
    fakes = fakes_for({"alpha": alpha})
    router = make_router(fakes)

    result = router.complete("send the invoice", side_effects=True)

    assert tried(result) == ["alpha", "beta"]
    assert result.attempts[0].dispatch == dispatch
