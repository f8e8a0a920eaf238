"""The read front's token check: a raw bearer token -> whether it is live, for a few seconds.

A revoked token stops working on the hot path within ``TOKEN_CACHE_S``; an expiring token stops
at its ``expires_at`` exactly, cached or not (the cache keeps the expiry and checks the clock);
a token's use is still recorded (``last_used_at``) at most once a minute by ``models.use_token``.
"""

from __future__ import annotations

import time

from presets.models import use_token
from presets.read_path.worker_threads import in_worker_thread

TOKEN_CACHE_S = 5.0
TOKEN_CACHE_MAX = 10_000


class TokenCache:
    """Raw bearer token -> whether it is a live token, for a few seconds.

    While the database is down, a token this process has already checked keeps its last
    answer (no token can be revoked meanwhile: revoking needs the database), so warm reads go
    on, until the token's own expiry; a token it has never seen raises, and the front answers
    503.
    """

    def __init__(self) -> None:
        # raw -> (valid, cached until (monotonic), the token's expiry (Unix seconds) or None)
        self._known: dict[str, tuple[bool, float, float | None]] = {}

    async def is_valid(self, raw: str) -> bool:
        now = time.monotonic()
        hit = self._known.get(raw)
        if hit is not None and hit[1] > now:
            return _still_valid(hit)
        try:
            token = await in_worker_thread(use_token)(raw)
        except Exception:
            if hit is not None:
                return _still_valid(hit)
            raise
        if len(self._known) >= TOKEN_CACHE_MAX:
            self._known.clear()  # bounded memory against floods of random tokens
        expires = token.expires_at.timestamp() if token is not None and token.expires_at is not None else None
        self._known[raw] = (token is not None, now + TOKEN_CACHE_S, expires)
        return token is not None


def _still_valid(hit: tuple[bool, float, float | None]) -> bool:
    """A cached answer, with the token's expiry checked against the wall clock (the
    expiry is a wall-clock time, unlike the cache's own deadline)."""
    valid, _, expires = hit
    return valid and (expires is None or time.time() < expires)
