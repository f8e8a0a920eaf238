"""Whose evidence is enough to page someone or move a guard: the distinct service tokens it
came with.

Any service may name as many instances as it likes (``X-Chain-Client`` is whatever it says),
so instances alone cannot tell one service from many. A page-level alert (``provider_failing``,
``provider_credentials``) or a guard's restore therefore also needs its evidence to come with
EVIDENCE_MIN_TOKENS (2) distinct service tokens, or with one token an operator marked
``sole_evidence`` (a service that is the only one reading its chain). The tokens are those the
usage reports came with (``ProviderEvidence.token``): a relay forwards each service's report
with the service's own token, so behind a relay it is the service's token that counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from audit.models import RefusedEvidence, RefusedReason
from presets.models import ServiceToken

# Names shown in a line for people; the JSON lists them all.
SHOWN = 5


@dataclass(frozen=True)
class TokenEvidence:
    """The distinct tokens some evidence came with, and whether that is enough."""

    tokens: tuple[str, ...]
    sole: tuple[str, ...]
    """The ones marked ``sole_evidence`` (active tokens only)."""
    needed: int
    """EVIDENCE_MIN_TOKENS when weighed."""

    @property
    def enough(self) -> bool:
        """At least ``needed`` distinct tokens, or one marked sole evidence."""
        return len(self.tokens) >= self.needed or bool(self.sole)

    def words(self) -> str:
        """'evidence from 2 tokens (svc-a, svc-b)'."""
        shown = ", ".join(self.tokens[:SHOWN]) + (
            f" and {len(self.tokens) - SHOWN} more" if len(self.tokens) > SHOWN else ""
        )
        count = len(self.tokens)
        return f"evidence from {count} token{'' if count == 1 else 's'}" + (f" ({shown})" if shown else "")

    def why_not(self) -> str | None:
        """Why this is not enough, in plain words; None when it is."""
        if self.enough:
            return None
        return f"{self.words()}; {self.needed} needed or a token marked sole evidence"

    def as_json(self) -> dict[str, Any]:
        return {"tokens": list(self.tokens), "token_count": len(self.tokens), "sole_evidence": list(self.sole)}


def weigh_tokens(names: Iterable[str]) -> TokenEvidence:
    """The evidence of these token names (one query, for the ``sole_evidence`` marks)."""
    tokens = tuple(sorted(set(names)))
    sole = (
        tuple(
            ServiceToken.objects.active()
            .filter(name__in=tokens, sole_evidence=True)
            .order_by("name")
            .values_list("name", flat=True)
        )
        if tokens
        else ()
    )
    return TokenEvidence(tokens=tokens, sole=sole, needed=settings.EVIDENCE_MIN_TOKENS)


# --- what was refused or pruned, counted per token (for /metrics and fleet status) ---------------


def count_refused(*, token: str, reason: str, chain: str = "", count: int = 1, now: datetime | None = None) -> None:
    """Add ``count`` to what ``token``'s evidence lost for ``reason`` (on ``chain``, for pruned
    instance rows): one row per (token, chain, reason), shared by every process."""
    now = now or timezone.now()
    rows = RefusedEvidence.objects.filter(token=token, chain=chain, reason=reason)
    if rows.update(count=F("count") + count, last_at=now):
        return
    try:
        with transaction.atomic():
            RefusedEvidence.objects.create(token=token, chain=chain, reason=reason, count=count, last_at=now)
    except IntegrityError:  # another process made it meanwhile
        rows.update(count=F("count") + count, last_at=now)


def capped_tokens(chain_names: Iterable[str], *, now: datetime | None = None) -> dict[str, list[str]]:
    """By chain name, the tokens whose instance rows on it were pruned at their cap
    (FLEET_MAX_INSTANCES_PER_TOKEN) within FLEET_INSTANCE_TTL_MINUTES: the chain's fleet
    counts from them are partial."""
    now = now or timezone.now()
    since = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    capped: dict[str, list[str]] = {}
    rows = (
        RefusedEvidence.objects.filter(
            reason=RefusedReason.INSTANCES_PRUNED, chain__in=list(chain_names), last_at__gte=since
        )
        .order_by("chain", "token")
        .values_list("chain", "token")
    )
    for chain, token in rows:
        capped.setdefault(chain, []).append(token)
    return capped
