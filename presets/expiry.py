"""When an expiry has passed: the one rule for pins and service tokens alike, in the
database's times (``datetime``) and the read path's (Unix seconds); ``presets.models`` says it
as a query (``expiry_passed``, ``expiry_not_passed``). No Django here: the relay applies it too.

An expiry is the first instant something no longer counts: a pin expiring at 02:00 is not
served at 02:00, a token expiring then is refused then. No expiry never passes.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

Moment = TypeVar("Moment", datetime, float)


def has_passed(expires_at: Moment | None, now: Moment) -> bool:
    """Whether ``expires_at`` (None: never) has passed at ``now``."""
    return expires_at is not None and expires_at <= now
