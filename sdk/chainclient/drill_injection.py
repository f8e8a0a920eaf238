"""Failover drills in a router: which requests route in an active drill, which of them are
drilled at its hop, and what the source is told of each.

A request that begins while the snapshot carries an active drill its source takes part in
(``DrillInjection.active``, asked by ``RouterCore._begin``) may be drilled when its walk is
admitted at the drilled hop (``drills``, asked by ``RouterCore._turn``: a deterministic
share per router); its attempt there is then no call but the drill's fault
(``RouterCore._settle``), recorded in the receipt and never told to the breaker, the health
tally or the credential alerts. How each request routed in the drill ended is told to the
source (``ended``: its ``record_drill``). Without a drill in the document none of this
runs: a request pays one attribute check, and each attempt another.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator

from chainclient.drills import DrillRequest
from chainclient.errors import RoutingError
from chainclient.sources import hook
from chainclient.types import Drill
from chainclient.walk import Walk

logger = logging.getLogger("chainclient.router")

_new_tuple = tuple.__new__


class DrillInjection:
    """One router's drills over its source: the source's hooks (``takes_part``,
    ``record_drill``), whether it takes part in the latest drill asked about, and the count
    of the requests admitted at that drill's hop. ``now`` is the router's clock."""

    def __init__(self, source: object, now: Callable[[], float]) -> None:
        self._takes_part: Callable[[Drill], object] | None = hook(source, "takes_part")
        self._record_drill: Callable[[Drill, DrillRequest], object] | None = hook(source, "record_drill")
        self._now = now
        self._lock = threading.Lock()
        # Per drill, the requests admitted at its hop so far: which are drilled follows
        # from the count (``drills.drilled_at``). Only the latest drill's is kept.
        self._counter: tuple[int, Iterator[int]] | None = None
        # The last drill asked about, and whether the source takes part in it: a document's
        # drill is one immutable value, so the source is asked once per document.
        self._part: tuple[Drill, bool] | None = None

    def active(self, drill: Drill) -> Drill | None:
        """``drill`` if it is active now (wall clock, as a pin's expiry) and the source takes
        part in it, else None."""
        now = time.time()
        if not drill.starts_at_s <= now < drill.ends_at_s:  # drill.active(now), inlined
            return None
        known = self._part
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
        self._part = (drill, part)
        return drill if part else None

    def drills(self, drill: Drill) -> bool:
        """Whether the request just admitted at ``drill``'s hop is drilled: the n-th such
        request of this router (per drill) is when ``drills.drilled_at(n, share_bp)``."""
        counter = self._counter
        if counter is None or counter[0] != drill.id:
            with self._lock:
                counter = self._counter
                if counter is None or counter[0] != drill.id:
                    counter = self._counter = (drill.id, itertools.count())
        # next() on a count is atomic under the interpreter lock: no two requests get one n.
        n, share = next(counter[1]), drill.share_bp
        return (n + 1) * share // 10000 != n * share // 10000  # drills.drilled_at, inlined

    def ended(self, walk: Walk, error: RoutingError | None) -> None:
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


__all__ = ["DrillInjection"]
