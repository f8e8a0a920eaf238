"""The options a ``ChainClient`` is built with, checked before anything starts.

A client that cannot run as asked fails at construction, naming the option: a blank chain,
a duration that is not a positive number of seconds, a long-poll wait past what the control
plane holds, a source that cannot be trusted or reached as asked (published documents
without trusted keys, the control plane without a token), a value that would break an HTTP
header, or a compiled-in default the service cannot route.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping, Sequence

from chainclient.types import Registry, Step
from chainclient.wire import MAX_WAIT_S


def default_instance() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def check_options(chain: str, *, durations: dict[str, float], wait_s: float, environment: str | None = None) -> None:
    """Raise ValueError naming the first option a client cannot run with."""
    if not isinstance(chain, str) or not chain.strip():
        raise ValueError("chain must be a non-empty string")
    if environment is not None and (not isinstance(environment, str) or not environment.strip()):
        raise ValueError("environment must be a non-empty string (e.g. 'production'), or None for any")
    for label, seconds in durations.items():
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"{label} must be a positive number of seconds")
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise ValueError(f"wait_s must be within 0..{MAX_WAIT_S:g}")


def check_source(*, published: bool, token: str | None, trusted_keys: Mapping[str, str] | None) -> None:
    """Raise ValueError when what the client reads from cannot be trusted or reached as asked."""
    if published and trusted_keys is None:
        raise ValueError(
            "published=True needs trusted_keys: documents from a static host or bucket are applied only when "
            "the control plane's signature verifies (manage.py signing_keys public --format json prints the keys)"
        )
    if not published and not token:
        raise ValueError(
            "token is required: a service token of the control plane (manage.py create_token NAME); "
            "only a client of published documents (published=True) polls without one"
        )


def check_header_values(values: dict[str, str]) -> None:
    """Raise ValueError for a value that would break (or inject into) an HTTP header."""
    for label, value in values.items():
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"{label} must be a string usable in an HTTP header")


def routable_steps(default: Sequence[Step], registry: Registry) -> tuple[Step, ...]:
    """The compiled-in default steps, checked: one the service cannot route is a build bug,
    so it fails at start-up rather than when a pin expires onto it."""
    steps = tuple(default)
    if not all(isinstance(step, Step) for step in steps):
        raise TypeError("default must be a sequence of Step")
    registry.validate_steps(steps)
    return steps


__all__ = ["check_header_values", "check_options", "check_source", "default_instance", "routable_steps"]
