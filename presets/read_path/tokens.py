"""The read front's token check: a raw bearer token -> whether it is live, for a few seconds.

A revoked token stops working on the hot path within ``TOKEN_CACHE_S``; a token's use is still
recorded (``last_used_at``) at most once a minute by ``models.use_token``.
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
    on; a token it has never seen raises, and the front answers 503.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[bool, float]] = {}

    async def is_valid(self, raw: str) -> bool:
        now = time.monotonic()
        hit = self._known.get(raw)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            token = await in_worker_thread(use_token)(raw)
        except Exception:
            if hit is not None:
                return hit[0]
            raise
        if len(self._known) >= TOKEN_CACHE_MAX:
            self._known.clear()  # bounded memory against floods of random tokens
        self._known[raw] = (token is not None, now + TOKEN_CACHE_S)
        return token is not None
