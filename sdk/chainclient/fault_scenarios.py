"""The fault provider's scenarios, their parameters, and the plan each request is answered by.

``SCENARIOS`` and ``DEFAULT_PARAMS`` are listed and explained in ``fault_provider``'s
docstring; a ``Plan`` is one scenario with its parameters filled in from the defaults
(``plan_of()`` refuses an unknown scenario or parameter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

SCENARIOS: tuple[str, ...] = (
    "ok",
    "rate_limited",
    "server_error",
    "unavailable",
    "overloaded",
    "unauthorized",
    "context_length",
    "content_policy_400",
    "content_filter",
    "connection_refused",
    "reset_before_headers",
    "reset_mid_stream",
    "no_headers",
    "first_chunk_late",
    "silence_after_first_chunk",
    "no_terminal_event",
    "malformed_chunk",
    "wrong_model",
    "error_event",
)

DEFAULT_PARAMS: Mapping[str, Any] = {
    "chunks": 5,
    "chunk_interval_s": 0.0,
    "end_delay_s": 0.0,
    "retry_after": 1,
    "chunks_before": 2,
    "hang_s": 30.0,
    "delay_s": 5.0,
    "model": "substituted-model-2026",
    "error_type": "overloaded_error",
    "content_type": "application/json",
}

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

Vendor: TypeAlias = Literal["openai", "anthropic"]
PlanSpec: TypeAlias = "str | tuple[str, Mapping[str, Any]]"
"""What ``sequence()`` takes per request: a scenario, or a ``(scenario, params)`` pair."""

# The statuses the error scenarios answer with.
STATUS_SCENARIOS: Mapping[str, int] = {
    "rate_limited": 429,
    "server_error": 500,
    "unavailable": 503,
    "overloaded": 529,
    "unauthorized": 401,
    "context_length": 400,
    "content_policy_400": 400,
}


@dataclass(frozen=True)
class Plan:
    """How to answer one request: a scenario and its parameters (``plan["chunks"]``)."""

    scenario: str
    params: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.params[name]


def plan_of(scenario: str, params: Mapping[str, Any]) -> Plan:
    """``scenario`` with ``params`` over the defaults; ValueError or TypeError naming what
    is unknown."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of: {', '.join(SCENARIOS)}")
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        raise TypeError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_PARAMS)}")
    return Plan(scenario, {**DEFAULT_PARAMS, **params})


__all__ = [
    "ANTHROPIC_PATH",
    "DEFAULT_PARAMS",
    "OPENAI_PATH",
    "SCENARIOS",
    "STATUS_SCENARIOS",
    "Plan",
    "PlanSpec",
    "Vendor",
    "plan_of",
]
