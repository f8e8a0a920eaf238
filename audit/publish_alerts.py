"""The alert of a publishing target that held a document the control plane did not make
(``publish_forged``), raised by the publisher's event (``events.publish_replaced``, wired in
``audit.apps``).

It is an event, raised resolved: the document was replaced before it was raised, so nothing
stays open, and PagerDuty is not paged (the webhook, Slack and email are told). Each
replacement is an alert of its own (``subject``: the target), because each is a write by
someone who may write where services read their chains: find out who. ``/metrics`` counts
them as ``controlplane_publish_replaced_total`` by chain, target and reason.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from audit.alerts import raise_alert
from audit.models import Alert, AlertKind
from presets import environments
from presets.models import Chain

if TYPE_CHECKING:
    from presets.publishing import Replaced

log = logging.getLogger(__name__)

SUBJECT_CHARS = 201  # Alert.subject's length


def alert_publish_replaced(*, replaced: Replaced, now: datetime | None = None) -> Alert | None:
    """Raise ``publish_forged`` for ``replaced``; None when its chain is gone."""
    now = now or timezone.now()
    publication = replaced.publication
    environment = publication.environment or environments.default()
    chain = Chain.objects.filter(name=publication.name, environment=environment).first()
    if chain is None:
        return None
    with transaction.atomic():
        alert, _ = raise_alert(
            kind=AlertKind.PUBLISH_FORGED,
            chain=chain,
            version=replaced.record[1],
            subject=replaced.target[:SUBJECT_CHARS],
            message=str(replaced),
            details=replaced.to_details(),
            now=now,
            resolution=f"replaced with v{replaced.publication.version}",
        )
    return alert
