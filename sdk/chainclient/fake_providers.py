"""Fake transports defined by behaviour, and the clock they spend: ``FakeProviders`` and
``FakeClock``, importable from ``chainclient.testing`` (whose docstring shows them at work).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from chainclient.async_router import AsyncTransport
from chainclient.errors import (
    ContentPolicyRefusal,
    ContextLengthExceeded,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
)
from chainclient.fake_chains import FAKE_PROVIDERS
from chainclient.router import Transport
from chainclient.types import Step

_NAMED_ANSWER: Any = object()

Spec: TypeAlias = "int | str | Transport"
"""What ``FakeProviders.configure`` accepts per provider:

- ``"ok"``: answers ``"answer from <name>"`` (what every provider named at construction
  does until configured);
- an ``int`` HTTP status (``503``, ``400``, ``401``, ...): raises ``ProviderError(status)``;
- ``"timeout"``: raises ``ProviderTimeout(dispatched=True)`` (the request was sent);
- ``"timeout_before_dispatch"``: raises ``ProviderTimeout(dispatched=False)``;
- ``"unavailable"`` or ``"connection_refused"``: raises ``ProviderUnavailable``;
- ``"content_policy"``: raises ``ContentPolicyRefusal``;
- ``"context_length"``: raises ``ContextLengthExceeded`` (the request is over the model's
  context window);
- ``"unknown"``: raises ``ProviderError(None, dispatched=True)`` (sent, no status back);
- ``"error"``: raises ``RuntimeError`` (a transport bug);
- a callable ``(step, request, timeout_s) -> value``: called as the transport (for
  ``async_transports`` it may be a coroutine function).
"""


class FakeClock:
    """A monotonic clock that moves only when told to; pass it to ``Router(clock=...)``."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._lock = threading.Lock()
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        with self._lock:
            self._now += seconds


@dataclass(frozen=True)
class FakeCall:
    """One call a fake transport received."""

    provider: str
    model: str
    request: Any
    timeout_s: float


