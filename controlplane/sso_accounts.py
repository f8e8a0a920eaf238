"""The people single sign-on signs in (OpenID Connect, ``controlplane.sso``; a trusted proxy's
headers, ``controlplane.proxy_auth``): their account found by who the provider says they are,
or made, and their roles taken from the provider's groups at every sign-in.

One mapping serves both: a person is on call when one of their groups is in
OIDC_ONCALL_GROUPS, a viewer when one is in OIDC_VIEWER_GROUPS, staff when one is in
OIDC_STAFF_GROUPS, superuser (and staff) when one is in OIDC_SUPERUSER_GROUPS. The provider
decides, both ways: a group removed there takes the role, staff or superuser away at the next
sign-in, and an account made superuser here by hand loses it at its next sign-in unless its
groups say so. A person in none of those groups is refused (OIDC_UNMAPPED_USERS=refuse, the
default: the provider may let in the whole organisation) or let in as a viewer
(OIDC_UNMAPPED_USERS=viewer).

An account is found by its sign-in identity (``presets.models.SignInIdentity``): the
provider's issuer and its subject for the person, which the provider never gives anyone else.
The username is only the name a new account is made with. A provider's usernames (and email
addresses, unless it verified them) are whatever its administrators and users allow, so a
sign-in whose identity is not linked never opens an existing account of the same name:

- an account linked to another identity (another person at the provider carrying the same
  name) is refused;
- a local account (a password, or made here without one: the first admin, people added in
  the admin) is refused until an administrator links it (the admin, "Sign-in identities"),
  recorded in the access history;
- an account single sign-on made before identities were kept carries an ``unclaimed`` mark
  (presets/migrations/0008_sign_in_identities.py says which): its next sign-in binds it to
  the identity that signs in, once, recorded in the access history. The subject was never
  stored, so nothing better can be known; the account was reachable by that name alone until
  now, and whoever binds it gets only the roles their own groups grant.

The trusted proxy names people and nothing else: its identities have the issuer
``proxy:<PROXY_AUTH_USER_HEADER in lower case>`` and the name as their subject. The proxy's names are its
provider's to keep unique, as they always were; what the identity adds is that a local account
of the same name is still never taken, and that names read from another header (another
namespace) are not the same people.

Role changes and links are made through the ORM inside ``acting_as``, so the access history
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

from presets.access_history import acting_as, link_identity
from presets.models import IDENTITY_MAX, SignInIdentity
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
    superuser: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls) -> RoleMapping:
        return cls(
            oncall=frozenset(settings.OIDC_ONCALL_GROUPS),
            viewer=frozenset(settings.OIDC_VIEWER_GROUPS),
            staff=frozenset(settings.OIDC_STAFF_GROUPS),
            unmapped=settings.OIDC_UNMAPPED_USERS,
            superuser=frozenset(settings.OIDC_SUPERUSER_GROUPS),
        )


@dataclass(frozen=True)
class Roles:
    """What a person may do here, as the provider's groups say."""

    oncall: bool = False
    viewer: bool = False
    staff: bool = False
    superuser: bool = False

    @property
    def granted(self) -> bool:
        return self.oncall or self.viewer or self.staff or self.superuser


