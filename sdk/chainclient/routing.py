"""The walk's policy, shared by ``Router`` and ``AsyncRouter``: everything but the call.

Per request a router takes one snapshot of the chain (``current()`` is read once), then
walks it in order. Before every attempt it runs admission (the contract, from
``admission``; ``allow_fallback``; the provider's circuit breaker, from ``breaker``), gives
the attempt ``min(step timeout, time left in the request's budget)``, classifies how the
call went (``outcomes.classify``: the status table lives there), and either returns, moves
on to the next step, or stops. Every attempt is recorded in the request's receipt
(``receipts``), which results and errors carry, and is a span when the service uses
OpenTelemetry (``tracing``).

``RouterCore`` owns that policy: admission, the budget, what an attempt's outcome leads to,
and what follows (the counts in ``report()``, credential alerts, usage and health
accounting, the warnings about providers without a transport). The two routers differ only in how they
call a transport: ``router.Router`` calls it, ``async_router.AsyncRouter`` awaits it.

Failover drills (``drills``) are injected here too: a request that begins while the snapshot
carries an active drill its source takes part in (``_begin``) may be drilled when its walk is
admitted at the drilled hop (``_turn``, a deterministic share per router); its attempt there
is then no call but the drill's fault (``_settle``), recorded in the receipt (``_record``)
and never told to the breaker, the health tally or the credential alerts. A router only
waits when the fault is a timeout (``_drill_pause``). Without a drill in the document the
cost is one attribute check per request and one per attempt.
"""

from __future__ import annotations

import copy
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from random import getrandbits
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from chainclient.admission import NO_CONTRACT, Contract, ContractCheck
from chainclient.breaker import DEFAULT_BREAKER, BreakerSettings, BreakerState, CircuitBreaker
from chainclient.drills import INJECTED, WAITING_FAULTS, DrillRequest
from chainclient.errors import (
    AllProvidersFailed,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    RequestRejected,
    RoutingError,
    StreamInterrupted,
    VerificationFailed,
)
from chainclient.outcomes import Action, Verdict, classify
from chainclient.receipts import (
    DISPATCHED_KNOWN,
    DISPATCHED_UNKNOWN,
    NOT_DISPATCHED,
    Answer,
    Attempt,
    CredentialAlert,
    RouteResult,
    token_count,
)
from chainclient.streaming import StreamBounds, StreamProgress
from chainclient.tracing import AttemptSpan, attempt_ended, attempt_interrupted, attempt_started
from chainclient.types import ChainDocument, Drill, Registry, Step
from chainclient.walk import Walk
from chainclient.wire import FAILURE_POLICY_RETRY_MAX_WAIT_MS

logger = logging.getLogger("chainclient.router")

REPORT_KEYS = (
    "first_attempt_success",
    "recovered_success",
    "refusals",
    "rejections",
    "all_failed",
    "deadline",
    "unresolved",
    "verify_failed",
    "credential_alerts",
    "skipped_no_transport",
    "interrupted",
)
# How each ending is counted in ``report()``; the first matching type wins.
_ENDINGS: tuple[tuple[type[RoutingError], str], ...] = (
    (StreamInterrupted, "interrupted"),
    (OutcomeUnknown, "unresolved"),
    (VerificationFailed, "verify_failed"),
    (RequestRejected, "rejections"),  # ContentPolicyRejected included
    (NoEligibleRoute, "refusals"),
    (DeadlineExceeded, "deadline"),
    (AllProvidersFailed, "all_failed"),
)


class Clock(Protocol):
    """A monotonic clock in seconds; ``chainclient.testing.FakeClock`` is one. A clock that
    also has ``advance(seconds)`` (a FakeClock does) is advanced, not waited on, when a
    drill injects a timeout."""

    def now(self) -> float: ...


class ChainSource(Protocol):
    """Anything with a non-blocking ``current()`` returning the live chain (a ChainClient).

    If it also has ``record_served(provider)`` (a ChainClient does), the router calls it
    on every successful result, for the client's usage reports; ``record_attempt(attempt)``,
    on every attempt it settles (served or not), and ``record_breaker_opened(provider)``,
    whenever a provider's circuit breaker opens, for the provider health in those reports.
    Failover drills: ``takes_part(drill) -> bool`` says whether the source's service takes
    part in a drill its document carries (without it: only in a drill of every service), and
    ``record_drill(drill, request)`` is told how each request routed while the drill was
    active ended (a ``drills.DrillRequest``), for the reports' ``drill`` section.
    If it has a ``registry`` (a ChainClient does), the router uses it unless given one.
    Each hook is looked up once, when the router is built.
    """

    def current(self) -> ChainDocument: ...


