"""Who may do what: viewers read, on-call engineers change selections, staff administer."""

from __future__ import annotations

from typing import Any

VIEWER_GROUP = "viewer"
ONCALL_GROUP = "oncall"


def can_view(user: Any) -> bool:
    """Any signed-in person may see what is live and its history."""
    return bool(user is not None and user.is_authenticated and user.is_active)


def can_change(user: Any) -> bool:
    """On-call engineers (and superusers) may select, revert, extend and restore."""
    if not can_view(user):
        return False
    if user.is_superuser:
        return True
    cached = getattr(user, "_can_change_cache", None)
    if cached is None:
        cached = user.groups.filter(name=ONCALL_GROUP).exists()
        user._can_change_cache = cached
    return bool(cached)


def can_see_access(user: Any) -> bool:
    """Staff and on-call engineers may read the access history (who may do what, and who
    changed it); viewers may not."""
    return can_view(user) and (bool(user.is_staff) or can_change(user))


def actor_of(user: Any) -> str:
    """How a change by this principal (a person or a service token) is attributed."""
    return str(user.username)
