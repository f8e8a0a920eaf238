"""Test your fallback chain without vendors, sockets or sleeping.

``FakeProviders`` builds transports for ``Router`` defined by behaviour, not by any
vendor's schema, and records every call::

    clock = FakeClock()
    fakes = FakeProviders(clock=clock)
    fakes.configure({"alpha": 503, "beta": "timeout", "gamma": "ok"})
    router = Router(fake_chain(), transports=fakes.transports, registry=fake_registry(),
                    clock=clock)
    router.complete("hi").provider == "gamma"
    fakes.attempts == ["alpha", "beta", "gamma"]

Every provider named at construction (default: alpha, beta and gamma) answers ``"ok"``
until configured otherwise, so ``fakes.configure({"alpha": 503})`` is a whole test of "the
head fails, the second serves". Configure any other provider before building the Router (it
copies ``fakes.transports``); changing a behaviour afterwards is fine and takes effect on
its next call. ``fakes.async_transports`` are the same fakes for ``AsyncRouter``.

Fakes honour the attempt's timeout as a real transport must: a fake due to answer (or fail)
after ``after_s`` seconds raises ``ProviderTimeout(dispatched=True)`` instead when
``after_s`` exceeds the ``timeout_s`` the router gave it. With a ``FakeClock`` a fake
advances the clock by the time it took (``after_s``, or the whole ``timeout_s`` when it
timed out), so budget tests never sleep; without one, every fake returns at once.

``run_drill(router, {"hop": 1, "fault": "server_error", "share": 10})`` runs a failover
drill against a service's own Router (its fakes) in CI, and prints and returns the report
the control plane would: whether the chain's order holds when that hop fails.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, TypeAlias, TypeVar

from chainclient import drills
from chainclient.async_router import AsyncRouter, AsyncTransport
from chainclient.drills import DrillRequest, DrillTally
from chainclient.errors import (
    ContentPolicyRefusal,
    ContextLengthExceeded,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RoutingError,
)
from chainclient.receipts import Attempt
from chainclient.router import Router, Transport
from chainclient.types import ChainDocument, Drill, FailurePolicy, Provider, Registry, Step
from chainclient.wire import DRILL_FAULTS, DRILL_SHARE_MAX_BP, DRILL_SHARE_MIN_BP, latency_percentile

FAKE_PROVIDERS = ("alpha", "beta", "gamma")
FAKE_MODEL = "chat"
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


class FakeStream:
    """A scripted provider stream (``chainclient.streams``): yields ``chunks``, spending
    ``first_after_s`` before the first and ``gap_s`` before each later one on the fakes'
    clock, then ends as ``end`` says: ``"complete"``, or an exception to raise (a
    ``TransportError``: ``ProviderError(None, True, "...")`` for a cut or a stream without
    its terminal event). Synchronous and asynchronous at once; ``closed`` tells whether the
    router closed it."""

    def __init__(
        self,
        chunks: Sequence[Any],
        *,
        clock: FakeClock | None,
        first_after_s: float = 0.0,
        gap_s: float = 0.0,
        end: str | Exception = "complete",
        model_id: str | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        self._chunks = list(chunks)
        self._clock = clock
        self._first_after_s = first_after_s
        self._gap_s = gap_s
        self._end = end
        self._sent = 0
        self.closed = False
        self.model_id = model_id
        self.input_tokens: int | None = tokens[0] if tokens is not None else None
        self.output_tokens: int | None = tokens[1] if tokens is not None else None

    def __iter__(self) -> FakeStream:
        return self

    def __next__(self) -> Any:
        if self._sent >= len(self._chunks):
            if isinstance(self._end, Exception):
                raise self._end
            raise StopIteration
        wait = self._first_after_s if self._sent == 0 else self._gap_s
        if self._clock is not None and wait:
            self._clock.advance(wait)
        chunk = self._chunks[self._sent]
        self._sent += 1
        return chunk

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class FakeStreams:
    """Fake streaming transports keyed by provider name, for ``Router.stream`` (as
    ``stream_transports=``) and ``AsyncRouter.stream`` (``async_transports``).

    ``streams.script("alpha", ["Hel", "lo"], gap_s=0.1)`` streams those chunks; ``end=``
    breaks the stream at its end; ``fails_with=`` makes opening it raise (an HTTP status,
    or an exception): every time, or the first ``failures`` times (then it streams).
    ``opened`` lists each stream handed to the router, in order."""

    def __init__(self, clock: FakeClock | None = None, providers: Iterable[str] = FAKE_PROVIDERS) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._scripts: dict[str, Callable[[], FakeStream]] = {}
        self.opened: list[tuple[str, FakeStream]] = []
        for name in providers:
            self.script(name, [f"{name} ", "answers"])

    def script(
        self,
        name: str,
        chunks: Sequence[Any] = (),
        *,
        first_after_s: float = 0.0,
        gap_s: float = 0.0,
        end: str | Exception = "complete",
        fails_with: int | Exception | None = None,
        failures: int | None = None,
        model_id: str | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> FakeStreams:
        opens = itertools.count()

        def open_stream() -> FakeStream:
            failing = failures is None or next(opens) < failures
            if failing and isinstance(fails_with, int) and not isinstance(fails_with, bool):
                raise ProviderError(fails_with, True, f"fake {name} failed")
            if failing and isinstance(fails_with, Exception):
                raise fails_with
            return FakeStream(
                chunks,
                clock=self.clock,
                first_after_s=first_after_s,
                gap_s=gap_s,
                end=end,
                model_id=model_id,
                tokens=tokens,
            )

        self._scripts[name] = open_stream
        return self

    @property
    def transports(self) -> dict[str, Callable[[Step, Any, float], FakeStream]]:
        return {name: self._opener(name) for name in self._scripts}

    @property
    def async_transports(self) -> dict[str, Callable[[Step, Any, float], Any]]:
        def awaitable(name: str) -> Callable[[Step, Any, float], Any]:
            opener = self._opener(name)

            async def open_stream(step: Step, request: Any, timeout_s: float) -> FakeStream:
                return opener(step, request, timeout_s)

            return open_stream

        return {name: awaitable(name) for name in self._scripts}

    @property
    def attempts(self) -> list[str]:
        """Providers whose stream was opened (or failed to open), in order."""
        with self._lock:
            return [name for name, _ in self.opened]

    def _opener(self, name: str) -> Callable[[Step, Any, float], FakeStream]:
        def open_stream(step: Step, request: Any, timeout_s: float) -> FakeStream:
            try:
                stream = self._scripts[name]()
            except Exception:
                with self._lock:
                    self.opened.append((name, FakeStream((), clock=None)))
                raise
            with self._lock:
                self.opened.append((name, stream))
            return stream

        return open_stream


class FakeChainClient:
    """A stand-in for ``ChainClient``: ``current()`` returns whatever was last ``set()``;
    ``served`` counts, per provider, the successes a Router recorded (``record_served``);
    ``attempts`` lists every attempt it told (``record_attempt``) and ``breaker_openings``
    counts the breakers it opened (``record_breaker_opened``); ``drill_requests`` lists how
    each request routed in a failover drill ended (``record_drill``: the drill and a
    ``drills.DrillRequest``); ``registry``, if given, is the one a Router built on it uses
    (as a ChainClient's). It has no ``takes_part``: a Router then takes part in a drill of
    every service only, as a client without a token."""

    def __init__(self, chain: ChainDocument | Sequence[Step], *, registry: Registry | None = None) -> None:
        self.registry = registry
        self._document = _as_document(chain)
        self._lock = threading.Lock()
        self._served: dict[str, int] = {}
        self._attempts: list[Attempt] = []
        self._openings: dict[str, int] = {}
        self._drill_requests: list[tuple[Drill, DrillRequest]] = []

    def current(self) -> ChainDocument:
        return self._document

    def record_served(self, provider: str) -> None:
        with self._lock:
            self._served[provider] = self._served.get(provider, 0) + 1

    @property
    def served(self) -> dict[str, int]:
        """Requests served per provider, as ``ChainClient`` would report them."""
        with self._lock:
            return dict(self._served)

    def record_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts.append(attempt)

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt a Router recorded, in order (what ``ChainClient`` tallies for health)."""
        with self._lock:
            return list(self._attempts)

    def record_breaker_opened(self, provider: str) -> None:
        with self._lock:
            self._openings[provider] = self._openings.get(provider, 0) + 1

    @property
    def breaker_openings(self) -> dict[str, int]:
        """Circuit breaker openings per provider, as ``ChainClient`` would report them."""
        with self._lock:
            return dict(self._openings)

    def record_drill(self, drill: Drill, request: DrillRequest) -> None:
        with self._lock:
            self._drill_requests.append((drill, request))

    @property
    def drill_requests(self) -> list[tuple[Drill, DrillRequest]]:
        """How each request a Router routed in a drill ended, in order (what ``ChainClient``
        counts for the usage report's ``drill`` section)."""
        with self._lock:
            return list(self._drill_requests)

    def set(self, chain: ChainDocument | Sequence[Step]) -> None:
        """Make ``chain`` live, as a selection reaching the poller would."""
        self._document = _as_document(chain)


def fake_registry(
    names: Iterable[str] = FAKE_PROVIDERS,
    *,
    capabilities: Mapping[str, Iterable[str]] | None = None,
    destinations: Mapping[str, str] | None = None,
    context_windows: Mapping[str, int] | None = None,
) -> Registry:
    """A Registry with one model (``"chat"``) per fake provider.

    Capabilities default to ``{"text"}`` and destinations to ``"<name>-us"``; override them
    per provider, e.g. ``capabilities={"alpha": {"text", "images"}}``. ``context_windows``:
    the model's context window per provider, where known (``{"alpha": 8192}``).
    """
    capabilities = capabilities or {}
    destinations = destinations or {}
    context_windows = context_windows or {}
    return Registry(
        {
            name: Provider(
                destination=destinations.get(name, f"{name}-us"),
                models={FAKE_MODEL: frozenset(capabilities.get(name, ("text",)))},
                context_windows={FAKE_MODEL: context_windows[name]} if name in context_windows else {},
            )
            for name in names
        }
    )


def fake_chain(names: Iterable[str] = FAKE_PROVIDERS, *, timeout_ms: int = 10_000) -> list[Step]:
    """Steps for the fake providers in order, each with the same timeout."""
    return [Step(name, FAKE_MODEL, timeout_ms) for name in names]


def fake_document(
    chain: Sequence[Step] | None = None,
    *,
    preset: str = "test-preset",
    version: int = 1,
    marking: Mapping[str, Any] | None = None,
    name: str = "chat",
    failure_policy: FailurePolicy | None = None,
) -> ChainDocument:
    """A live-looking ChainDocument (default chain: alpha, beta, gamma), with the preset's
    ``failure_policy`` if given."""
    return ChainDocument(
        name=name,
        version=version,
        preset=preset,
        is_default=False,
        chain=tuple(chain if chain is not None else fake_chain()),
        marking=dict(marking) if marking is not None else {"degraded": False, "note": ""},
        updated_by="tests",
        reason="test document",
        updated_at=None,
        expires_at=None,
        failure_policy=failure_policy,
    )


def _as_document(chain: ChainDocument | Sequence[Step]) -> ChainDocument:
    return chain if isinstance(chain, ChainDocument) else fake_document(list(chain))


# --- failover drills in CI ------------------------------------------------------------------

_RUN_DRILL_ID = 1
# The keys of the control plane's drill API that a run reads; "services" is accepted and
# ignored (every request of a run is the one service's).
_SPEC_KEYS = ("hop", "fault", "share")

T = TypeVar("T")


class _DrillRun:
    """The source of a drill run's router: its document, with the drill; taking part; and a
    tally of what the router recorded, as a ChainClient keeps for its reports."""

    def __init__(self, document: ChainDocument) -> None:
        self.document = document
        self.tally = DrillTally()

    def current(self) -> ChainDocument:
        return self.document

    def takes_part(self, drill: Drill) -> bool:
        return True

    def record_drill(self, drill: Drill, request: DrillRequest) -> None:
        self.tally.record(drill.id, request)


def run_drill(
    router: Router | AsyncRouter,
    spec: Mapping[str, Any],
    *,
    request: Any = None,
    requests: int = 200,
    out: IO[str] | None = sys.stdout,
) -> dict[str, Any]:
    """Run failover drill ``spec`` against ``router`` (a service's own Router or AsyncRouter,
    with its fakes), print its report to ``out`` (None: print nothing) and return it.

    ``spec`` is what the control plane's drill API takes: ``{"hop": 1, "fault":
    "server_error", "share": 10}`` (``hop``: 1-based, never the chain's last step;
    ``fault``: one of ``wire.DRILL_FAULTS``; ``share``: percent, 0.1 to 25; ``services`` is
    ignored). ``requests`` requests (``request`` each) are routed with ``complete()`` through
    a copy of ``router`` (its transports, registry, clock and options; breakers and counts of
    its own) over the chain it serves now, carrying the drill. The report is the control
    plane's: a dict with ``hop``, ``fault``, ``share``, ``requests``, ``drilled``, ``ended_on``
    (drilled requests by the 1-based step that served them, keys as strings), ``failed``
    (drilled requests that ended in an error), ``deadline``, ``refusals``,
    ``fallback_attempts``, ``fallback_failures`` (attempts on step ``hop + 1`` by drilled
    requests, and those that did not serve), ``latency_ms`` (``{"drilled": {"p50", "p95"},
    "other": {...}}``: the upper bound of the ``wire.LATENCY_BOUNDS_MS`` bucket holding
    each quantile of the whole requests' durations, on the router's clock; None without
    data), ``verdict`` (``"passed"`` or ``"failed"``) and ``reasons``. It fails when no
    request was drilled, when a drilled request failed for the caller, or when the fallback
    hop failed more than 10 % of at least 20 attempts (``drills.verdict``). In a test::

        report = run_drill(router, {"hop": 1, "fault": "timeout", "share": 25}, out=None)
        assert report["verdict"] == "passed", report["reasons"]

    Raises ValueError naming what is wrong with ``spec`` or ``requests``. An ``AsyncRouter``
    is run on an event loop of its own (in a thread when the caller's runs one).
    """
    document = router._snapshot()
    drill_spec = _drill_spec(spec, steps=len(document.chain))
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
        raise ValueError(f"requests must be a positive whole number, got {requests!r}")
    now = time.time()
    # A window around now, as long as a drill may last: the run takes what the router's
    # clock says, never the wall clock's time.
    drill = Drill(
        _RUN_DRILL_ID,
        drill_spec["hop"],
        drill_spec["fault"],
        drill_spec["share_bp"],
        (),
        _instant(now - 60),
        _instant(now + 3600),
    )
    source = _DrillRun(dataclasses.replace(document, drill=drill))
    run = router._for_drill_run(source)
    if isinstance(run, AsyncRouter):
        async_run = run

        async def route_all() -> None:
            for _ in range(requests):
                try:
                    await async_run.complete(request)
                except RoutingError:
                    pass  # counted by the drill's tally

        _run_coroutine(route_all())
    else:
        for _ in range(requests):
            try:
                run.complete(request)
            except RoutingError:
                pass  # counted by the drill's tally
    counts = source.tally.take(drill.id)
    report = _drill_report(drill, counts, share=drill_spec["share"])
    if out is not None:
        print(drill_report_text(report, chain=document.chain, drill=drill), file=out)
    return report


def _drill_spec(spec: Mapping[str, Any], *, steps: int) -> dict[str, Any]:
    """``spec`` checked as the control plane checks it: hop, fault and share (percent)."""
    if not isinstance(spec, Mapping):
        raise ValueError("a drill spec is a mapping such as {'hop': 1, 'fault': 'server_error', 'share': 10}")
    unknown = sorted(set(spec) - {*_SPEC_KEYS, "services"})
    if unknown:
        raise ValueError(
            f"unknown drill spec key(s) {', '.join(map(repr, unknown))}: a run takes hop, fault and share "
            "(services is ignored)"
        )
    missing = [key for key in _SPEC_KEYS if key not in spec]
    if missing:
        raise ValueError(f"the drill spec lacks {', '.join(map(repr, missing))}: it takes hop, fault and share")
    hop, fault, share = spec["hop"], spec["fault"], spec["share"]
    if steps < 2:
        raise ValueError("the router's chain has one step: there is no fallback to drill")
    if isinstance(hop, bool) or not isinstance(hop, int) or not 1 <= hop < steps:
        raise ValueError(
            f"hop must be a step of the chain but its last (1..{steps - 1}: the chain has {steps} steps), got {hop!r}"
        )
    if fault not in DRILL_FAULTS:
        raise ValueError(f"fault {fault!r} is not a fault a drill knows: use one of {', '.join(DRILL_FAULTS)}")
    low, high = DRILL_SHARE_MIN_BP / 100, DRILL_SHARE_MAX_BP / 100
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share):
        raise ValueError(f"share is a percentage of requests, from {low:g} to {high:g}, got {share!r}")
    share_bp = round(share * 100)
    if not DRILL_SHARE_MIN_BP <= share_bp <= DRILL_SHARE_MAX_BP:
        raise ValueError(f"share {share:g} % is out of range: drill from {low:g} % to {high:g} % of requests")
    return {"hop": hop, "fault": fault, "share": share, "share_bp": share_bp}