class Turn(NamedTuple):
    """A step admitted for one attempt: its share of the budget, when it started, and its
    OpenTelemetry span (None without OpenTelemetry: see ``tracing``). ``drill``: the drill
    whose fault this attempt is (no call is made; ``breaker`` is then None)."""

    step: Step
    timeout: float
    breaker: CircuitBreaker | None
    started: float
    span: AttemptSpan | None = None
    drill: Drill | None = None


class Pause(NamedTuple):
    """What the walk yields before a step's same-step retry: its driver waits ``seconds`` (in
    the caller's thread, or awaited), then sends anything back."""

    seconds: float


# The failures a same-step retry is for: the provider said it did not act and to come back
# (429, 503, 529) or failed once (500). A gateway's 502 or 504 may have acted; 401 and 403
# will not change within a second; a timeout would spend the step's whole timeout again.
RETRY_SAME_STEP_STATUSES = frozenset({429, 500, 503, 529})
# Python's largest int: a stream whose policy commits it complete holds every chunk until it ends.
COMPLETE = sys.maxsize


def set_by_call(
    commit_after_chars: int | None, first_chunk_s: float | None, idle_s: float | None, retry_same_step: bool | None
) -> tuple[str, ...]:
    """The stream's arguments the call gave, which override a failure policy's settings (for
    its receipt)."""
    given = (
        ("commit_after_chars", commit_after_chars),
        ("first_chunk_s", first_chunk_s),
        ("idle_s", idle_s),
        ("retry_same_step", retry_same_step),
    )
    return tuple(name for name, value in given if value is not None)


TransportT = TypeVar("TransportT")
RouterT = TypeVar("RouterT", bound="RouterCore[Any]")


