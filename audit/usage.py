"""The SDK's usage reports: requests served per provider, versions refused, instances ahead."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from audit.models import ProviderUsage, RejectedVersion
from presets.documents import format_time
from presets.models import Chain

log = logging.getLogger(__name__)


def record_usage(
    *, chain: Chain, client: str, providers: dict[str, dict[str, Any]], rejected: list[dict[str, Any]]
) -> None:
    """Add an instance's batched usage report (counts since its last accepted report)."""
    with transaction.atomic():
        _record_usage(chain=chain, client=client, providers=providers, rejected=rejected)


def _record_usage(
    *, chain: Chain, client: str, providers: dict[str, dict[str, Any]], rejected: list[dict[str, Any]]
) -> None:
    for provider, usage in providers.items():
        row, created = ProviderUsage.objects.get_or_create(
            chain=chain,
            client=client,
            provider=provider,
            defaults={"requests": usage["requests"], "last_served_at": usage["last_served_at"]},
        )
        if not created:
            row.requests += usage["requests"]
            row.last_served_at = max(row.last_served_at, usage["last_served_at"])
            row.save()
    for item in rejected:
        RejectedVersion.objects.update_or_create(
            chain=chain,
            client=client,
            version=item["version"],
            defaults={"reason": item["reason"][:500], "at": item["at"]},
        )


def note_ahead(*, chain: Chain, client: str, server_epoch: int, server_version: int, since: datetime) -> None:
    """An instance reports holding a later document than this server serves: the database
    was restored and the epoch not raised yet (the fleet page counts such instances)."""
    log.warning(
        "chain %s: instance %r holds a later document than this server's "
        "v%d (epoch %d) since %s: restored database? run manage.py raise_epoch",
        chain.name,
        client,
        server_version,
        server_epoch,
        format_time(since),
    )
