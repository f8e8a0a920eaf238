"""The access history: every change of who may do what, with who made it.

Tokens issued and revoked (``presets.service_tokens``, the admin), people created, given or
stripped of a role group (``viewer``, ``oncall``) or of staff, superuser or active status,
wherever that happens (the Django admin, a command, single sign-on). The role and flag
changes are recorded by signal receivers (connected in ``presets.apps``), so the admin, the
commands and single sign-on need not remember to (a queryset ``update()`` or raw SQL sends no
signal and is not recorded: change people through their model). The rows are append-only in
the database.

Sign-in identities linked to an account or unlinked from it (``link_identity``,
``unlink_identity``: single sign-on at a person's first sign-in, an administrator in the admin)
are recorded by those functions themselves.

Who made a change: the innermost ``acting_as(actor)``, else whoever a request's
``request_actor`` names (the signed-in person, for the admin pages), else ``"system"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypedDict

from django.contrib.auth.models import Group, User
from django.db.models import Q

from presets.documents import Time, format_time
from presets.exceptions import InvalidInput
from presets.models import UNCLAIMED_ISSUER, AccessAction, AccessChange, SignInIdentity
from presets.roles import ONCALL_GROUP, VIEWER_GROUP

SYSTEM_ACTOR = "system"

# The role groups whose membership is access (other groups grant nothing here).
ROLE_GROUPS = frozenset({VIEWER_GROUP, ONCALL_GROUP})

# The User flags that grant or take away access: flag -> (action when set, action when cleared).
FLAG_ACTIONS: dict[str, tuple[AccessAction, AccessAction]] = {
    "is_active": (AccessAction.USER_REACTIVATED, AccessAction.USER_DEACTIVATED),
    "is_staff": (AccessAction.STAFF_GRANTED, AccessAction.STAFF_REVOKED),
    "is_superuser": (AccessAction.SUPERUSER_GRANTED, AccessAction.SUPERUSER_REVOKED),
}

# A callable so that a request's actor is read only when something is recorded: most
# requests change no access and should not load their user for it.
_actor: ContextVar[Callable[[], str | None] | None] = ContextVar("access_actor", default=None)


def record_access_change(
    *, actor: str, action: str, subject: str, details: dict[str, Any] | None = None
) -> AccessChange:
    """Append one row to the access history (in the caller's transaction, if any)."""
    if action not in AccessAction.values:
        raise ValueError(f"unknown access action {action!r}: one of {', '.join(AccessAction.values)}")
    return AccessChange.objects.create(actor=actor, action=action, subject=subject, details=details or {})


def link_identity(*, user: User, issuer: str, subject: str, actor: str, how: str) -> SignInIdentity:
    """Link ``user`` to the person ``subject`` at ``issuer``, so that single sign-on signs them
    in to it, and record it with ``actor`` and ``how`` (``first sign-in``, ``claimed``,
    ``admin``). The account's unclaimed mark, if any, goes: it is bound now. Raises
    IntegrityError when the identity, or an identity at that issuer for this account, is
    linked already (run it in a transaction of its own or the caller's)."""
    identity = SignInIdentity.objects.create(user=user, issuer=SignInIdentity.issuer_key(issuer), subject=subject)
    SignInIdentity.objects.filter(user=user, issuer=UNCLAIMED_ISSUER).delete()
    record_access_change(
        actor=actor,
        action=AccessAction.IDENTITY_LINKED,
        subject=user.get_username(),
        details={"issuer": identity.issuer, "subject": subject, "how": how},
    )
    return identity


def unlink_identity(*, identity: SignInIdentity, actor: str) -> None:
    """Unlink ``identity`` from its account (that person is refused until linked again) and
    record it with ``actor``."""
    username = identity.user.get_username()
    issuer, subject = identity.issuer, identity.subject
    identity.delete()
    record_access_change(
        actor=actor,
        action=AccessAction.IDENTITY_UNLINKED,
        subject=username,
        details={"issuer": issuer, "subject": subject},
    )


@contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Name who makes the access changes inside this block (e.g. ``cli:alice``,
    ``oidc:alice@example.com``); the innermost block wins."""
    token = _actor.set(lambda: actor)
    try:
        yield
    finally:
        _actor.reset(token)


@contextmanager
def acting_for(resolve: Callable[[], str | None]) -> Iterator[None]:
    """Like ``acting_as``, with the actor found only when a change is recorded (``None``:
    nobody, so ``"system"``). The request middleware uses this with the signed-in user."""
    token = _actor.set(resolve)
    try:
        yield
    finally:
        _actor.reset(token)


def current_actor() -> str:
    """Who the access changes made now are attributed to."""
    resolve = _actor.get()
    actor = resolve() if resolve is not None else None
    return actor or SYSTEM_ACTOR


def request_actor(user: Any) -> str | None:
    """How a signed-in person making changes through a page is named (``None`` when nobody
    is signed in)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.get_username())


# Reading it: newest first, paged by keyset (time, id) like the selection history.


class AccessEntry(TypedDict):
    """One access change, as the page and ``GET /api/v1/access-history`` show it."""

    id: int
    at: Time
    actor: str
    action: str
    subject: str
    details: dict[str, Any]


def access_entry(row: AccessChange) -> AccessEntry:
    return {
        "id": row.pk,
        "at": format_time(row.time),
        "actor": row.actor,
        "action": row.action,
        "subject": row.subject,
        "details": row.details,
    }