class RouterCore(Generic[TransportT]):
    """What both routers share, including their options (see ``Router``); ``TransportT`` is
    the kind of transport the router calls."""

    def __init__(
        self,
        source: ChainSource | ChainDocument | Sequence[Step],
        *,
        transports: Mapping[str, TransportT],
        registry: Registry | None = None,
        deadline_s: float = 30.0,
        fall_through_on_content_policy: bool = False,
        on_alert: Callable[[CredentialAlert], None] | None = None,
        clock: Clock | None = None,
        breaker: BreakerSettings | None = DEFAULT_BREAKER,
        stream_transports: Mapping[str, Any] | None = None,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if stream_transports is None:
            # An adapter (chainclient.integrations) is both: called for complete(), its
            # ``stream`` for stream().
            adapters: Mapping[str, Any] = transports
            stream_transports = {
                name: call.stream for name, call in adapters.items() if callable(getattr(call, "stream", None))
            }
        self._check_transports(transports)
        self._check_transports(stream_transports)
        self._transports: dict[str, TransportT] = dict(transports)
        self._stream_transports: dict[str, Any] = dict(stream_transports)
        self._snapshot = _snapshot_reader(source)
        self._record_served: Callable[[str], object] | None = _hook(source, "record_served")
        self._record_attempt: Callable[[Attempt], object] | None = _hook(source, "record_attempt")
        self._record_breaker_opened: Callable[[str], object] | None = _hook(source, "record_breaker_opened")
        self._takes_part: Callable[[Drill], object] | None = _hook(source, "takes_part")
        self._record_drill: Callable[[Drill, DrillRequest], object] | None = _hook(source, "record_drill")
        # Per drill, the requests admitted at its hop so far: which are drilled follows
        # from the count (``drills.drilled_at``). Only the latest drill's is kept.
        self._drill_counter: tuple[int, Iterator[int]] | None = None
        # The last drill asked about, and whether the source takes part in it: a document's
        # drill is one immutable value, so the source is asked once per document.
        self._drill_part: tuple[Drill, bool] | None = None
        if registry is None:
            registry = _registry_of(source)
        self._deadline_s = float(deadline_s)
        self._fall_through_on_content_policy = fall_through_on_content_policy
        self._on_alert = on_alert
        self._now: Callable[[], float] = clock.now if clock is not None else time.monotonic
        self._real_clock = clock is None
        """Whether bounds may be enforced in real time (a watchdog, a timer); with a test's
        clock a late chunk is only refused when it comes."""
        advance = getattr(clock, "advance", None)
        self._advance: Callable[[float], object] | None = advance if callable(advance) else None
        self._breakers: dict[str, CircuitBreaker] = (
            {name: CircuitBreaker(name, breaker) for name in self._transports.keys() | self._stream_transports.keys()}
            if breaker is not None
            else {}
        )
        self._contracts = ContractCheck(
            transports=self._transports.keys() | self._stream_transports.keys(), registry=registry
        )
        self._destinations = {name: registry[name].destination for name in registry} if registry is not None else {}
        self._windows: dict[tuple[str, str], int] = (
            {(name, model): tokens for name in registry for model, tokens in registry[name].context_windows.items()}
            if registry is not None
            else {}
        )
        self._counts_lock = threading.Lock()
        self._counts = dict.fromkeys(REPORT_KEYS, 0)
        self._transported = frozenset(self._transports) | frozenset(self._stream_transports)
        self._untransported: set[str] = set()
        self._warn_untransported(registry, self._snapshot())

    # --- public ------------------------------------------------------------------------

    def report(self) -> dict[str, int]:
        """Counts since start (or the last ``reset_report()``) by how requests ended, plus
        ``credential_alerts`` and ``skipped_no_transport`` (steps skipped for want of a
        transport)."""
        with self._counts_lock:
            return dict(self._counts)

    def reset_report(self) -> None:
        with self._counts_lock:
            self._counts = dict.fromkeys(REPORT_KEYS, 0)

    def health(self) -> dict[str, Any]:
        """For health endpoints: providers the service cannot call (no transport), and the
        state of each provider's circuit breaker."""
        return {
            "providers_without_transport": sorted(self._untransported),
            "breakers": {name: breaker.state for name, breaker in sorted(self._breakers.items())},
        }

    def breaker_state(self, provider: str) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (``closed`` if breakers are disabled)."""
        breaker = self._breakers.get(provider)
        return breaker.state if breaker is not None else "closed"

    def reset_breakers(self) -> None:
        """Close every breaker and forget counted failures (for tests)."""
        for breaker in self._breakers.values():
            breaker.reset()

    def _check_transports(self, transports: Mapping[str, TransportT]) -> None:
        """Raise TypeError for transports this router cannot call (none, by default)."""

    # --- a request, step by step ---------------------------------------------------------

    def _begin(
        self,
        *,
        task_id: str | None,
        contract: Contract | None,
        side_effects: bool,
        allow_fallback: bool,
        verify: Callable[[Any], bool] | None,
        deadline_s: float | None = None,
        retry_same_step: bool | None = None,
        policy_set: tuple[str, ...] = (),
    ) -> Walk:
        """A request's walk over one snapshot of the chain, with its budget starting now and
        the document's failure policy's same-step retry, unless ``retry_same_step`` (the
        call's) says otherwise; ``policy_set``: the call's arguments that override the
        policy, for the receipt."""
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError("deadline_s must be positive")
        budget_s = self._deadline_s if deadline_s is None else float(deadline_s)
        document = self._snapshot()
        walk = Walk(
            # 128 random bits as 32 hex digits, as a uuid4's hex; a fifth of its cost (no
            # system call), and the random module reseeds itself in a forked child.
            task_id or f"{getrandbits(128):032x}",
            document,
            contract=contract if contract is not None else NO_CONTRACT,
            side_effects=side_effects,
            allow_fallback=allow_fallback,
            verify=verify,
            deadline=self._now() + budget_s,
            budget_s=budget_s,
        )
        if document.drill is not None:  # the one check a request pays without a drill
            walk.drill = self._drill_of(document.drill)
            walk.drilled = False
        if retry_same_step is None:
            walk.retry_max_s = document.retry_max_s
        elif retry_same_step:
            wait_s = document.retry_max_s
            walk.retry_max_s = FAILURE_POLICY_RETRY_MAX_WAIT_MS / 1000 if wait_s is None else wait_s
        if policy_set:
            walk.policy_set = policy_set
        return walk

    @staticmethod
    def _stream_bounds(
        walk: Walk, commit_after_chars: int | None, first_chunk_s: float | None, idle_s: float | None
    ) -> StreamBounds:
        """A stream's commit point and bounds: the call's where it gives them, else the
        document's failure policy's, else the defaults (the first chunk with content, the
        step's timeout)."""
        policy = walk.document.failure_policy
        if policy is None:
            return StreamBounds(1 if commit_after_chars is None else commit_after_chars, first_chunk_s, idle_s)
        if commit_after_chars is None:
            commit_after_chars = COMPLETE if policy.commit == "complete" else 1
        if first_chunk_s is None and policy.first_chunk_ms is not None:
            first_chunk_s = policy.first_chunk_ms / 1000
        if idle_s is None and policy.idle_ms is not None:
            idle_s = policy.idle_ms / 1000
        return StreamBounds(commit_after_chars, first_chunk_s, idle_s)

    def _steps(self, walk: Walk) -> Iterator[tuple[int, Step]]:
        """The chain's steps in order, with their index. Under a same-step retry, a step whose
        attempt the walk retries (``Walk.retry_in``) comes again, with ``Walk.pause_s`` set to
        its wait (a test clock with ``advance`` is advanced instead). A request that cannot
        retry gets the chain as it is: no generator on its path."""
        chain = walk.document.chain
        return enumerate(chain) if walk.retry_max_s is None else self._retrying(walk, chain)

    def _retrying(self, walk: Walk, chain: Sequence[Step]) -> Iterator[tuple[int, Step]]:
        for index, step in enumerate(chain):
            yield index, step
            while walk.retry_in is not None:
                wait, walk.retry_in = walk.retry_in, None
                if self._advance is not None:
                    if wait > 0:
                        self._advance(wait)
                    wait = 0.0
                elif not self._real_clock:
                    wait = 0.0
                walk.pause_s = wait
                yield index, step

    def _same_step_wait(self, walk: Walk, turn: Turn, verdict: Verdict, longest_s: float) -> float | None:
        """The seconds to wait before retrying ``turn``'s step after a failure that moves on
        (``verdict``), or None: not retried. Once per step, for a 429, 500, 503 or 529 that
        did not leave the outcome unknown or a refused connection, when its ``Retry-After`` is
        within ``longest_s`` (the walk's) and the retry can start before the deadline."""
        if verdict.outcome == "failed":
            if verdict.status not in RETRY_SAME_STEP_STATUSES or verdict.dispatch == DISPATCHED_UNKNOWN:
                return None
        elif verdict.outcome != "unavailable":
            return None
        wait = verdict.retry_after_s or 0.0
        retried = walk.retried is not None and turn.step in walk.retried
        if retried or wait > longest_s or self._now() + wait >= walk.deadline:
            return None
        return wait

    def _walking(self, walk: Walk) -> Generator[Turn | Pause, tuple[Exception | None, Any], RouteResult]:
        """The walk along the chain, written once for both routers: yields each admitted
        step's turn, is sent what its attempt gave (the exception the call raised, or its
        value), and returns the request's result or raises its error. A router only makes
        the calls: in the caller's thread (``Router``) or awaited (``AsyncRouter``), which is
        all that differs between them. Their drivers (send each call's outcome, return the
        result) stay two near-copies of a dozen lines: one is a coroutine and one is not,
        and a function cannot be both without a thread or an event loop per request; the
        router tables run every walk case through both."""
        for index, step in self._steps(walk):
            if walk.pause_s:  # before a same-step retry
                yield Pause(walk.pause_s)
                walk.pause_s = 0.0
            turn = self._turn(walk, index, step)
            if turn is None:
                continue
            raised, value = yield turn
            result = self._settle(walk, turn, raised, value)
            if result is not None:
                return result
        raise self._exhausted(walk)

    def _turn(
        self, walk: Walk, index: int, step: Step, *, streaming: bool = False, first_chunk_s: float | None = None
    ) -> Turn | None:
        """Admit ``step`` for an attempt (None: refused, recorded in the receipt); raise
        DeadlineExceeded if the budget is spent. A streamed attempt's timeout is its
        first-chunk bound (default: the step's timeout)."""
        breaker = self._breakers.get(step.provider)
        why = self._refusal(
            step,
            walk.contract,
            breaker,
            fallback_barred=bool(index) and not walk.allow_fallback,
            streaming=streaming,
            outgrown=walk.outgrown,
        )
        if why is not None:
            walk.refused.append((step, why))
            if step.provider not in self._transported:
                self._no_transport(step, walk.document)
            return None
        now = self._now()
        left = walk.deadline - now
        if left <= 0:
            if breaker is not None:
                breaker.release()
            raise self._ended(walk, walk.out_of_time(not_started=walk.document.chain[index:]))
        step_timeout = step.timeout_s if first_chunk_s is None else first_chunk_s
        # A stream's span is not made current: the caller's code runs between its chunks.
        span = attempt_started(walk.document, index, step, walk.task_id, len(walk.attempts) + 1, current=not streaming)
        drill = walk.drill
        # A same-step retry is the same request at the same hop: the drill counted it already.
        if (
            drill is not None
            and index == drill.hop - 1
            and (walk.retried is None or step not in walk.retried)
            and self._drills(drill)
        ):
            # No call will be made: a half-open breaker's probe slot goes back unused, and
            # the breaker never hears of this attempt.
            if breaker is not None:
                breaker.release()
            walk.drilled = True
            return Turn(step, step_timeout if step_timeout <= left else left, None, now, span, drill)
        return Turn(step, step_timeout if step_timeout <= left else left, breaker, now, span)

    def _settle(
        self,
        walk: Walk,
        turn: Turn,
        raised: Exception | None,
        value: Any,
        progress: StreamProgress | None = None,
    ) -> RouteResult | None:
        """Record how the attempt went and act on it: the result if it served the request,
        None to try the next step; raise the request's error if it must stop here.
        ``progress``: the attempt's stream, for a streamed request (ended before its commit
        point, or complete)."""
        if turn.drill is not None:
            self._injected(walk, turn, streaming=progress is not None)
            return None
        model_id = ""
        tokens: tuple[int | None, int | None] = (None, None)
        if type(value) is Answer:
            value, model_id, tokens = value.value, value.model_id, (value.input_tokens, value.output_tokens)
        verdict = classify(
            raised,
            value=value,
            verify=walk.verify,
            timeout_s=turn.timeout,
            side_effects=walk.side_effects,
            fall_through_on_content_policy=self._fall_through_on_content_policy,
        )
        if walk.retry_max_s is not None and verdict.action is Action.NEXT:
            wait = self._same_step_wait(walk, turn, verdict, walk.retry_max_s)
            if wait is not None:
                verdict = verdict._replace(reason=f"{verdict.reason}; retrying the same step after {wait:g}s")
                if walk.retried is None:
                    walk.retried = set()
                walk.retried.add(turn.step)
                walk.retry_in = wait
        attempt = self._record(walk, turn, verdict, raised, model_id, tokens, progress)
        action = verdict.action
        if action is Action.SERVED:
            self._count("recovered_success" if len(walk.attempts) > 1 else "first_attempt_success")
            if self._record_served is not None:
                self._served(turn.step.provider)
            if walk.drill is not None:
                self._drill_ended(walk, None)
            return walk.served(turn.step, value)
        if action is Action.NEXT_LARGER:
            self._outgrew(walk, turn.step)
        elif action is not Action.NEXT:
            raise self._ended(walk, walk.stopped(action))
        if attempt.outcome == "timeout":
            # A timeout shortened by the budget failed because the budget ran out (a
            # stream's, because it ran out while waiting for a chunk).
            walk.cut_by_deadline = (
                turn.timeout < turn.step.timeout_s if progress is None else self._now() >= walk.deadline
            )
        else:
            walk.cut_by_deadline = False
        return None

    def _broken(self, walk: Walk, turn: Turn, progress: StreamProgress, raised: Exception | None) -> RoutingError:
        """The error for a stream that broke after its commit point (``raised``, or a bound
        that passed, or an end without the terminal event): the caller holds its chunks, so
        nothing else is tried."""
        why = progress.why_late if raised is None or progress.expired else str(raised)
        status = getattr(raised, "status", None) if not progress.expired else None
        verdict = Verdict(
            "interrupted",
            DISPATCHED_KNOWN,
            Action.STOP_REJECTED,
            reason=f"stream interrupted after {progress.chunks} chunk(s) reached the caller; nothing else was tried",
            status=status if isinstance(status, int) else None,
            error=why,
        )
        attempt = self._record(walk, turn, verdict, raised, "", (None, None), progress)
        return self._ended(
            walk,
            StreamInterrupted(
                f"{attempt.step} broke off its stream after {progress.chunks} chunk(s) had reached the caller "
                f"({why}); not a success, and no fallback (it would show a second answer)",
                receipt=walk.receipt(),
                chunks=progress.chunks,
                provider=attempt.provider,
                model=attempt.model,
            ),
        )

    def _record(
        self,
        walk: Walk,
        turn: Turn,
        verdict: Verdict,
        raised: Exception | None,
        model_id: str,
        tokens: tuple[int | None, int | None],
        progress: StreamProgress | None,
        *,
        streamed: bool = False,
    ) -> Attempt:
        """Add the attempt to the walk's receipt and tell everyone who counts it: the breaker,
        the span, the source's health tally, the credential alert; a drilled attempt (whose
        turn has no breaker) only the span: it is no evidence about the provider. ``streamed``:
        an attempt of a streamed request that opened no stream."""
        step, breaker = turn.step, turn.breaker
        now = self._now()
        if breaker is not None:
            if verdict.counts_as_failure:
                if breaker.record_failure(now, verdict.retry_after_s) and self._record_breaker_opened is not None:
                    self._breaker_opened(step.provider)
            else:
                breaker.record_success(now)
        chunks = 0 if streamed else None
        first_chunk_s = None
        if progress is not None:
            chunks, first_chunk_s = progress.chunks, progress.first_chunk_s
            reported = progress.reported("model_id")
            model_id = reported if isinstance(reported, str) else model_id
            tokens = (progress.reported("input_tokens"), progress.reported("output_tokens"))
        document = walk.document
        attempt = Attempt(
            task_id=walk.task_id,
            attempt_id=f"{walk.task_id}-{len(walk.attempts) + 1}",
            provider=step.provider,
            model=step.model,
            dispatch=verdict.dispatch,
            outcome=verdict.outcome,
            status=verdict.status,
            elapsed_s=now - turn.started,
            timeout_s=turn.timeout,
            reason=verdict.reason,
            error=verdict.error,
            destination=self._destinations.get(step.provider, "unknown"),
            model_id=model_id or f"{step.provider}/{step.model}",
            contract=walk.contract.identity,
            epoch=document.epoch,
            version=document.version,
            chunks=chunks,
            first_chunk_s=first_chunk_s,
            input_tokens=token_count(tokens[0]),
            output_tokens=token_count(tokens[1]),
            drill=turn.drill.id if turn.drill is not None else None,
        )
        walk.attempts.append(attempt)
        if turn.span is not None:
            attempt_ended(turn.span, attempt, raised, model_reported=bool(model_id))
        if self._record_attempt is not None and turn.drill is None:
            self._attempted(attempt)
        if verdict.credential_alert:
            self._credential_alert(attempt)
        return attempt

    def _committed(self, turn: Turn) -> None:
        """A stream reached its commit point: the provider is answering (a half-open
        breaker's probe succeeded; its slot is not held for the whole stream)."""
        if turn.breaker is not None:
            turn.breaker.record_success(self._now())

    def _exhausted(self, walk: Walk) -> RoutingError:
        """The error for a walk that reached the end of the chain unserved."""
        return self._ended(walk, walk.exhausted())

    @staticmethod
    def _interrupted(turn: Turn, error: BaseException) -> None:
        """The call was interrupted (KeyboardInterrupt, a cancelled task): a half-open
        breaker's probe slot goes back unused, and the attempt's span ends."""
        if turn.breaker is not None:
            turn.breaker.release()
        if turn.span is not None:
            attempt_interrupted(turn.span, error)

    # --- failover drills -------------------------------------------------------------------

    def _drill_of(self, drill: Drill) -> Drill | None:
        """``drill`` if it is active now (wall clock, as a pin's expiry) and the source takes
        part in it, else None."""
        now = time.time()
        if not drill.starts_at_s <= now < drill.ends_at_s:  # drill.active(now), inlined
            return None
        known = self._drill_part
        if known is not None and known[0] is drill:
            return drill if known[1] else None
        takes_part = self._takes_part
        if takes_part is None:
            part = not drill.services
        else:
            try:
                part = bool(takes_part(drill))
            except Exception:
                # A hook that breaks must not break the request: it is routed as without a
                # drill, and the source is asked again with the next one.
                logger.exception("chainclient: takes_part(drill %d) raised", drill.id)
                return None
        self._drill_part = (drill, part)
        return drill if part else None

    def _drills(self, drill: Drill) -> bool:
        """Whether the request just admitted at ``drill``'s hop is drilled: the n-th such
        request of this router (per drill) is when ``drills.drilled_at(n, share_bp)``."""
        counter = self._drill_counter
        if counter is None or counter[0] != drill.id:
            with self._counts_lock:
                counter = self._drill_counter
                if counter is None or counter[0] != drill.id:
                    counter = self._drill_counter = (drill.id, itertools.count())
        # next() on a count is atomic under the interpreter lock: no two requests get one n.
        n, share = next(counter[1]), drill.share_bp
        return (n + 1) * share // 10000 != n * share // 10000  # drills.drilled_at, inlined

    def _drill_pause(self, turn: Turn) -> float:
        """The seconds a drilled attempt waits before the walk moves on: its timeout for a
        timeout fault (what the real fault costs), else 0. A test clock with ``advance`` is
        advanced instead (0); any other test clock is not waited on."""
        drill = turn.drill
        if drill is None or drill.fault not in WAITING_FAULTS or turn.timeout <= 0:
            return 0.0
        if self._advance is not None:
            self._advance(turn.timeout)
            return 0.0
        return turn.timeout if self._real_clock else 0.0

    def _injected(self, walk: Walk, turn: Turn, *, streaming: bool) -> None:
        """Record the drill's fault as the attempt (no call was made) and move on to the next
        step, whatever ``side_effects`` says: nothing was dispatched."""
        drill = turn.drill
        assert drill is not None
        outcome, status = INJECTED[drill.fault]
        verdict = Verdict(
            outcome,
            NOT_DISPATCHED,
            Action.NEXT,
            reason=f"drill {drill.id}: {drill.fault} injected (no call was made)",
            status=status,
            counts_as_failure=False,
        )
        self._record(walk, turn, verdict, None, "", (None, None), None, streamed=streaming)
        # As after a real timeout: one the budget cut short ends the request as a deadline.
        walk.cut_by_deadline = outcome == "timeout" and (
            self._now() >= walk.deadline if streaming else turn.timeout < turn.step.timeout_s
        )

    def _drill_ended(self, walk: Walk, error: RoutingError | None) -> None:
        """Tell the source how a request routed in a drill ended (``record_drill``). Every
        request in the drill's window pays this, drilled or not: it is kept to a few
        operations (a request that was not drilled needs no look at its attempts)."""
        drill, record = walk.drill, self._record_drill
        if drill is None or record is None:
            return
        elapsed_s = self._now() - (walk.deadline - walk.budget_s)
        error_name = type(error).__name__ if error is not None else None
        if walk.drilled:
            request = _drilled_request(walk, drill, error_name, elapsed_s)
        else:
            # tuple.__new__ is what a named tuple's own __new__ calls, minus a Python call:
            # every request in a drill's window builds one.
            request = _new_tuple(DrillRequest, (False, None, error_name, 0, 0, elapsed_s))
        try:
            record(drill, request)
        except Exception:
            # Drill accounting must never cost a request its answer (nor its error).
            logger.exception("chainclient: record_drill(drill %d) raised", drill.id)

    def _for_drill_run(self: RouterT, source: Any) -> RouterT:
        """A copy of this router over ``source`` (``testing.run_drill``): the same transports,
        registry, clock and options, with breakers, counts and drill counters of its own, and
        ``source``'s hooks only."""
        run = copy.copy(self)
        run._snapshot = _snapshot_reader(source)
        run._record_served = _hook(source, "record_served")
        run._record_attempt = _hook(source, "record_attempt")
        run._record_breaker_opened = _hook(source, "record_breaker_opened")
        run._takes_part = _hook(source, "takes_part")
        run._record_drill = _hook(source, "record_drill")
        run._drill_counter = None
        run._drill_part = None
        run._breakers = {name: CircuitBreaker(name, breaker.settings) for name, breaker in self._breakers.items()}
        run._counts_lock = threading.Lock()
        run._counts = dict.fromkeys(REPORT_KEYS, 0)
        run._untransported = set(self._untransported)
        return run

    # --- admission -----------------------------------------------------------------------

    def _refusal(
        self,
        step: Step,
        contract: Contract,
        breaker: CircuitBreaker | None,
        *,
        fallback_barred: bool,
        streaming: bool = False,
        outgrown: tuple[Step, int | None] | None = None,
    ) -> str | None:
        """Why this request may not try ``step`` now, or None. The breaker is asked last:
        admitting a half-open breaker's probe takes its one slot. ``outgrown``: the step whose
        context window the request did not fit, and its window if known (``Walk.outgrown``)."""
        why = self._contracts.refusal(step, contract)
        if why is None and outgrown is not None:
            why = self._too_small(step, *outgrown)
        if why is None and streaming and step.provider not in self._stream_transports:
            why = "no stream transport for this provider (it can serve complete() only)"
        elif why is None and not streaming and step.provider not in self._transports:
            why = "no transport for complete() for this provider (it can serve stream() only)"
        if why is None and fallback_barred:
            why = "fallback not permitted (allow_fallback=False)"
        if why is None and breaker is not None:
            why = breaker.admit(self._now())
        return why

    def _outgrew(self, walk: Walk, step: Step) -> None:
        """The request did not fit ``step``'s context window: the largest window it is known
        not to fit is the bound later steps must pass (``step``'s own if it is known and
        larger than an earlier one's, the earlier one's otherwise)."""
        window = self._windows.get((step.provider, step.model))
        known = walk.outgrown
        if known is None or known[1] is None or (window is not None and window > known[1]):
            walk.outgrown = (step, window)

    def _too_small(self, step: Step, outgrown: Step, outgrown_window: int | None) -> str | None:
        """Why ``step`` cannot take a request that did not fit ``outgrown``'s context window:
        its own window is known and not larger. None when either window is not known (the
        step is tried: it may fit)."""
        window = self._windows.get((step.provider, step.model))
        if window is None or outgrown_window is None or window > outgrown_window:
            return None
        return (
            f"context window of {window} tokens is not larger than {outgrown}'s {outgrown_window}; "
            "the request would not fit"
        )

    def _warn_untransported(self, registry: Registry | None, document: ChainDocument) -> None:
        """One warning at construction naming the providers this router cannot call."""
        known = set(registry) if registry is not None else set()
        missing = sorted((known | {step.provider for step in document.chain}) - self._transported)
        if missing:
            self._untransported.update(missing)
            logger.warning(
                "chainclient: no transport for provider(s) %s: a chain step on them is skipped (transports given: %s)",
                ", ".join(missing),
                ", ".join(sorted(self._transported)) or "none",
            )

    def _no_transport(self, step: Step, document: ChainDocument) -> None:
        """Count a step skipped for want of a transport; warn the first time per provider."""
        self._count("skipped_no_transport")
        if step.provider in self._untransported:
            return
        with self._counts_lock:
            if step.provider in self._untransported:
                return
            self._untransported.add(step.provider)
        logger.warning(
            "chainclient: chain %s v%s routes to %s but this router has no transport for %r: skipped",
            document.name,
            document.version,
            step,
            step.provider,
        )

    # --- endings -------------------------------------------------------------------------

    def _ended(self, walk: Walk, error: RoutingError) -> RoutingError:
        """Count how the request ended, in ``report()``, and return its error to raise."""
        for kind, key in _ENDINGS:
            if isinstance(error, kind):
                self._count(key)
                break
        if walk.drill is not None:
            self._drill_ended(walk, error)
        return error

    def _credential_alert(self, attempt: Attempt) -> None:
        self._count("credential_alerts")
        logger.error(
            "chainclient: %s rejected our credentials (HTTP %s) on attempt %s; check this provider's API key",
            attempt.provider,
            attempt.status,
            attempt.attempt_id,
        )
        if self._on_alert is None:
            return
        alert = CredentialAlert(
            provider=attempt.provider,
            model=attempt.model,
            status=attempt.status or 0,
            task_id=attempt.task_id,
            attempt_id=attempt.attempt_id,
            message=attempt.error,
        )
        try:
            self._on_alert(alert)
        except Exception:
            # An alert hook that breaks must not break the request it is reporting on.
            logger.exception("chainclient: on_alert hook raised")

    def _count(self, key: str) -> None:
        with self._counts_lock:
            self._counts[key] += 1

    def _served(self, provider: str) -> None:
        assert self._record_served is not None
        try:
            self._record_served(provider)
        except Exception:
            # Usage accounting must never cost a request its answer.
            logger.exception("chainclient: record_served(%r) raised", provider)

    def _attempted(self, attempt: Attempt) -> None:
        assert self._record_attempt is not None
        try:
            self._record_attempt(attempt)
        except Exception:
            # Health accounting must never cost a request its answer (nor its error).
            logger.exception("chainclient: record_attempt(%s) raised", attempt.attempt_id)

    def _breaker_opened(self, provider: str) -> None:
        assert self._record_breaker_opened is not None
        try:
            self._record_breaker_opened(provider)
        except Exception:
            logger.exception("chainclient: record_breaker_opened(%r) raised", provider)


_new_tuple = tuple.__new__


def _drilled_request(walk: Walk, drill: Drill, error_name: str | None, elapsed_s: float) -> DrillRequest:
    """How a drilled request ended: the step that served it, and its attempt on the fallback
    hop (step ``hop + 1``, never past the chain's end)."""
    chain = walk.document.chain
    fallback = chain[drill.hop]
    tried = [a for a in walk.attempts if a.provider == fallback.provider and a.model == fallback.model]
    ended_on = None
    if error_name is None and walk.attempts:
        last = walk.attempts[-1]
        ended_on = next(
            (
                number
                for number, step in enumerate(chain, 1)
                if (step.provider, step.model) == (last.provider, last.model)
            ),
            None,
        )
    failures = sum(1 for attempt in tried if attempt.outcome != "ok")
    return DrillRequest(True, ended_on, error_name, len(tried), failures, elapsed_s)


def _hook(source: object, name: str) -> Callable[..., object] | None:
    """The source's accounting method ``name``, if it has one: looked up once, at
    construction; a router over a plain list of steps only checks for None per attempt."""
    hook = getattr(source, name, None)
    return hook if callable(hook) else None


def _registry_of(source: object) -> Registry | None:
    """The registry a ChainClient was built with, so it need not be passed twice."""
    registry = getattr(source, "registry", None)
    return registry if isinstance(registry, Registry) else None


def _snapshot_reader(
    source: ChainSource | ChainDocument | Sequence[Step],
) -> Callable[[], ChainDocument]:
    if isinstance(source, ChainDocument):
        return lambda: source
    if isinstance(source, (list, tuple)):
        steps = tuple(source)
        if not steps or not all(isinstance(step, Step) for step in steps):
            raise TypeError("a chain given as a list must be a non-empty list of Step")
        document = ChainDocument.compiled_default("router", steps)
        return lambda: document
    current = getattr(source, "current", None)
    if not callable(current):
        raise TypeError(
            "a router needs a ChainClient (anything with current()), a ChainDocument or a "
            f"list of Step, got {type(source).__name__}"
        )
    reader: Callable[[], ChainDocument] = current
    return reader


__all__ = ["DEFAULT_BREAKER", "REPORT_KEYS", "ChainSource", "Clock", "RouterCore", "Turn"]
