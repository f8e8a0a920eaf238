"""Per-provider circuit breakers: stop sending requests to a provider that keeps failing.

A breaker counts the failures that made the router fall through (``failure_threshold``
within ``window_s`` open it), refuses its provider for ``cooldown_s``, then lets one probe
request through (half-open); the probe's result closes it, or opens it again for
``probe_interval_s``: a provider that is still down gets one request per probe interval,
and one that came back is used again within a probe interval of the first request after
it did (a breaker that waited a whole cooldown after each failed probe could miss a
minute's outage's end by most of a cooldown, and keep traffic on the fallback; the
defaults are measured in bench/README.md, "Breaker recovery"). Rejections and
content-policy refusals are not failures: they show the provider is answering.

A failure that says how long to wait (a 429's or 503's ``Retry-After``) opens the breaker
at once for that long (at most ``MAX_RETRY_AFTER_S``): the provider asked every caller to
stay away, so no request of this process is sent before then.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

# The router's logger: breaker lines have always been logged as the router's.
logger = logging.getLogger("chainclient.router")

BreakerState = Literal["closed", "open", "half_open"]

MAX_RETRY_AFTER_S = 600.0
"""The longest a ``Retry-After`` keeps a provider's breaker open: a wrong or hostile header
must not lock a provider out for hours."""


@dataclass(frozen=True)
class BreakerSettings:
    """Per-provider circuit breaker: ``failure_threshold`` counted failures within
    ``window_s`` open it; after ``cooldown_s`` one probe request may try it (half-open);
    the probe's result closes it, or opens it again for ``probe_interval_s``."""

    failure_threshold: int = 5
    window_s: float = 60.0
    cooldown_s: float = 10.0
    probe_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1 (use breaker=None to disable)")
        if self.window_s <= 0 or self.cooldown_s <= 0 or self.probe_interval_s <= 0:
            raise ValueError("window_s, cooldown_s and probe_interval_s must be positive")


DEFAULT_BREAKER = BreakerSettings()


class CircuitBreaker:
    """One provider's breaker. The closed-state checks take no lock: they only read one
    attribute, and a request that races a state change just sees the previous state."""

    def __init__(self, provider: str, settings: BreakerSettings) -> None:
        self.provider = provider
        self.settings = settings
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._failures: deque[float] = deque()
        self._opened_at = 0.0
        self._cooldown_s = settings.cooldown_s
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        return self._state

    def admit(self, now: float) -> str | None:
        """None if a request may try this provider now (taking the half-open probe slot),
        else why not."""
        if self._state == "closed":
            return None
        with self._lock:
            if self._state == "open":
                # The end instant first, as the opening computed it: a caller that waited
                # exactly the cooldown (a same-step retry after its Retry-After) is admitted,
                # with no float remainder left over.
                left = self._opened_at + self._cooldown_s - now
                if left > 0:
                    return f"circuit breaker open ({left:.1f}s of cooldown left)"
                self._state = "half_open"
                self._probe_in_flight = False
            if self._state == "half_open":
                if self._probe_in_flight:
                    return "circuit breaker half-open (a probe request is in flight)"
                self._probe_in_flight = True
            return None

    def record_success(self, now: float) -> None:
        if self._state == "closed":
            return
        with self._lock:
            if self._state == "half_open":
                self._state = "closed"
                self._probe_in_flight = False
                logger.info("chainclient: circuit breaker for %s closed (probe succeeded)", self.provider)

    def record_failure(self, now: float, retry_after_s: float | None = None) -> bool:
        """Count a failure; True when this call opened the breaker (closed or half-open to
        open), for the fleet's count of openings in the usage reports. ``retry_after_s``:
        the provider asked us to wait that long; the breaker opens for it."""
        with self._lock:
            if retry_after_s is not None and retry_after_s > 0:
                return self._hold(now, min(float(retry_after_s), MAX_RETRY_AFTER_S))
            if self._state == "half_open":
                self._open(now, "probe failed", cooldown_s=self.settings.probe_interval_s)
                return True
            if self._state == "closed":
                failures = self._failures
                failures.append(now)
                horizon = now - self.settings.window_s
                while failures and failures[0] <= horizon:
                    failures.popleft()
                if len(failures) >= self.settings.failure_threshold:
                    self._open(now, f"{len(failures)} failures in {self.settings.window_s:g}s")
                    return True
            return False

    def release(self) -> None:
        """Give back a probe slot taken by ``admit`` for an attempt that never ran."""
        if self._state == "closed":
            return
        with self._lock:
            self._probe_in_flight = False

    def reset(self) -> None:
        with self._lock:
            self._state = "closed"
            self._failures.clear()
            self._probe_in_flight = False

    def _hold(self, now: float, seconds: float) -> bool:
        """Open for ``seconds`` (a Retry-After), unless already open for longer."""
        if self._state == "open" and self._opened_at + self._cooldown_s >= now + seconds:
            return False
        opened = self._state != "open"
        self._open(now, f"the provider asked to retry after {seconds:g}s", cooldown_s=seconds)
        return opened

    def _open(self, now: float, why: str, *, cooldown_s: float | None = None) -> None:
        self._state = "open"
        self._opened_at = now
        self._cooldown_s = self.settings.cooldown_s if cooldown_s is None else cooldown_s
        self._failures.clear()
        self._probe_in_flight = False
        logger.warning(
            "chainclient: circuit breaker for %s opened (%s); cooling down %gs",
            self.provider,
            why,
            self._cooldown_s,
        )


__all__ = ["DEFAULT_BREAKER", "MAX_RETRY_AFTER_S", "BreakerSettings", "BreakerState", "CircuitBreaker"]
