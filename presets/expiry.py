"""When an expiry has passed: the one rule for pins and service tokens alike, in the
database's times (``datetime``), the read path's (Unix seconds) and as a query.

An expiry is the first instant something no longer counts: a pin expiring at 02:00 is not
served at 02:00, a token expiring then is refused then. No expiry never passes.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from django.db.models import Q

Moment = TypeVar("Moment", datetime, float)


def has_passed(expires_at: Moment | None, now: Moment) -> bool:
    """Whether ``expires_at`` (None: never) has passed at ``now``."""
    return expires_at is not None and expires_at <= now


def passed(now: datetime) -> Q:
    """The rows whose ``expires_at`` has passed at ``now``."""
    return Q(expires_at__lte=now)


def not_passed(now: datetime) -> Q:
    """The rows without an expiry, or with one still ahead of ``now``."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)
