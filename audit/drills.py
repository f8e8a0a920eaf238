"""Failover drills as the fleet saw them: what each instance reported, the stop conditions,
the verdict, the report, and the alert at the end.

The chain's side of a drill (start, plan, end, abort, the document) is ``presets.drills``';
this module adds what needs the evidence:

- a drill never starts while a provider alert is open on its chain (``start_refusal``,
  passed to ``presets.drills`` by every interface and the beat's sweep);
- the ``drill`` section of a usage report (``record``) is taken from an instance fleet status
  knows only, for a drill of the report's chain that runs or ended moments ago, added up per
  instance (``DrillInstance``) and per minute (``DrillMinute``); then the stop conditions are
  checked (``check_stop``): too many drilled requests failed for the caller or missed their
  deadline, or the fallback hop failing too often, abort the drill at once;
- ``DRILL_JUDGE_AFTER_SECONDS`` after a drill's window closed (the fleet's last reports are
  in: clients report within ``DRILL_REPORT_INTERVAL_S`` of the end) the beat judges it:
  passed, or failed with its reasons (``judge_drills``);
- every verdict, and every abort, is told as an alert (``drill_failed`` with the deep link to
  pin the healthiest preset, or ``drill_passed``: the summary), raised by ``events.drill_ended``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db.models import OuterRef, Subquery, Sum
from django.utils import timezone

from audit import actions
from audit.alerts import raise_alert
from audit.models import Alert, AlertKind, DrillInstance, DrillMinute, FleetInstance, page_url
from presets import drills as chain_drills
from presets import environments
from presets.documents import Time, format_time
from presets.models import JUDGED_VERDICTS, Chain, Drill, DrillState, Verdict
from presets.wire import LATENCY_BOUNDS_MS, latency_percentile

log = logging.getLogger(__name__)

BUCKETS = len(LATENCY_BOUNDS_MS) + 1
# A report's counts are bounded by what one instance can route between two reports.
MAX_COUNT = 10**9
COUNTS = ("requests", "drilled", "failed", "deadline", "refusals", "fallback_attempts", "fallback_failures")


@dataclass(frozen=True)
class Section:
    """A usage report's ``drill`` section, as parsed (counts since the instance's last report)."""

    id: int
    requests: int = 0
    drilled: int = 0
    failed: int = 0
    deadline: int = 0
    refusals: int = 0
    fallback_attempts: int = 0
    fallback_failures: int = 0
    ended_on: Mapping[str, int] | None = None
    latency_drilled: tuple[int, ...] = ()
    latency_other: tuple[int, ...] = ()


# --- starting --------------------------------------------------------------------------------


def start_refusal(chain: Chain, *, now: datetime | None = None) -> str | None:
    """Why no drill may start on ``chain`` now for the evidence's sake, or None: a provider
    alert open on it (its failing provider would make the drill's verdict say nothing)."""
    open_alert = (
        Alert.objects.filter(
            chain=chain,
            kind__in=[AlertKind.PROVIDER_FAILING, AlertKind.PROVIDER_CREDENTIALS],
            resolved_at__isnull=True,
        )
        .order_by("created_at")
        .first()
    )
    if open_alert is None:
        return None
    return (
        f"the provider alert on {open_alert.subject} ({open_alert.kind}, raised {format_time(open_alert.created_at)}) "
        "is open, and a drill never runs while a provider of its chain is failing: wait for it to resolve"
    )


def start_drill(**kwargs: Any) -> Drill:
    """``presets.drills.start_drill``, refused while a provider alert is open on the chain:
    what every interface calls."""
    environment = environments.resolve(kwargs.get("environment", ""))
    chain = Chain.objects.filter(name=kwargs.get("chain"), environment=environment).first()
    blocked = start_refusal(chain) if chain is not None else None
    return chain_drills.start_drill(blocked=blocked, **kwargs)


def run_drills(*, now: datetime | None = None) -> chain_drills.Sweep:
    """The beat's sweep (``presets.drills.run_drills``) with the provider alerts a start waits
    for, then the ended drills judged."""
    now = now or timezone.now()
    sweep = chain_drills.run_drills(now=now, blocked=lambda chain: start_refusal(chain, now=now))
    judge_drills(now=now)
    return sweep


# --- the fleet's reports ---------------------------------------------------------------------


def record(*, chain: Chain, token: str, client: str, section: Section, now: datetime) -> bool:
    """Add one report's drill section to its drill, if the drill is the chain's and running
    or ended within ``DRILL_JUDGE_AFTER_SECONDS`` (its last reports); whether it was taken.
    Runs in the report's transaction; the caller then checks the stop conditions."""
    late = now - timedelta(seconds=settings.DRILL_JUDGE_AFTER_SECONDS + 60)
    drill = Drill.objects.filter(pk=section.id, chain=chain).exclude(state=DrillState.PLANNED).first()
    if drill is None or (drill.ended_at is not None and drill.ended_at < late):
        return False
    counts = {name: min(getattr(section, name), MAX_COUNT) for name in COUNTS}
    instance, _ = DrillInstance.objects.select_for_update().get_or_create(
        drill=drill,
        client=client,
        defaults={"token": token, "first_report_at": now, "last_report_at": now},
    )
    _add(instance, counts, section)
    instance.last_report_at = now
    instance.save()
    minute, _ = DrillMinute.objects.select_for_update().get_or_create(
        drill=drill, minute=now.replace(second=0, microsecond=0)
    )
    _add(minute, {name: counts[name] for name in ("requests", "drilled", "failed")}, section)
    minute.save()
    return True


def _add(row: DrillInstance | DrillMinute, counts: Mapping[str, int], section: Section) -> None:
    for name, value in counts.items():
        setattr(row, name, getattr(row, name) + value)
    row.ended_on = _merged(row.ended_on, section.ended_on or {})
    row.latency_drilled = _histogram(row.latency_drilled, section.latency_drilled)
    row.latency_other = _histogram(row.latency_other, section.latency_other)


def _merged(held: Mapping[str, int], more: Mapping[str, int]) -> dict[str, int]:
    merged = dict(held)
    for key, value in more.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def _histogram(held: Iterable[int], more: Iterable[int]) -> list[int]:
    total = list(held) or [0] * BUCKETS
    for index, value in enumerate(list(more)[:BUCKETS]):
        total[index] += value
    return total


class Totals(TypedDict):
    requests: int
    drilled: int
    failed: int
    deadline: int
    refusals: int
    fallback_attempts: int
    fallback_failures: int


def totals(drill: Drill) -> Totals:
    """The whole fleet's counts of ``drill``."""
    sums = DrillInstance.objects.filter(drill=drill).aggregate(**{name: Sum(name) for name in COUNTS})
    return Totals(**{name: int(sums[name] or 0) for name in COUNTS})  # type: ignore[typeddict-item]


def stop_reason(drill: Drill, counted: Totals) -> str | None:
    """Which stop condition ``counted`` meets, in words, or None."""
    failed, deadline = counted["failed"], counted["deadline"]
    if failed > drill.max_failed:
        missed = f", {deadline} missing their deadline" if deadline else ""
        allowed = f"more than the {drill.max_failed} it allows" if drill.max_failed else "and it allows none"
        return f"{failed} drilled request(s) failed for the caller{missed}, {allowed}"
    attempts, failures = counted["fallback_attempts"], counted["fallback_failures"]
    if attempts >= chain_drills.MIN_FALLBACK_ATTEMPTS and failures * 10000 > drill.max_fallback_error_bp * attempts:
        return (
            f"the fallback hop {drill.hop + 1} failed {failures} of {attempts} drilled requests' attempts "
            f"({100 * failures / attempts:.1f} %, above the {drill.max_fallback_error_bp / 100:g} % it allows)"
        )
    return None


def check_stop(*, drill: int, now: datetime | None = None) -> bool:
    """Abort ``drill`` at once if a stop condition is met; whether it did."""
    row = Drill.objects.filter(pk=drill, state=DrillState.RUNNING).first()
    if row is None:
        return False
    why = stop_reason(row, totals(row))
    if why is None:
        return False
    aborted = chain_drills.abort_for(drill=drill, why=why, now=now)
    if aborted is not None:
        log.warning("chain %s: drill %d aborted: %s", aborted.chain.name, drill, why)
    return aborted is not None


# --- the verdict -----------------------------------------------------------------------------


def verdict_of(drill: Drill, counted: Totals, *, not_taking_part: int = 0) -> tuple[str, list[str]]:
    """The verdict of a drill whose window closed, and its reasons."""
    reasons: list[str] = []
    why = stop_reason(drill, counted)
    if why is not None:
        reasons.append(why)
    if counted["drilled"] == 0:
        reasons.append("no request was drilled: nothing was proven (did the drilled services send requests?)")
    if reasons:
        return Verdict.FAILED, reasons
    served = counted["drilled"] - counted["failed"]
    reasons.append(
        f"all {counted['drilled']} drilled request(s) were served by the fallback ({served} served, none failed "
        "for the caller)"
    )
    if not_taking_part:
        reasons.append(
            f"{not_taking_part} instance(s) read the drill but did not take part (a client without drills): "
            "their order is unproven"
        )
    return Verdict.PASSED, reasons


def judge_drills(*, now: datetime | None = None) -> list[int]:
    """Judge every drill whose window closed ``DRILL_JUDGE_AFTER_SECONDS`` ago; their ids."""
    now = now or timezone.now()
    due = now - timedelta(seconds=settings.DRILL_JUDGE_AFTER_SECONDS)
    judged = []
    for drill in Drill.objects.filter(state=DrillState.ENDED, verdict=Verdict.RUNNING, ends_at__lte=due):
        counted = totals(drill)
        verdict, reasons = verdict_of(drill, counted, not_taking_part=len(_fleet(drill)["not_taking_part"]))
        if chain_drills.judge(drill=drill.pk, verdict=verdict, reasons=reasons, now=now):
            judged.append(drill.pk)
    return judged


def alert_drill_ended(*, drill: Drill, now: datetime) -> Alert:
    """The alert telling how ``drill`` ended: ``drill_failed`` (failed or aborted) suggests
    pinning the healthiest preset; ``drill_passed`` is its summary."""
    failed = drill.verdict != Verdict.PASSED
    counted = totals(drill)
    summary = (
        f"drill {drill.pk} on {drill.chain.name} {drill.verdict}: {chain_drills.describe(drill)}; "
        f"{counted['drilled']} drilled of {counted['requests']} requests, {counted['failed']} failed for the caller. "
        + " ".join(f"{reason}." for reason in drill.reasons)
    )
    alert, created = raise_alert(
        kind=AlertKind.DRILL_FAILED if failed else AlertKind.DRILL_PASSED,
        chain=drill.chain,
        version=drill.ended_version or drill.started_version or 0,
        subject=f"drill {drill.pk}",
        message=summary,
        details={
            "drill": drill.pk,
            "verdict": drill.verdict,
            "reasons": drill.reasons,
            "preset": drill.preset.name if drill.preset else None,
            "reason": drill.reason,
            "actor": drill.created_by,
            "url": drill_url(drill),
        },
        now=now,
        resolution=f"drill {drill.verdict}",
    )
    if created and failed:
        actions.remember_suggestion(alert)
    return alert


def drill_url(drill: Drill) -> str:
    return page_url(drill.chain.environment, f"/drills/{drill.pk}/")


# --- the report ------------------------------------------------------------------------------


class Latency(TypedDict):
    p50: int | None
    p95: int | None


class InstanceReport(TypedDict):
    service: str
    client: str
    requests: int
    drilled: int
    drilled_pct: float | None
    ended_on: dict[str, int]
    failed: int
    deadline: int
    refusals: int
    latency_ms: dict[str, Latency]
    last_report_at: Time | None


class FleetMember(TypedDict):
    client: str
    service: str
    applied_version: int
    last_seen_at: Time | None


class MinuteReport(TypedDict):
    minute: Time | None
    requests: int
    drilled: int
    failed: int
    ended_on: dict[str, int]
    latency_ms: dict[str, Latency]


class LastDrill(TypedDict):
    id: int
    at: Time | None
    version: int | None
    verdict: str


class DrillSummary(TypedDict):
    """A drill without the fleet's figures, as a chain's list gives it: its report (what each
    instance reported, the timeline) is ``GET /api/v1/drills/<id>``."""

    id: int
    chain: str
    hop: int
    fault: str
    share: float
    services: list[str]
    starts_at: Time | None
    ends_at: Time | None
    minutes: int
    reason: str
    created_by: str
    preset: str | None
    version: int | None
    ended_version: int | None
    ended_at: Time | None
    ended_by: str
    state: str
    verdict: str
    reasons: list[str]
    repeat_days: int | None
    description: str
    url: str


class DrillTotals(Totals):
    """The whole fleet's figures of a drill."""

    drilled_pct: float | None
    ended_on: dict[str, int]
    latency_ms: dict[str, Latency]
    instances_taking_part: int
    instances_not_taking_part: int
    instances_not_polled: int


class DrillReport(DrillSummary):
    """A drill and what the fleet reported of it (``GET /api/v1/drills/<id>``)."""

    step: str
    stop: dict[str, float]
    totals: DrillTotals
    instances: list[InstanceReport]
    not_taking_part: list[FleetMember]
    not_polled: list[FleetMember]
    timeline: list[MinuteReport]


def summary(drill: Drill) -> DrillSummary:
    """``drill`` as a chain's list gives it: the report's fields read from its row alone."""
    return DrillSummary(
        id=drill.pk,
        chain=drill.chain.name,
        hop=drill.hop,
        fault=drill.fault,
        share=drill.share,
        services=list(drill.services),
        starts_at=format_time(drill.starts_at),
        ends_at=format_time(drill.ends_at),
        minutes=drill.minutes,
        reason=drill.reason,
        created_by=drill.created_by,
        preset=drill.preset.name if drill.preset else None,
        version=drill.started_version,
        ended_version=drill.ended_version,
        ended_at=format_time(drill.ended_at),
        ended_by=drill.ended_by,
        state=drill.state,
        verdict=drill.verdict,
        reasons=list(drill.reasons),
        repeat_days=drill.repeat_days,
        description=chain_drills.describe(drill),
        url=drill_url(drill),
    )


def latency(drilled: list[int], other: list[int]) -> dict[str, Latency]:
    return {
        "drilled": Latency(p50=latency_percentile(drilled, 0.5), p95=latency_percentile(drilled, 0.95)),
        "other": Latency(p50=latency_percentile(other, 0.5), p95=latency_percentile(other, 0.95)),
    }


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def _fleet(drill: Drill) -> dict[str, list[FleetMember]]:
    """The instances that read the chain during the drill and sent nothing of it: those that
    held its document (a client without drills) and those that never polled it."""
    if drill.started_version is None:
        return {"not_taking_part": [], "not_polled": []}
    reported = set(DrillInstance.objects.filter(drill=drill).values_list("client", flat=True))
    seen = FleetInstance.objects.filter(chain=drill.chain_id, last_seen_at__gte=drill.starts_at).select_related("token")
    if drill.ended_at is not None:
        seen = seen.filter(first_seen_at__lt=drill.ended_at)
    if drill.services:
        seen = seen.filter(token__name__in=drill.services)
    taking, polled, not_polled = [], [], []
    for instance in seen.order_by("client")[: settings.DRILL_REPORT_MAX_INSTANCES]:
        member = FleetMember(
            client=instance.client,
            service=instance.token.name if instance.token else "",
            applied_version=instance.applied_version,
            last_seen_at=format_time(instance.last_seen_at),
        )
        if instance.client in reported:
            taking.append(member)
        elif instance.applied_version >= drill.started_version:
            polled.append(member)
        else:
            not_polled.append(member)
    return {"not_taking_part": polled, "not_polled": not_polled}


def report(drill: Drill) -> DrillReport:
    """The drill's report: live while it runs, kept after."""
    rows = list(
        DrillInstance.objects.filter(drill=drill).order_by("token", "client")[: settings.DRILL_REPORT_MAX_INSTANCES]
    )
    counted = totals(drill)
    drilled_hist = _histogram([], [])
    other_hist = _histogram([], [])
    ended_on: dict[str, int] = {}
    instances = []
    for row in rows:
        drilled_hist = _histogram(drilled_hist, row.latency_drilled)
        other_hist = _histogram(other_hist, row.latency_other)
        ended_on = _merged(ended_on, row.ended_on)
        instances.append(
            InstanceReport(
                service=row.token,
                client=row.client,
                requests=row.requests,
                drilled=row.drilled,
                drilled_pct=_pct(row.drilled, row.requests),
                ended_on=dict(sorted(row.ended_on.items())),
                failed=row.failed,
                deadline=row.deadline,
                refusals=row.refusals,
                latency_ms=latency(row.latency_drilled or [], row.latency_other or []),
                last_report_at=format_time(row.last_report_at),
            )
        )
    fleet = _fleet(drill)
    steps = drill.steps or []
    step = steps[drill.hop - 1] if 0 < drill.hop <= len(steps) else {}
    timeline = [
        MinuteReport(
            minute=format_time(m.minute),
            requests=m.requests,
            drilled=m.drilled,
            failed=m.failed,
            ended_on=dict(sorted(m.ended_on.items())),
            latency_ms=latency(m.latency_drilled or [], m.latency_other or []),
        )
        for m in DrillMinute.objects.filter(drill=drill).order_by("minute")
    ]
    return DrillReport(
        **summary(drill),
        step=f"{step.get('provider')}/{step.get('model')}" if step else "",
        stop={"max_failed": drill.max_failed, "max_fallback_error_pct": drill.max_fallback_error_bp / 100},
        totals=DrillTotals(
            **counted,
            drilled_pct=_pct(counted["drilled"], counted["requests"]),
            ended_on=dict(sorted(ended_on.items())),
            latency_ms=latency(drilled_hist, other_hist),
            instances_taking_part=len(rows),
            instances_not_taking_part=len(fleet["not_taking_part"]),
            instances_not_polled=len(fleet["not_polled"]),
        ),
        instances=instances,
        not_taking_part=fleet["not_taking_part"],
        not_polled=fleet["not_polled"],
        timeline=timeline,
    )


def last_drills(chain: Chain) -> dict[str, LastDrill]:
    """Each preset's last judged drill, by preset name (the chain API's ``last_drill``)."""
    return {
        drill.preset.name: LastDrill(
            id=drill.pk, at=format_time(drill.starts_at), version=drill.started_version, verdict=drill.verdict
        )
        for drill in chain_drills.last_judged(chain).values()
        if drill.preset is not None
    }


def last_drill_by_chain(chain_ids: list[int]) -> dict[int, dict[str, Any]]:
    """By chain, its last judged drill (as ``last_drills`` gives a preset's, with
    the preset's name): two queries for every chain of the dashboard."""
    latest = (
        Drill.objects.filter(chain=OuterRef("pk"), preset__isnull=False, verdict__in=JUDGED_VERDICTS)
        .order_by("-starts_at", "-id")
        .values("pk")[:1]
    )
    ids = [
        pk
        for pk in Chain.objects.filter(pk__in=chain_ids).annotate(last=Subquery(latest)).values_list("last", flat=True)
        if pk is not None
    ]
    return {
        drill.chain_id: {
            "id": drill.pk,
            "at": format_time(drill.starts_at),
            "version": drill.started_version,
            "verdict": drill.verdict,
            "preset": drill.preset.name if drill.preset else None,
        }
        for drill in Drill.objects.filter(pk__in=ids).select_related("preset")
    }


def report_text(document: DrillReport) -> str:
    """The report as the terminal prints it (``manage.py drill report``)."""
    totals_ = document["totals"]
    lat = totals_["latency_ms"]
    ended_on = ", ".join(f"hop {hop}: {count}" for hop, count in totals_["ended_on"].items()) or "none"

    def ms(value: int | None) -> str:
        return "-" if value is None else f"{value}"

    lines = [
        f"drill {document['id']} on {document['chain']}: {document['description']}",
        f"window {document['starts_at']} to {document['ends_at']} ({document['minutes']} min), by "
        f"{document['created_by']}: {document['reason']}",
        f"verdict: {document['verdict']}",
        *(f"  - {reason}" for reason in document["reasons"]),
        f"drilled {totals_['drilled']} of {totals_['requests']} requests"
        + (f" ({totals_['drilled_pct']} %)" if totals_["drilled_pct"] is not None else "")
        + f"; ended on: {ended_on}",
        f"failed for the caller: {totals_['failed']} (deadline {totals_['deadline']}, refused {totals_['refusals']})",
        f"fallback hop {document['hop'] + 1}: {totals_['fallback_attempts']} attempts, "
        f"{totals_['fallback_failures']} failed",
        f"latency p50/p95 ms: drilled {ms(lat['drilled']['p50'])}/{ms(lat['drilled']['p95'])}, "
        f"not drilled {ms(lat['other']['p50'])}/{ms(lat['other']['p95'])}",
        f"instances: {totals_['instances_taking_part']} took part, {totals_['instances_not_taking_part']} read it "
        f"but did not take part, {totals_['instances_not_polled']} did not poll it",
    ]
    for row in document["instances"]:
        lines.append(
            f"  {row['service']} {row['client']}: {row['drilled']}/{row['requests']} drilled"
            + (f" ({row['drilled_pct']} %)" if row["drilled_pct"] is not None else "")
            + f", failed {row['failed']}"
        )
    for member in document["not_taking_part"]:
        lines.append(f"  {member['service']} {member['client']}: read v{member['applied_version']}, did not take part")
    for member in document["not_polled"]:
        lines.append(f"  {member['service']} {member['client']}: did not poll the drill (v{member['applied_version']})")
    return "\n".join(lines)
