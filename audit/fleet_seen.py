"""What a relay sends on: the service instances it saw read each chain (``POST
/api/v1/fleet/seen``), taken as evidence within bounds.

- Only from a token whose purpose is ``relay`` (``ServiceToken.may_relay``): the API refuses
  any other with 403, saying how to make one.
- At most ``MAX_INSTANCES`` identities a call (the API refuses more with 400) and
  FLEET_SEEN_PER_TOKEN_PER_MINUTE calls a minute per token, counted in the database under the
  key ``seen:<token id>`` with usage reports' limiter (``audit.usage.count_within``), so every
  web process shares the count; past it the call is refused whole (429 with ``Retry-After``).
- The instances are the relay token's: they count against its FLEET_MAX_INSTANCES_PER_TOKEN
  (``audit.fleet_recorder``). A relay forwards no service token with what it saw (it would have
  to send the services' secrets or digests it could make up), so the relay's token answers for
  every instance behind it, and its cap is sized for the fleet behind it.

Whatever is refused is counted (``evidence.count_refused``) for /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from audit import evidence
from audit.fleet_recorder import parse_identity, recorder
from audit.models import RefusedReason
from audit.usage import count_within
from presets import environments
from presets.models import ServiceToken, TokenPurpose

MAX_INSTANCES = 10_000


def purpose_refusal(token: ServiceToken) -> str | None:
    """Why ``token`` may not send fleet reports (counted), or None when it may."""
    if token.may_relay:
        return None
    evidence.count_refused(token=token.name, reason=RefusedReason.SEEN_NOT_RELAY)
    return (
        f"fleet reports (POST /api/v1/fleet/seen) need a token with purpose {TokenPurpose.RELAY}; "
        f"token {token.name!r} has purpose {token.purpose}. Make the relay its own: "
        "manage.py create_token NAME --purpose relay"
    )


@dataclass(frozen=True)
class SeenRefused:
    """The call was over FLEET_SEEN_PER_TOKEN_PER_MINUTE: nothing of it was noted."""

    allowed: int
    retry_after: int

    @property
    def message(self) -> str:
        return (
            f"too many fleet reports: at most {self.allowed} a minute per token "
            f"(FLEET_SEEN_PER_TOKEN_PER_MINUTE); send the next one in {self.retry_after} s"
        )


@dataclass(frozen=True)
class SeenTaken:
    accepted: int
    dropped: int


def take_seen(
    *, token: ServiceToken, instances: Iterable[tuple[str, str | None, str | None]], now: datetime | None = None
) -> SeenTaken | SeenRefused:
    """Admit one relay's call under its per-minute limit and note each (chain, client,
    applied version) that is a valid identity as read with ``token``; what is not one is
    dropped and counted in the answer, as on a read."""
    now = now or timezone.now()
    allowed = settings.FLEET_SEEN_PER_TOKEN_PER_MINUTE
    over = count_within({f"seen:{token.pk}": allowed}, now=now)
    if over is not None:
        evidence.count_refused(token=token.name, reason=RefusedReason.SEEN_TOO_MANY, now=now)
        return SeenRefused(allowed=allowed, retry_after=over.retry_after)
    accepted = dropped = 0
    for chain, client, version in instances:
        identity = parse_identity(client, version)
        # A relay reports for the chains its token reads: its environment's (all or those bound).
        if identity is None or not token.reads(environment=token.environment, chain=chain):
            dropped += 1
            continue
        recorder.seen(environments.label(token.environment, chain), *identity, at=now, token=token.pk)
        accepted += 1
    return SeenTaken(accepted=accepted, dropped=dropped)
