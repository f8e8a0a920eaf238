"""Promotions: a presets revision reaches the next environment only on evidence from the one
below it.

A sync applies the reviewed presets file to the first environment (``services.sync_presets``);
``promote(to=...)`` carries the revision the environment below ``to`` serves up to ``to``, as a
sync of the same file there (``services.apply_presets``), and is refused, in plain words, until
every point of its evidence holds:

- **served**: the lower environment has served the revision for PROMOTION_MIN_SERVED_MINUTES;
- **health**: its services' error rate since then (their usage reports, every chain of the
  environment) is no more than PROMOTION_ERROR_MARGIN_PERCENT points above the rate over as
  long a time before it, and there was traffic to judge;
- **drills**: each chain whose default preset the revision changes (for ``to``) passed a
  failover drill of that very definition in the lower environment (a drill runs on a chain's
  default: never over a pin, so other presets are listed, not drilled);
- **approval** (PROMOTION_APPROVAL): a second person approves a promotion another asked for; it
  waits as ``pending``, its evidence judged again at the approval.

The ``Promotion`` row keeps the evidence it was granted on; both environments' history lists it
(``promotions_of``), and the target's chains record what changed as versions by the promoter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from audit.models import Promotion, PromotionState, ProviderHealthMinute
from audit.provider_health import ERROR_CLASSES
from presets import environments, services
from presets.documents import format_duration, format_time
from presets.exceptions import Conflict, Forbidden, InvalidInput, NotFound
from presets.models import Chain, Drill, Preset, PresetsRevision, Verdict
from presets.presets_file import PresetsFile, parse_presets
from presets.providers import get_registry


@dataclass
class Evidence:
    """What a promotion of ``revision`` from ``source`` to ``target`` stands on now: each point
    judged (``refusals``: the ones that do not hold, in words), and the figures."""

    source: str
    target: str
    revision: PresetsRevision
    refusals: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        return not self.refusals

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "revision": {"sha256": self.revision.sha256, "name": self.revision.name},
            "holds": self.holds,
            "refusals": list(self.refusals),
            **self.details,
        }


def evidence(*, to: str, now: datetime | None = None) -> Evidence:
    """The evidence for promoting to ``to`` now (raises when there is nothing to promote)."""
    now = now or timezone.now()
    target = environments.check(to, "to")
    source = environments.before(target)
    if source is None:
        raise InvalidInput(
            "to", f"{target} is the first environment: a presets file reaches it by a sync (manage.py sync_presets)"
        )
    revision = PresetsRevision.current(source)
    if revision is None:
        raise Conflict(
            f"{source} has no presets revision yet: sync the presets file (manage.py sync_presets), let it "
            f"serve {source}, then promote it to {target}",
            details={"source": source, "target": target},
        )
    served = PresetsRevision.current(target)
    if served is not None and served.sha256 == revision.sha256:
        raise Conflict(
            f"{target} already serves the presets file {revision.name} sha256 {revision.sha256[:12]} "
            f"(since {format_time(served.applied_at)}): nothing to promote",
            details={"source": source, "target": target, "sha256": revision.sha256},
        )
    found = Evidence(source=source, target=target, revision=revision)
    presets_file = parse_presets(revision.text, registry=get_registry(), path=revision.name)
    _served(found, now)
    _health(found, now)
    _drills(found, presets_file)
    found.details["approval"] = {"required": settings.PROMOTION_APPROVAL}
    return found


def promote(*, to: str, actor: str, reason: str, now: datetime | None = None) -> Promotion:
    """Promote the revision the environment below ``to`` serves, once its evidence holds
    (raises Conflict with every point that does not); with PROMOTION_APPROVAL, it waits for a
    second person (``approve``) as ``pending``."""
    now = now or timezone.now()
    reason = services.clean_reason(reason)
    found = evidence(to=to, now=now)
    _refuse_unless_it_holds(found)
    with transaction.atomic():
        promotion = Promotion.objects.create(
            source=found.source,
            target=found.target,
            revision=found.revision,
            state=PromotionState.PENDING,
            requested_by=actor,
            requested_at=now,
            reason=reason,
            evidence=found.as_json(),
        )
        if not settings.PROMOTION_APPROVAL:
            _apply(promotion, found, now=now)
    return promotion


def approve(*, promotion: int, actor: str, now: datetime | None = None) -> Promotion:
    """Approve a pending promotion (a second person: not who asked for it), its evidence judged
    again now; it is promoted then."""
    now = now or timezone.now()
    with transaction.atomic():
        held = Promotion.objects.select_for_update().filter(pk=promotion).select_related("revision").first()
        if held is None:
            raise NotFound(f"no promotion {promotion}", details={"promotion": promotion})
        if held.state != PromotionState.PENDING:
            raise InvalidInput("promotion", f"promotion {promotion} is {held.state}: only a pending one is approved")
        if held.requested_by == actor:
            raise Forbidden(
                f"{actor} asked for promotion {promotion}: a second person approves it (PROMOTION_APPROVAL)",
                details={"promotion": promotion, "requested_by": actor},
            )
        found = evidence(to=held.target, now=now)
        if found.revision.pk != held.revision_id:
            raise Conflict(
                f"{held.source} serves another presets revision since promotion {promotion} was asked for "
                f"({found.revision.name} sha256 {found.revision.sha256[:12]}): ask for a new promotion",
                details={"promotion": promotion, "sha256": found.revision.sha256},
            )
        _refuse_unless_it_holds(found)
        held.approved_by, held.approved_at, held.evidence = actor, now, found.as_json()
        _apply(held, found, now=now)
    return held


def promotions_of(environment: str, *, limit: int = 50) -> list[Promotion]:
    """The promotions to or from ``environment``, newest first: its history of them."""
    found = Promotion.objects.filter(Q(source=environment) | Q(target=environment)).select_related("revision")
    return list(found[:limit])


def get(promotion: int) -> Promotion:
    found = Promotion.objects.select_related("revision").filter(pk=promotion).first()
    if found is None:
        raise NotFound(f"no promotion {promotion}", details={"promotion": promotion})
    return found


def entry(promotion: Promotion) -> dict[str, Any]:
    """A promotion as the API and the CLI give it."""
    return {
        "id": promotion.pk,
        "source": promotion.source,
        "target": promotion.target,
        "state": promotion.state,
        "revision": {"sha256": promotion.revision.sha256, "name": promotion.revision.name},
        "requested_by": promotion.requested_by,
        "requested_at": format_time(promotion.requested_at),
        "reason": promotion.reason,
        "approved_by": promotion.approved_by or None,
        "approved_at": format_time(promotion.approved_at),
        "promoted_at": format_time(promotion.promoted_at),
        "evidence": promotion.evidence,
        "changes": promotion.changes,
    }


def describe(found: Evidence) -> str:
    """The evidence in one paragraph: why a promotion is refused, or what it stands on."""
    if found.refusals:
        return f"promoting {found.revision.name} from {found.source} to {found.target} is refused: " + "; ".join(
            found.refusals
        )
    served = found.details["served"]
    return (
        f"{found.source} has served {found.revision.name} sha256 {found.revision.sha256[:12]} for "
        f"{format_duration(served['seconds'])}; {found.details['health']['words']}; {found.details['drills']['words']}"
    )


# --- the points of the evidence ----------------------------------------------------------------


def _served(found: Evidence, now: datetime) -> None:
    since = found.revision.applied_at
    seconds = max(0.0, (now - since).total_seconds())
    required = settings.PROMOTION_MIN_SERVED_MINUTES * 60
    found.details["served"] = {"since": format_time(since), "seconds": round(seconds), "required_seconds": required}
    if seconds < required:
        found.refusals.append(
            f"{found.source} has served it for {format_duration(seconds)} of the {format_duration(required)} "
            f"required (PROMOTION_MIN_SERVED_MINUTES): promote after {format_time(since + timedelta(seconds=required))}"
        )


def _health(found: Evidence, now: datetime) -> None:
    since = found.revision.applied_at
    kept_from = now - timedelta(hours=settings.PROVIDER_HEALTH_RETENTION_HOURS)
    before_from = max(since - (now - since), kept_from)
    chains = Chain.objects.filter(environment=found.source).values("pk")
    after = _rate(chains, since, now)
    before = _rate(chains, before_from, since)
    margin = settings.PROMOTION_ERROR_MARGIN_PERCENT
    health: dict[str, Any] = {"after": after, "before": before, "margin_points": margin}
    if after["attempts"] == 0:
        health["words"] = f"no usage reports from {found.source} since the revision"
        found.refusals.append(
            f"no usage reports from {found.source} since it got the revision ({format_time(since)}): its health "
            "cannot be judged (services send usage reports unless told not to; a published copy's readers send none)"
        )
    elif before["attempts"] == 0:
        health["words"] = f"{after['error_percent']:.1f} % errors since, nothing before to compare"
    else:
        health["words"] = f"{after['error_percent']:.1f} % errors since, {before['error_percent']:.1f} % before"
        if after["error_percent"] > before["error_percent"] + margin:
            found.refusals.append(
                f"{found.source}'s health is worse since the revision: {after['error_percent']:.1f} % errors of "
                f"{after['attempts']} attempts, against {before['error_percent']:.1f} % of {before['attempts']} "
                f"before (PROMOTION_ERROR_MARGIN_PERCENT allows {margin} points more)"
            )
    found.details["health"] = health


def _rate(chains: Any, since: datetime, until: datetime) -> dict[str, Any]:
    sums = ProviderHealthMinute.objects.filter(chain__in=chains, minute__gte=since, minute__lt=until).aggregate(
        served=Sum("served"), **{name: Sum(name) for name in ERROR_CLASSES}
    )
    errors = sum(sums[name] or 0 for name in ERROR_CLASSES)
    attempts = errors + (sums["served"] or 0)
    return {"attempts": attempts, "errors": errors, "error_percent": 100 * errors / attempts if attempts else 0.0}


def _drills(found: Evidence, presets_file: PresetsFile) -> None:
    """Each chain whose default the revision changes (for the target) passed a drill of that
    definition in the source; other changed presets are listed."""
    target_presets = {
        (preset.chain.name, preset.name): preset.source_hash
        for preset in Preset.objects.filter(chain__environment=found.target).select_related("chain")
    }
    drilled: list[dict[str, Any]] = []
    not_drillable: list[str] = []
    missing: list[str] = []
    for spec in presets_file.chains.values():
        default = spec.default_in(found.source)
        for preset in spec.presets.values():
            if target_presets.get((spec.name, preset.name)) == preset.source_hash:
                continue  # the target has this definition already
            if preset.name != default:
                not_drillable.append(f"{spec.name}/{preset.name}")
                continue
            drill = _passed_drill(found.source, spec.name, preset.steps)
            if drill is None:
                missing.append(f"{spec.name}/{preset.name}")
            else:
                drilled.append(
                    {"preset": f"{spec.name}/{preset.name}", "drill": drill.pk, "at": format_time(drill.starts_at)}
                )
    words = (
        ", ".join(f"{item['preset']} passed drill {item['drill']}" for item in drilled) or "no default changed"
    ) + (f"; changed, not drilled (a drill runs on a default): {', '.join(not_drillable)}" if not_drillable else "")
    found.details["drills"] = {"passed": drilled, "missing": missing, "not_drillable": not_drillable, "words": words}
    if missing:
        found.refusals.append(
            f"no passed failover drill in {found.source} of the changed default {', '.join(missing)}: "
            f"run one there (manage.py drill start CHAIN --environment {found.source} ...) and promote once it passes"
        )


def _passed_drill(environment: str, chain: str, steps: list[dict[str, Any]]) -> Drill | None:
    """The latest passed drill of ``chain`` in ``environment`` that ran exactly these steps."""
    drills = Drill.objects.filter(chain__environment=environment, chain__name=chain, verdict=Verdict.PASSED)
    return next((drill for drill in drills.order_by("-starts_at", "-id") if drill.steps == steps), None)


def _refuse_unless_it_holds(found: Evidence) -> None:
    if not found.holds:
        raise Conflict(describe(found), details={"evidence": found.as_json()})


def _apply(promotion: Promotion, found: Evidence, *, now: datetime) -> None:
    """Sync the revision's file into the target, as a change by the promoter, within the caller's transaction."""
    presets_file = parse_presets(found.revision.text, registry=get_registry(), path=found.revision.name)
    who = promotion.approved_by or promotion.requested_by
    approval = f", approved by {promotion.approved_by}" if promotion.approved_by else ""
    reason = (
        f"promoted from {found.source} by {promotion.requested_by}{approval} (promotion {promotion.pk}): "
        f"{promotion.reason}; presets file {found.revision.name} sha256 {found.revision.sha256[:12]}; "
        f"{describe(found)}"
    )
    try:
        report = services.apply_presets(presets_file=presets_file, environment=found.target, reason=reason, actor=who)
    except services.SyncRefused as exc:
        raise Conflict(
            f"{found.target} cannot take the revision as it is: " + "; ".join(exc.problems),
            details={"problems": exc.problems},
        ) from None
    promotion.state, promotion.promoted_at, promotion.changes = PromotionState.PROMOTED, now, report.lines
    promotion.save()