@dataclass(frozen=True)
class AccessPage:
    """One page of the access history and the cursor of the next (older) page."""

    rows: list[AccessChange]
    older_than: int | None


def access_page(*, subject: str | None = None, older_than: int | None = None, size: int) -> AccessPage:
    """``size`` changes, newest first (of one token or person with ``subject``), older than
    the change with id ``older_than``. A cursor naming no change raises ``InvalidInput``."""
    rows = AccessChange.objects.order_by("-time", "-id")
    if subject:
        rows = rows.filter(subject=subject)
    if older_than is not None:
        key = AccessChange.objects.filter(pk=older_than).values_list("time", "id").first()
        if key is None:
            raise InvalidInput("older_than", "this page link names no access change: start again from the newest")
        rows = rows.filter(Q(time__lt=key[0]) | Q(time=key[0], id__lt=key[1]))
    page = list(rows[: size + 1])
    return AccessPage(page[:size], older_than=page[size - 1].pk if len(page) > size else None)


# Signal receivers, connected by presets.apps. They record; they decide nothing.


def remember_flags(sender: type[User], instance: User, update_fields: Any = None, **kwargs: Any) -> None:
    """pre_save: note the flags as stored, to compare after the save. Saves that touch only
    other fields (``last_login`` at every sign-in) cost no query."""
    if instance.pk is None or (update_fields is not None and not set(update_fields) & set(FLAG_ACTIONS)):
        instance._access_flags_before = None  # type: ignore[attr-defined]
        return
    instance._access_flags_before = (  # type: ignore[attr-defined]
        User.objects.filter(pk=instance.pk).values(*FLAG_ACTIONS).first()
    )


def record_user_saved(sender: type[User], instance: User, created: bool, **kwargs: Any) -> None:
    """post_save: a new person, and every flag that changed."""
    actor = current_actor()
    subject = instance.get_username()
    if created:
        flags = {flag: bool(getattr(instance, flag)) for flag in FLAG_ACTIONS}
        record_access_change(actor=actor, action=AccessAction.USER_CREATED, subject=subject, details=flags)
        for flag in ("is_staff", "is_superuser"):
            if flags[flag]:
                record_access_change(actor=actor, action=FLAG_ACTIONS[flag][0], subject=subject)
        if not flags["is_active"]:
            record_access_change(actor=actor, action=AccessAction.USER_DEACTIVATED, subject=subject)
        return
    before = getattr(instance, "_access_flags_before", None)
    instance._access_flags_before = None  # type: ignore[attr-defined]
    if before is None:
        return
    for flag, (granted, revoked) in FLAG_ACTIONS.items():
        now = bool(getattr(instance, flag))
        if now != bool(before[flag]):
            record_access_change(actor=actor, action=granted if now else revoked, subject=subject)


def record_user_deleted(sender: type[User], instance: User, **kwargs: Any) -> None:
    """pre_delete: a person removed, with the roles and flags they had (their group rows go
    with them without an m2m signal)."""
    roles = sorted(instance.groups.filter(name__in=ROLE_GROUPS).values_list("name", flat=True))
    details = {"roles": roles, **{flag: bool(getattr(instance, flag)) for flag in FLAG_ACTIONS}}
    record_access_change(
        actor=current_actor(), action=AccessAction.USER_DELETED, subject=instance.get_username(), details=details
    )


def record_groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool, model: Any, pk_set: set[int] | None, **kwargs: Any
) -> None:
    """m2m_changed on ``User.groups``, from either side (``user.groups.add(group)`` or
    ``group.user_set.add(user)``): each role group gained or lost."""
    if action == "pre_clear":
        # clear() sends no pk_set: note who is in which role group before it goes.
        instance._access_groups_before = _memberships(instance, reverse=reverse, pk_set=None)
        return
    if action == "post_clear":
        pairs = getattr(instance, "_access_groups_before", [])
        instance._access_groups_before = []
        kind = AccessAction.ROLE_REVOKED
    elif action in ("post_add", "post_remove"):
        if not pk_set:
            return
        pairs = _memberships(instance, reverse=reverse, pk_set=pk_set)
        kind = AccessAction.ROLE_GRANTED if action == "post_add" else AccessAction.ROLE_REVOKED
    else:
        return
    if not pairs:
        return
    actor = current_actor()
    for username, role in pairs:
        record_access_change(actor=actor, action=kind, subject=username, details={"role": role})


def _memberships(instance: Any, *, reverse: bool, pk_set: set[int] | None) -> list[tuple[str, str]]:
    """(username, role group) pairs the change touches; ``pk_set`` None means all current."""
    if not reverse:  # instance is a User; pk_set are groups
        groups = Group.objects.filter(name__in=ROLE_GROUPS)
        groups = groups.filter(pk__in=pk_set) if pk_set is not None else groups.filter(user=instance)
        return [(instance.get_username(), name) for name in sorted(groups.values_list("name", flat=True))]
    if instance.name not in ROLE_GROUPS:  # instance is a Group; pk_set are users
        return []
    users = User.objects.filter(pk__in=pk_set) if pk_set is not None else instance.user_set.all()
    return [(username, instance.name) for username in sorted(users.values_list("username", flat=True))]
