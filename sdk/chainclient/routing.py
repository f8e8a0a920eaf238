"""The walk's policy, shared by ``Router`` and ``AsyncRouter``: everything but the call.

Per request a router takes one snapshot of the chain (``current()`` is read once), then
walks it in order. Before every attempt it runs admission (the contract, from
``admission``; ``allow_fallback``; the provider's circuit breaker, from ``breaker``), gives
the attempt ``min(step timeout, time left in the request's budget)``, classifies how the
call went (``outcomes.classify``: the status table lives there), and either returns, moves
on to the next step, or stops. Every attempt is recorded in the request's receipt
(``receipts``), which results and errors carry, and is a span when the service uses
OpenTelemetry (``tracing``).

``RouterCore`` owns that policy: admission, the budget, what an attempt's outcome leads to.
What it builds on is ``router_state.RouterState``: the options, the counts in
``report()``, and whom an attempt is told (the breaker, the source's usage and health
accounting, credential alerts). The two routers differ only in how they call a transport:
``router.Router`` calls it, ``async_router.AsyncRouter`` awaits it.

Failover drills (``drill_injection``) are injected here too: a request routed in an active
drill may be drilled when its walk is admitted at the drilled hop (``_turn``); its attempt
there is then no call but the drill's fault (``_settle``, ``_injected``), recorded in the
receipt. A router only waits when the fault is a timeout (``_drill_pause``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from random import getrandbits
from typing import Any

from chainclient.admission import NO_CONTRACT, Contract
from chainclient.breaker import DEFAULT_BREAKER as DEFAULT_BREAKER
from chainclient.breaker import CircuitBreaker
from chainclient.drills import INJECTED, WAITING_FAULTS
from chainclient.errors import RoutingError, StreamInterrupted
from chainclient.outcomes import Action, Verdict, classify
from chainclient.receipts import DISPATCHED_KNOWN, DISPATCHED_UNKNOWN, NOT_DISPATCHED, Answer, RouteResult
from chainclient.router_state import REPORT_KEYS as REPORT_KEYS
from chainclient.router_state import RouterState, TransportT
from chainclient.sources import ChainSource as ChainSource
from chainclient.sources import Clock as Clock
from chainclient.streaming import COMPLETE as COMPLETE
from chainclient.streaming import StreamProgress
from chainclient.streaming import set_by_call as set_by_call
from chainclient.tracing import attempt_interrupted, attempt_started
from chainclient.types import Step
from chainclient.walk import Pause as Pause
from chainclient.walk import Turn, Walk
from chainclient.wire import FAILURE_POLICY_RETRY_MAX_WAIT_MS

# The failures a same-step retry is for: the provider said it did not act and to come back
# (429, 503, 529) or failed once (500). A gateway's 502 or 504 may have acted; 401 and 403
# will not change within a second; a timeout would spend the step's whole timeout again.
RETRY_SAME_STEP_STATUSES = frozenset({429, 500, 503, 529})


class RouterCore(RouterState[TransportT]):
    """What both routers share (see ``Router`` for the options); ``TransportT`` is the kind
    of transport the router calls."""

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
            walk.drill = self._drilling.active(document.drill)
            walk.drilled = False
        if retry_same_step is None:
            walk.retry_max_s = document.retry_max_s
        elif retry_same_step:
            wait_s = document.retry_max_s
            walk.retry_max_s = FAILURE_POLICY_RETRY_MAX_WAIT_MS / 1000 if wait_s is None else wait_s
        if policy_set:
            walk.policy_set = policy_set
        return walk

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
            and self._drilling.drills(drill)
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
                self._drilling.ended(walk, None)
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


__all__ = ["DEFAULT_BREAKER", "REPORT_KEYS", "ChainSource", "Clock", "RouterCore", "Turn"]