class FakeProviders:
    """Fake transports keyed by provider name; each records its calls (thread-safe).

    Every behaviour method returns the fakes, so they chain:
    ``FakeProviders().fail("alpha", status=503).ok("beta")``. ``providers`` answer ``"ok"``
    until configured otherwise.
    """

    def __init__(self, clock: FakeClock | None = None, providers: Iterable[str] = FAKE_PROVIDERS) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._calls: list[FakeCall] = []
        self._behaviours: dict[str, Transport] = {}
        self._transports: dict[str, Transport] = {}
        for name in providers:
            self.ok(name)

    # --- behaviours ----------------------------------------------------------------------

    def ok(self, name: str, value: Any = _NAMED_ANSWER, *, after_s: float = 0.0) -> FakeProviders:
        """Answer with ``value`` (default ``"answer from <name>"``)."""
        answer = f"answer from {name}" if value is _NAMED_ANSWER else value

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            return answer

        return self._set(name, behave)

    def fail(
        self,
        name: str,
        status: int | None = 503,
        *,
        dispatched: bool = True,
        message: str = "",
        after_s: float = 0.0,
    ) -> FakeProviders:
        """Raise ``ProviderError(status, dispatched, message)``."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            raise ProviderError(status, dispatched, message or f"fake {name} failed")

        return self._set(name, behave)

    def timeout(self, name: str, *, dispatched: bool = True, after_s: float | None = None) -> FakeProviders:
        """Raise ``ProviderTimeout(dispatched)`` after ``after_s`` (default, or when
        ``after_s`` is longer: the whole ``timeout_s`` the router allowed this call)."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._advance(timeout_s if after_s is None else min(after_s, timeout_s))
            raise ProviderTimeout(dispatched)

        return self._set(name, behave)

    def unavailable(self, name: str, *, after_s: float = 0.0) -> FakeProviders:
        """Raise ``ProviderUnavailable`` (connection refused; nothing was sent)."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            raise ProviderUnavailable(f"fake {name}: connection refused")

        return self._set(name, behave)

    def content_policy(self, name: str, *, after_s: float = 0.0) -> FakeProviders:
        """Raise ``ContentPolicyRefusal``."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            raise ContentPolicyRefusal(f"fake {name}: content policy")

        return self._set(name, behave)

    def context_length(self, name: str, *, after_s: float = 0.0) -> FakeProviders:
        """Raise ``ContextLengthExceeded``: the request is over the model's context window."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            raise ContextLengthExceeded(True, f"fake {name}: context length exceeded")

        return self._set(name, behave)

    def error(self, name: str, exc: Exception | None = None, *, after_s: float = 0.0) -> FakeProviders:
        """Raise an unexpected exception (default ``RuntimeError``), as a buggy transport
        would."""

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            self._spend(name, after_s, timeout_s)
            raise exc if exc is not None else RuntimeError(f"fake {name}: transport bug")

        return self._set(name, behave)

    def sequence(self, name: str, specs: Sequence[Spec]) -> FakeProviders:
        """Behave as ``specs[0]`` on the first call, ``specs[1]`` on the second, ...; the
        last spec repeats. E.g. ``fakes.sequence("alpha", [503, 503, "ok"])``."""
        if not specs:
            raise ValueError("sequence() needs at least one spec")
        behaviours = [self._from_spec(name, spec) for spec in specs]
        calls = iter(range(len(behaviours)))
        lock = threading.Lock()

        def behave(step: Step, request: Any, timeout_s: float) -> Any:
            with lock:
                index = next(calls, len(behaviours) - 1)
            return behaviours[index](step, request, timeout_s)

        return self._set(name, behave)

    def configure(self, specs: Mapping[str, Spec]) -> FakeProviders:
        """Set several providers at once: ``{"alpha": 503, "beta": "timeout", "gamma": "ok"}``.
        Accepted values are listed in ``chainclient.testing.Spec``."""
        for name, spec in specs.items():
            self._set(name, self._from_spec(name, spec))
        return self

    # --- what tests read ---------------------------------------------------------------

    @property
    def transports(self) -> dict[str, Transport]:
        """The ``transports=`` mapping for ``Router``: one recording callable per provider."""
        return dict(self._transports)

    @property
    def async_transports(self) -> dict[str, AsyncTransport]:
        """The same fakes for ``AsyncRouter``: one recording coroutine function per provider.

        A fake never really waits: with a ``FakeClock`` it spends fake time, as the
        synchronous ones do, so an asyncio test's budget never sleeps either."""
        return {name: _awaitable(call) for name, call in self._transports.items()}

    @property
    def attempts(self) -> list[str]:
        """Provider names in the order they were called."""
        with self._lock:
            return [call.provider for call in self._calls]

    @property
    def calls(self) -> list[FakeCall]:
        """Every call received, in order (provider, model, request, timeout_s)."""
        with self._lock:
            return list(self._calls)

    def clear(self) -> None:
        """Forget the calls recorded so far (behaviours stay)."""
        with self._lock:
            self._calls.clear()

    # --- internals -----------------------------------------------------------------------

    def _set(self, name: str, behave: Transport) -> FakeProviders:
        self._behaviours[name] = behave
        if name not in self._transports:
            self._transports[name] = self._recorder(name)
        return self

    def _recorder(self, name: str) -> Transport:
        def call(step: Step, request: Any, timeout_s: float) -> Any:
            with self._lock:
                self._calls.append(FakeCall(step.provider, step.model, request, timeout_s))
            # Looked up per call so a test can change a provider's behaviour mid-test.
            return self._behaviours[name](step, request, timeout_s)

        return call

    def _spend(self, name: str, seconds: float, timeout_s: float) -> None:
        """Take ``seconds`` to answer, as a real call would, within ``timeout_s``: a call due
        later times out at ``timeout_s`` instead, as a transport passing its timeout on
        to the vendor's client does."""
        if seconds > timeout_s:
            self._advance(timeout_s)
            raise ProviderTimeout(True, f"fake {name}: due after {seconds:g}s, past its {timeout_s:g}s timeout")
        self._advance(seconds)

    def _advance(self, seconds: float) -> None:
        if self.clock is not None and seconds:
            self.clock.advance(seconds)

    def _from_spec(self, name: str, spec: Spec) -> Transport:
        if callable(spec):
            return spec
        if isinstance(spec, bool):
            raise TypeError(f"{name}: a spec is a status, a keyword or a callable, not a bool")
        scratch = FakeProviders(self.clock, providers=())
        if isinstance(spec, int):
            scratch.fail(name, spec)
        elif isinstance(spec, str) and spec in _KEYWORDS:
            _KEYWORDS[spec](scratch, name)
        else:
            raise ValueError(
                f"{name}: unknown spec {spec!r}; use 'ok', an HTTP status, 'timeout', "
                "'timeout_before_dispatch', 'unavailable', 'connection_refused', "
                "'content_policy', 'context_length', 'unknown', 'error' or a callable"
            )
        return scratch._behaviours[name]


def _awaitable(call: Transport) -> AsyncTransport:
    """``call`` as a coroutine function; a result that is itself awaitable is awaited."""

    async def acall(step: Step, request: Any, timeout_s: float) -> Any:
        value = call(step, request, timeout_s)
        if inspect.isawaitable(value):
            value = await value
        return value

    return acall


# The keyword specs ``configure`` accepts, each as the behaviour method it stands for.
_KEYWORDS: dict[str, Callable[[FakeProviders, str], FakeProviders]] = {
    "ok": lambda fakes, name: fakes.ok(name),
    "timeout": lambda fakes, name: fakes.timeout(name, dispatched=True),
    "timeout_before_dispatch": lambda fakes, name: fakes.timeout(name, dispatched=False),
    "unavailable": lambda fakes, name: fakes.unavailable(name),
    "connection_refused": lambda fakes, name: fakes.unavailable(name),
    "content_policy": lambda fakes, name: fakes.content_policy(name),
    "context_length": lambda fakes, name: fakes.context_length(name),
    "unknown": lambda fakes, name: fakes.fail(name, None, dispatched=True, message="connection dropped after send"),
    "error": lambda fakes, name: fakes.error(name),
}


__all__ = ["FakeCall", "FakeClock", "FakeProviders", "Spec"]
