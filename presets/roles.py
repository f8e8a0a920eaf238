"""Who may do what: viewers read, on-call engineers read and change selections, staff
administer people and tokens, superusers do everything.

A role is a group (``viewer``, ``oncall``); staff is Django's flag and grants the admin and
the access history, not the chains. A person signed in with neither role group (and not a
superuser) reads nothing: the pages show them who to ask, the API answers 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser

VIEWER_GROUP = "viewer"
ONCALL_GROUP = "oncall"
ROLE_GROUPS = (VIEWER_GROUP, ONCALL_GROUP)

# Where a person's role groups are kept once read: on the user object, which Django loads
# once a request, so every check in a request shares one query. Code that changes the groups
# of an object it goes on using drops this (controlplane/sso_accounts.py, ``grant``).
_CACHE = "_role_groups_cache"


def _signed_in(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def role_groups(user: Any) -> frozenset[str]:
    """The role groups (``viewer``, ``oncall``) ``user`` is in; read once per user object."""
    groups = getattr(user, "groups", None)  # a service token (the API's TokenPrincipal) has none
    if groups is None or not _signed_in(user):
        return frozenset()
    cached: frozenset[str] | None = getattr(user, _CACHE, None)
    if cached is None:
        cached = frozenset(groups.filter(name__in=ROLE_GROUPS).values_list("name", flat=True))
        setattr(user, _CACHE, cached)
    return cached


def can_view(user: Any) -> bool:
    """Viewers, on-call engineers and superusers may see what is live and its history."""
    if not _signed_in(user):
        return False
    return bool(user.is_superuser) or bool(role_groups(user))


def can_change(user: Any) -> bool:
    """On-call engineers (and superusers) may select, revert, extend and restore."""
    if not _signed_in(user):
        return False
    return bool(user.is_superuser) or ONCALL_GROUP in role_groups(user)


def can_see_access(user: Any) -> bool:
    """Staff and on-call engineers may read the access history (who may do what, and who
    changed it); viewers may not."""
    return _signed_in(user) and (bool(user.is_staff) or can_change(user))


def can_see_delivery_errors(user: Any) -> bool:
    """On-call engineers, superusers and staff may read why a delivery failed; service tokens
    and viewers see each delivery's state and attempts only: an error describes a target
    (its status, whether it could be reached), which those who act on alerts need and readers
    of the feeds do not."""
    if not isinstance(user, AbstractBaseUser) or not _signed_in(user):
        return False
    return bool(getattr(user, "is_staff", False)) or can_change(user)


def actor_of(user: Any) -> str:
    """How a change by this principal (a person or a service token) is attributed."""
    return str(user.username)
