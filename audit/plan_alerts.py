"""The alerts of planned pins (``presets.plans``): a plan whose start was suspended (open until
it is started anyway, changed, cancelled or missed) and a plan missed (an event). Raised and
resolved inside the plan's transaction by the receivers wired in ``audit.apps``."""

from __future__ import annotations

from datetime import datetime

from audit.alerts import raise_alert
from audit.models import Alert, AlertKind
from audit.notifications import notify_resolved
from presets.documents import format_time
from presets.models import PlannedPin, Selection
from presets.plans import describe


def subject(plan: PlannedPin) -> str:
    return f"plan #{plan.pk}"


def details(plan: PlannedPin) -> dict[str, object]:
    return {
        "plan": plan.pk,
        "preset": plan.preset.name,
        "starts_at": format_time(plan.starts_at),
        "ends_at": format_time(plan.ends_at),
        "planned_by": plan.planned_by,
        "reason": plan.reason,
        "why": plan.state_reason,
    }


def alert_plan_suspended(*, plan: PlannedPin, selection: Selection, now: datetime) -> Alert:
    message = (
        f"{plan.chain.name}: planned pin #{plan.pk} did not start by itself: {plan.state_reason}. "
        f"It was {describe(plan)}. Start it anyway or cancel it on the chain's page."
    )
    alert, _ = raise_alert(
        kind=AlertKind.PLAN_SUSPENDED,
        chain=plan.chain,
        version=selection.version,
        message=message,
        details=details(plan),
        now=now,
        subject=subject(plan),
    )
    return alert


def alert_plan_missed(*, plan: PlannedPin, now: datetime) -> Alert:
    version = Selection.objects.filter(chain_id=plan.chain_id).values_list("version", flat=True).first() or 0
    alert, _ = raise_alert(
        kind=AlertKind.PLAN_MISSED,
        chain=plan.chain,
        version=version,
        message=f"{plan.chain.name}: planned pin #{plan.pk} was missed, {plan.state_reason}. It was {describe(plan)}.",
        details=details(plan),
        now=now,
        resolution="reported: the plan's window has passed",
        subject=subject(plan),
    )
    return alert


def resolve_plan_alert(*, plan: PlannedPin, now: datetime, resolution: str) -> int:
    """Resolve the plan's open suspension alert with ``resolution``; how many (0 or 1)."""
    resolved = 0
    for alert in Alert.objects.select_for_update().filter(
        kind=AlertKind.PLAN_SUSPENDED, chain_id=plan.chain_id, subject=subject(plan), resolved_at__isnull=True
    ):
        alert.resolved_at, alert.resolution = now, resolution[:600]
        alert.save(update_fields=["resolution", "resolved_at"])
        notify_resolved(alert=alert, now=now)
        resolved += 1
    return resolved
