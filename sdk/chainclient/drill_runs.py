"""A failover drill run in CI against a service's own Router: ``run_drill``, importable from
``chainclient.testing``.

The run routes requests through a copy of the service's router over its chain carrying
the drill, tallies them as a ``ChainClient`` would, and judges and describes the result
as the control plane does a drill on live traffic (``drills.verdict``, ``drills.describe``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import math
import sys
import time
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

from chainclient import drills
from chainclient.async_router import AsyncRouter
from chainclient.drills import DrillRequest, DrillTally
from chainclient.errors import (
    RoutingError,
)
from chainclient.router import Router
from chainclient.types import ChainDocument, Drill, Step
from chainclient.wire import DRILL_FAULTS, DRILL_SHARE_MAX_BP, DRILL_SHARE_MIN_BP, latency_percentile

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


__all__ = ["drill_report_text", "run_drill"]
