"""The people single sign-on signs in (OpenID Connect, ``controlplane.sso``; a trusted proxy's
headers, ``controlplane.proxy_auth``): their account found or made, and their roles taken from
the provider's groups at every sign-in.

One mapping serves both: a person is on call when one of their groups is in
OIDC_ONCALL_GROUPS, a viewer when one is in OIDC_VIEWER_GROUPS, staff when one is in
OIDC_STAFF_GROUPS. The provider decides: a group removed there takes the role away at the
next sign-in. A person in none of those groups is refused (OIDC_UNMAPPED_USERS=refuse, the
default: the provider may let in the whole organisation) or let in as a viewer
(OIDC_UNMAPPED_USERS=viewer).

Single sign-on never signs anyone in to a local account (one with a usable password: the
first admin, people added in the admin). A provider's username is whatever its administrators
allow, and taking over ``admin`` by naming oneself so must not be possible; an administrator
hands a local account over by turning its password off (the admin's password page).
Superuser is never granted or taken here: that stays a local decision.

Role changes are made through the ORM inside ``acting_as``, so the access history
(``presets.access_history``) records each one with the provider as its actor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from presets.access_history import acting_as
from presets.roles import ONCALL_GROUP, VIEWER_GROUP

UNMAPPED_CHOICES = ("refuse", "viewer")


class SignInRefused(Exception):
    """Single sign-on vouched for this person, but they may not sign in here; the message
    says why, in words for them."""


@dataclass(frozen=True)
class RoleMapping:
    """Which provider groups grant which role, and what a person in none of them gets."""

    oncall: frozenset[str]
    viewer: frozenset[str]
    staff: frozenset[str]
    unmapped: str = "refuse"

    @classmethod
    def from_settings(cls) -> RoleMapping:
        return cls(
            oncall=frozenset(settings.OIDC_ONCALL_GROUPS),
            viewer=frozenset(settings.OIDC_VIEWER_GROUPS),
            staff=frozenset(settings.OIDC_STAFF_GROUPS),
            unmapped=settings.OIDC_UNMAPPED_USERS,
        )


@dataclass(frozen=True)
class Roles:
    """What a person may do here, as the provider's groups say."""

    oncall: bool = False
    viewer: bool = False
    staff: bool = False

    @property
    def granted(self) -> bool:
        return self.oncall or self.viewer or self.staff


def roles_for(groups: Iterable[str], *, mapping: RoleMapping) -> Roles | None:
    """The roles ``groups`` (the provider's values, compared exactly) grant; ``None`` when
    they grant none and such people are refused."""
    values = set(groups)
    roles = Roles(
        oncall=bool(values & mapping.oncall),
        viewer=bool(values & mapping.viewer),
        staff=bool(values & mapping.staff),
    )
    if roles.granted:
        return roles
    return Roles(viewer=True) if mapping.unmapped == "viewer" else None


def group_values(claim: Any) -> list[str]:
    """A groups claim as a list of strings: providers send a list, some a single string."""
    if isinstance(claim, str):
        return [claim]
    if isinstance(claim, (list, tuple)):
        return [value for value in claim if isinstance(value, str)]
    return []


def sign_in(*, username: str, groups: Iterable[str], actor: str, profile: dict[str, str] | None = None) -> User:
    """The account named ``username``, made if it is new, its role groups and staff flag set
    from ``groups`` and its profile (email, first_name, last_name) from ``profile``; all in one
    transaction, each role change recorded with ``actor``.

    Raises SignInRefused for a name this site cannot hold, for a person the mapping grants
    nothing, for a local account and for a deactivated one."""
    _check_username(username)
    roles = roles_for(groups, mapping=RoleMapping.from_settings())
    if roles is None:
        raise SignInRefused(
            f"{username} is signed in, but none of their groups has access here: "
            "ask an administrator for one that does."
        )
    with acting_as(actor), transaction.atomic():
        user = _account(username)
        if user.has_usable_password():
            raise SignInRefused(
                f"{username} is a local account here, with a password, so single sign-on does not sign in to it: "
                "sign in with its password, or ask an administrator to turn its password off."
            )
        if not user.is_active:
            raise SignInRefused(f"The account {username} is deactivated here: ask an administrator.")
        _set_profile(user, profile or {})
        grant(user=user, roles=roles)
    return user


def grant(*, user: User, roles: Roles) -> None:
    """Make ``user``'s role groups and staff flag exactly what ``roles`` says (the caller names
    the actor). Changes only what differs, so an unchanged person costs no history row."""
    wanted = {ONCALL_GROUP: roles.oncall, VIEWER_GROUP: roles.viewer}
    held = set(user.groups.filter(name__in=wanted).values_list("name", flat=True))
    for name, want in wanted.items():
        if want and name not in held:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        elif not want and name in held:
            user.groups.remove(Group.objects.get(name=name))
    if user.is_staff != roles.staff:
        user.is_staff = roles.staff
        user.save(update_fields=["is_staff"])
    # roles.can_change caches its answer on the object: this one is now stale.
    user.__dict__.pop("_can_change_cache", None)


def provider_name() -> str:
    return str(settings.OIDC_PROVIDER_NAME)


def _check_username(username: str) -> None:
    field = User._meta.get_field("username")
    try:
        field.clean(username, None)
    except ValidationError as exc:
        raise SignInRefused(
            f"The name {username!r} single sign-on gave cannot be a username here ({' '.join(exc.messages)}): "
            "ask an administrator."
        ) from None


def _account(username: str) -> User:
    """The user ``username``, locked for this sign-in, or a new one without a password."""
    user = User.objects.select_for_update().filter(username=username).first()
    if user is not None:
        return user
    try:
        with transaction.atomic():
            return User.objects.create_user(username)  # no password: an unusable one
    except IntegrityError:
        # The same person's sign-in in another tab made it meanwhile.
        return User.objects.select_for_update().get(username=username)


def _set_profile(user: User, profile: dict[str, str]) -> None:
    changed = []
    for field in ("email", "first_name", "last_name"):
        value = profile.get(field)
        if isinstance(value, str):
            value = value[: User._meta.get_field(field).max_length]  # type: ignore[union-attr]
            if getattr(user, field) != value:
                setattr(user, field, value)
                changed.append(field)
    if changed:
        user.save(update_fields=changed)
