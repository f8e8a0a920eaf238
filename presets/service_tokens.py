"""Issuing and revoking service tokens, each recorded in the access history with its actor.

The commands (``create_token``, ``revoke_token``) and the admin call these; a token's secret
is returned once, at creation, and only its hash is stored. A token has a purpose (``read``,
``write``, ``relay``), says whether it may send usage reports (by default yes, but not a
relay's: a relay forwards each service's report with the service's own token) and whether its
evidence alone is enough to page someone or move a guard (``sole_evidence``, off by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import transaction
from django.utils import timezone

from presets import environments
from presets.access_history import record_access_change
from presets.documents import format_time
from presets.exceptions import InvalidInput, NotFound
from presets.expiry import has_passed
from presets.models import AccessAction, Chain, ServiceToken, TokenPurpose, TokenScope

# A token for a service is meant to live for a while; a longer one is a mistake in the units.
TOKEN_MAX_DAYS = 3660


@dataclass(frozen=True)
class IssuedToken:
    """A new token and its secret (shown once, never stored)."""

    token: ServiceToken
    raw: str


def expiry_refusal(expires_at: datetime | None, *, now: datetime) -> InvalidInput | None:
    """Why a token may not get this expiry, or None (no expiry: it works until revoked)."""
    if expires_at is None:
        return None
    if timezone.is_naive(expires_at):
        return InvalidInput("expires_at", "needs a time zone, e.g. 2027-01-31T00:00:00Z")
    if has_passed(expires_at, now):
        return InvalidInput("expires_at", f"{format_time(expires_at)} is not in the future")
    if expires_at > now + timedelta(days=TOKEN_MAX_DAYS):
        return InvalidInput("expires_at", f"{format_time(expires_at)} is more than {TOKEN_MAX_DAYS} days ahead")
    return None


def create_token(
    *,
    name: str,
    actor: str,
    purpose: str | None = None,
    scope: str | None = None,
    reports: bool | None = None,
    sole_evidence: bool = False,
    expires_at: datetime | None = None,
    environment: str = "",
    chains: Sequence[str] = (),
) -> IssuedToken:
    """Issue a token NAME for ``purpose`` (``scope``, read or write, is the older name of the
    read and write purposes; default read), working until ``expires_at`` (None: until
    revoked). ``reports``: whether it may send usage reports (None: yes unless it is a relay's).
    It reads and reports for ``environment`` (empty: the default) and, when ``chains`` names
    some, for those chains only."""
    try:
        validate_slug(name)
    except ValidationError:
        raise InvalidInput("name", f"{name!r}: token names are slugs (letters, digits, - and _)") from None
    if scope is not None and scope not in TokenScope.values:
        raise InvalidInput("scope", f"{scope!r} is not a scope: one of {', '.join(TokenScope.values)}")
    if purpose is not None and purpose not in TokenPurpose.values:
        raise InvalidInput("purpose", f"{purpose!r} is not a purpose: one of {', '.join(TokenPurpose.values)}")
    if purpose is not None and scope is not None and purpose != scope:
        raise InvalidInput("scope", f"scope {scope} and purpose {purpose} disagree: give the purpose alone")
    purpose = purpose or scope or TokenPurpose.READ
    if reports is None:
        reports = purpose != TokenPurpose.RELAY
    refusal = expiry_refusal(expires_at, now=timezone.now())
    if refusal is not None:
        raise refusal
    environment = environments.check(environment or environments.default())
    bound = _chains(chains)
    with transaction.atomic():
        if ServiceToken.objects.filter(name=name).exists():
            raise InvalidInput("name", f"a token named {name!r} exists; pick another name (revoked names stay taken)")
        token = ServiceToken(
            name=name,
            purpose=purpose,
            reports=reports,
            sole_evidence=sole_evidence,
            expires_at=expires_at,
            environment=environment,
            chains=bound,
        )
        raw = token.issue()
        token.save()
        record_access_change(
            actor=actor,
            action=AccessAction.TOKEN_CREATED,
            subject=name,
            details={
                "purpose": purpose,
                "reports": reports,
                "sole_evidence": sole_evidence,
                "expires_at": format_time(expires_at),
                "environment": environment,
                "chains": bound,
            },
        )
    return IssuedToken(token=token, raw=raw)


def _chains(names: Sequence[str]) -> list[str]:
    """The chains a token is bound to, checked: each a chain some environment has (a typo
    would lock its service out), each once, sorted."""
    bound = sorted({name.strip() for name in names if name.strip()})
    known = set(Chain.objects.filter(name__in=bound).values_list("name", flat=True))
    unknown = [name for name in bound if name not in known]
    if unknown:
        raise InvalidInput(
            "chains", f"no chain named {', '.join(unknown)} in any environment: bind the token to chains that exist"
        )
    return bound


def revoke_token(*, name: str, actor: str) -> ServiceToken:
    """Revoke the token NAME now: the API refuses it at once, the read front within seconds."""
    with transaction.atomic():
        token = ServiceToken.objects.select_for_update().filter(name=name).first()
        if token is None:
            raise NotFound(f"no token named {name!r} (manage.py list_tokens lists them)", details={"name": name})
        if token.revoked_at is not None:
            raise InvalidInput("name", f"token {name!r} was already revoked at {format_time(token.revoked_at)}")
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record_access_change(
            actor=actor, action=AccessAction.TOKEN_REVOKED, subject=name, details={"purpose": token.purpose}
        )
    return token