def _drill_report(drill: Drill, counts: drills.DrillCounts, *, share: float) -> dict[str, Any]:
    verdict, reasons = drills.verdict(counts, hop=drill.hop)
    return {
        "hop": drill.hop,
        "fault": drill.fault,
        "share": share,
        "requests": counts.requests,
        "drilled": counts.drilled,
        "ended_on": {str(step): count for step, count in sorted(counts.ended_on.items())},
        "failed": counts.failed,
        "deadline": counts.deadline,
        "refusals": counts.refusals,
        "fallback_attempts": counts.fallback_attempts,
        "fallback_failures": counts.fallback_failures,
        "latency_ms": {
            "drilled": {
                "p50": latency_percentile(counts.latency_drilled, 0.5),
                "p95": latency_percentile(counts.latency_drilled, 0.95),
            },
            "other": {
                "p50": latency_percentile(counts.latency_other, 0.5),
                "p95": latency_percentile(counts.latency_other, 0.95),
            },
        },
        "verdict": verdict,
        "reasons": reasons,
    }


def drill_report_text(report: Mapping[str, Any], *, chain: Sequence[Step], drill: Drill) -> str:
    """A drill run's report as ``run_drill`` prints it (the lines of ``manage.py drill
    report`` that a run has)."""
    latency = report["latency_ms"]

    def ms(value: int | None) -> str:
        return "-" if value is None else str(value)

    ended_on = ", ".join(f"hop {hop}: {count}" for hop, count in report["ended_on"].items()) or "none"
    share = f" ({100 * report['drilled'] / report['requests']:.1f} %)" if report["requests"] else ""
    return "\n".join(
        [
            f"drill run: {drills.describe(drill, chain)}",
            f"verdict: {report['verdict']}",
            *(f"  - {reason}" for reason in report["reasons"]),
            f"drilled {report['drilled']} of {report['requests']} requests{share}; ended on: {ended_on}",
            f"failed for the caller: {report['failed']} (deadline {report['deadline']}, refused {report['refusals']})",
            f"fallback hop {report['hop'] + 1}: {report['fallback_attempts']} attempts, "
            f"{report['fallback_failures']} failed",
            f"latency p50/p95 ms: drilled {ms(latency['drilled']['p50'])}/{ms(latency['drilled']['p95'])}, "
            f"not drilled {ms(latency['other']['p50'])}/{ms(latency['other']['p95'])}",
        ]
    )


def _instant(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch_s))


def _run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)``, on a thread of its own when this thread already runs an
    event loop, with this thread's context either way."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(contextvars.copy_context().run, asyncio.run, coroutine).result()


__all__ = [
    "FAKE_MODEL",
    "FAKE_PROVIDERS",
    "FakeCall",
    "FakeChainClient",
    "FakeClock",
    "FakeProviders",
    "FakeStream",
    "FakeStreams",
    "Spec",
    "fake_chain",
    "fake_document",
    "fake_registry",
    "run_drill",
]
