"""Who a Slack user is here: the control-plane account their Slack identity is linked to
(``manage.py slack_link``, made by an admin), or, the first time, the one account whose email
came through single sign-on and matches the email Slack has confirmed for them, which is then
linked (recorded in the access history). Anyone else is refused."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from audit import slack
from presets.access_history import link_identity
from presets.models import SignInIdentity


class NotLinked(Exception):
    """A Slack user with no control-plane account to act as."""

    def __init__(self, team: str, user: str) -> None:
        super().__init__(
            "Your Slack account is not linked to a control-plane user, so nothing was changed. Ask an admin "
            f"to run `manage.py slack_link <username> --team {team} --slack-user {user}`, or sign in to the "
            "control plane once with single sign-on using the email Slack has for you."
        )


def person(team: str, user: str) -> User:
    """The active account the Slack user ``user`` of workspace ``team`` acts as; NotLinked."""
    identity = (
        SignInIdentity.objects.filter(issuer=slack.issuer_of(team), subject=user, user__is_active=True)
        .select_related("user")
        .first()
    )
    if identity is not None:
        return identity.user
    account = _by_email(user)
    if account is None:
        raise NotLinked(team, user)
    try:
        with transaction.atomic():
            issuer = slack.issuer_of(team)
            link_identity(user=account, issuer=issuer, subject=user, actor="system:slack", how="slack email")
    except IntegrityError:  # linked meanwhile, or the account has another Slack identity there
        return person_linked_or_refused(team, user)
    return account


def person_linked_or_refused(team: str, user: str) -> User:
    identity = SignInIdentity.objects.filter(issuer=slack.issuer_of(team), subject=user).select_related("user").first()
    if identity is None or not identity.user.is_active:
        raise NotLinked(team, user)
    return identity.user


def _by_email(user: str) -> User | None:
    """The one active account whose email came through single sign-on and is the email Slack
    has confirmed for ``user``; None when there is no such account, or more than one."""
    if not settings.OIDC_ISSUER:
        return None
    info = slack.read("users.info", user=user).get("user") or {}
    email = str((info.get("profile") or {}).get("email") or "").strip()
    if not email or info.get("is_email_confirmed") is False or info.get("deleted"):
        return None
    accounts = list(
        User.objects.filter(
            email__iexact=email,
            is_active=True,
            sign_in_identities__issuer=SignInIdentity.issuer_key(settings.OIDC_ISSUER),
        ).distinct()[:2]
    )
    return accounts[0] if len(accounts) == 1 else None