def roles_for(groups: Iterable[str], *, mapping: RoleMapping) -> Roles | None:
    """The roles ``groups`` (the provider's values, compared exactly) grant; ``None`` when
    they grant none and such people are refused. A superuser is staff too: the admin is
    where a superuser's powers are used."""
    values = set(groups)
    superuser = bool(values & mapping.superuser)
    roles = Roles(
        oncall=bool(values & mapping.oncall),
        viewer=bool(values & mapping.viewer),
        staff=superuser or bool(values & mapping.staff),
        superuser=superuser,
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


def sign_in(
    *,
    issuer: str,
    subject: str,
    username: str,
    groups: Iterable[str],
    actor: str,
    profile: dict[str, str] | None = None,
) -> User:
    """The account of the person ``subject`` at ``issuer``: the one linked to them, or a new
    one named ``username`` (linked to them); its role groups, staff and superuser flags set from
    ``groups`` and its profile (email, first_name, last_name) from ``profile``; all in one
    transaction, each change recorded with ``actor``.

    Raises SignInRefused for an identity or a name this site cannot hold, for a person the
    mapping grants nothing, for an existing account of that name the identity is not linked
    to (a local account, another person's), and for a deactivated one."""
    issuer = SignInIdentity.issuer_key(issuer)
    _check_identity(issuer, subject)
    roles = roles_for(groups, mapping=RoleMapping.from_settings())
    if roles is None:
        raise SignInRefused(
            f"{username} is signed in, but none of their groups has access here: "
            "ask an administrator for one that does."
        )
    with acting_as(actor), transaction.atomic():
        user = _account(issuer=issuer, subject=subject, username=username, actor=actor)
        if not user.is_active:
            raise SignInRefused(f"The account {user.get_username()} is deactivated here: ask an administrator.")
        _set_profile(user, profile or {})
        grant(user=user, roles=roles)
    return user


def grant(*, user: User, roles: Roles) -> None:
    """Make ``user``'s role groups and staff and superuser flags exactly what ``roles`` says
    (the caller names the actor). Changes only what differs, so an unchanged person costs no
    history row."""
    wanted = {ONCALL_GROUP: roles.oncall, VIEWER_GROUP: roles.viewer}
    held = set(user.groups.filter(name__in=wanted).values_list("name", flat=True))
    for name, want in wanted.items():
        if want and name not in held:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        elif not want and name in held:
            user.groups.remove(Group.objects.get(name=name))
    flags = {"is_staff": roles.staff, "is_superuser": roles.superuser}
    changed = [flag for flag, want in flags.items() if getattr(user, flag) != want]
    for flag in changed:
        setattr(user, flag, flags[flag])
    if changed:
        user.save(update_fields=changed)
    # presets.roles caches a person's role groups on the object: this one's are now stale.
    for cached in ("_role_groups_cache", "_can_change_cache"):
        user.__dict__.pop(cached, None)


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


def _check_identity(issuer: str, subject: str) -> None:
    for part, value in (("issuer", issuer), ("subject", subject)):
        if not value.strip() or len(value) > IDENTITY_MAX:
            raise SignInRefused(
                f"{provider_name()} did not give an identity this site can keep (its {part} must be 1 to "
                f"{IDENTITY_MAX} characters), so you are not signed in: ask an administrator."
            )


def _account(*, issuer: str, subject: str, username: str, actor: str) -> User:
    """The account linked to the identity, locked for this sign-in, or a new one linked to it."""
    try:
        with transaction.atomic():
            return _linked_account(issuer=issuer, subject=subject, username=username, actor=actor)
    except IntegrityError:
        pass
    # The same person's sign-in in another tab made the account or the link meanwhile (the
    # insert waited for it to commit): this time it is found.
    try:
        with transaction.atomic():
            return _linked_account(issuer=issuer, subject=subject, username=username, actor=actor)
    except IntegrityError:
        raise SignInRefused("Another sign-in made the same account at the same moment: sign in again.") from None


def _linked_account(*, issuer: str, subject: str, username: str, actor: str) -> User:
    linked = SignInIdentity.objects.filter(issuer=issuer, subject=subject).values_list("user_id", flat=True).first()
    if linked is not None:
        return User.objects.select_for_update().get(pk=linked)
    # Only a new account takes the provider's name: a linked one keeps the name it has.
    _check_username(username)
    user = User.objects.select_for_update().filter(username=username).first()
    if user is None:
        user = User.objects.create_user(username)  # no password: an unusable one
        link_identity(user=user, issuer=issuer, subject=subject, actor=actor, how="first sign-in")
        return user
    held = list(SignInIdentity.objects.filter(user=user))
    if any((identity.issuer, identity.subject) == (issuer, subject) for identity in held):
        return user  # linked by this person's sign-in in another tab while this one waited for the lock
    yours = f"issuer {issuer}, subject {subject}"
    if any(not identity.is_unclaimed for identity in held):
        raise SignInRefused(
            f"The account {username} here belongs to someone else's sign-in, so you are not signed in: "
            f"if it is yours, ask an administrator to link it to your identity ({yours})."
        )
    if held and not user.has_usable_password():
        # Made by single sign-on before identities were kept: bound now, once.
        link_identity(user=user, issuer=issuer, subject=subject, actor=actor, how="claimed")
        return user
    password = " sign in with its password, or" if settings.LOCAL_PASSWORDS and user.has_usable_password() else ""
    raise SignInRefused(
        f"{username} is a local account here, not linked to single sign-on, so single sign-on does not sign in "
        f"to it:{password} ask an administrator to link it to your identity ({yours})."
    )


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
