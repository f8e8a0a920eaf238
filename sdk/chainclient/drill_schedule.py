"""When the usage thread reports for the failover drills the client takes part in.

While the client takes part in an active drill, every usage report carries the drill's
section and one goes at least every ``wire.DRILL_REPORT_INTERVAL_S``, even with nothing
counted: that is how the control plane knows the instance takes part. A drill that ended
(or left the document) gets one last report within ``DRILL_REPORT_INTERVAL_S`` of its end,
with or without a control plane to tell it so. ``DrillSchedule`` decides when and which
drill's section a report carries; the usage thread (``usage``) sleeps until then.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from chainclient import wire
from chainclient.types import Drill

# A drill's last report is retried at the drill's cadence for this long after its end; then
# its counts, if still unsent, go with the next regular report.
DRILL_LAST_REPORT_WITHIN_S = 60.0


@dataclass
class _Followed:
    """A drill the client takes part in, until its last report."""

    drill: Drill
    due: float
    """When (wall clock) a report with its section is due next."""
    over: bool = False
    """Its end passed, or it left the document: one last report is owed."""
    ended: float = 0.0
    """Once over: when it ended (its ``ends_at``, or when it left the document)."""


class DrillSchedule:
    """When the usage thread reports for the failover drills the client takes part in, and
    which drill's section a report carries. Used by the usage thread alone; times are the
    client's wall clock (a drill's window is a wall-clock one).

    ``current()`` is the drill of the document the client serves, if the client takes part
    in it (active or not yet), else None. ``random`` spreads a fleet's reports.
    """

    def __init__(self, current: Callable[[], Drill | None], random: random.Random) -> None:
        self._current = current
        self._random = random
        self._followed: dict[int, _Followed] = {}

    def due_in(self, now: float) -> float:
        """Seconds until a report is due for a drill (0: now; inf: no drill needs one)."""
        current = self._update(now)
        due = min((followed.due for followed in self._followed.values()), default=float("inf"))
        if current is not None:
            if now < current.starts_at_s:
                due = min(due, current.starts_at_s)  # it starts: report at once
            elif now < current.ends_at_s:
                due = min(due, current.ends_at_s + self._after_end())  # it ends: the last report
        return max(0.0, due - now)

    def to_report(self, now: float, pending: list[int]) -> int | None:
        """The drill whose section the next report carries: one owed its last report, else the
        active one, else one with counts still unsent (``pending``), else None."""
        self._update(now)
        owed = [f for f in self._followed.values() if f.over and f.due <= now]
        if owed:
            return min(owed, key=lambda followed: followed.due).drill.id
        active = [f for f in self._followed.values() if not f.over]
        if active:
            return active[0].drill.id
        return pending[0] if pending else None

    def reported(self, drill_id: int, now: float, *, accepted: bool) -> None:
        """A report carried ``drill_id``'s section: the next is due an interval on; a drill
        over needs none after its last one was accepted."""
        followed = self._followed.get(drill_id)
        if followed is None:
            return
        if followed.over and accepted:
            del self._followed[drill_id]
            return
        # Within the interval of this one, with room for the report's own time and jitter.
        followed.due = now + wire.DRILL_REPORT_INTERVAL_S * self._random.uniform(0.8, 0.9)

    def _after_end(self) -> float:
        # A moment after the end, so the requests in flight then are counted; well within
        # DRILL_REPORT_INTERVAL_S of it.
        return wire.DRILL_REPORT_INTERVAL_S * 0.3

    def _update(self, now: float) -> Drill | None:
        """Follow the active drill the client takes part in; mark the others over (their
        last report due shortly after their end) and forget those given up on."""
        current = self._current()
        active = current if current is not None and current.active(now) else None
        if active is not None:
            followed = self._followed.get(active.id)
            if followed is None:
                # Reported at once: the control plane learns the instance takes part.
                self._followed[active.id] = _Followed(active, due=now)
            elif followed.over:  # back in the window (the wall clock was set back)
                followed.drill, followed.over = active, False
        for drill_id, followed in list(self._followed.items()):
            if active is not None and drill_id == active.id:
                continue
            if not followed.over:
                followed.over, followed.ended = True, min(now, followed.drill.ends_at_s)
                followed.due = max(now, followed.ended + self._after_end())
            elif now > followed.ended + DRILL_LAST_REPORT_WITHIN_S:
                del self._followed[drill_id]  # its counts, if any, go with the next report
        return current


__all__ = ["DRILL_LAST_REPORT_WITHIN_S", "DrillSchedule"]
