"""Promotions: a presets revision synced to staging reaches production only on evidence (time
served, health no worse than before, a passed drill of each changed default, and a second
person's approval when PROMOTION_APPROVAL), through ``audit.promotions``, the API and
``manage.py promote``; both environments' history records it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from audit import promotions
from audit.models import Promotion, ProviderHealthMinute
from presets import services
from presets.exceptions import Conflict, Forbidden
from presets.models import Chain, Drill, DrillState, PresetsRevision, Selection, Verdict
from presets.presets_file import parse_presets
from presets.providers import get_registry
from tests.test_environments import make_token
from tests.test_read_front import auth

pytestmark = pytest.mark.django_db

STAGING, PRODUCTION = "staging", "production"
HOUR = timedelta(hours=1)


@pytest.fixture
def revision(settings: Any, example_file: Path) -> list[dict[str, Any]]:
    """Both environments on the example file; then a revision that makes chat's default's
    second step wait longer synced (to staging, the first environment). Its new steps."""
    settings.ENVIRONMENTS = [STAGING, PRODUCTION]
    settings.PROMOTION_MIN_SERVED_MINUTES = 60
    settings.PROMOTION_APPROVAL = False
    text = example_file.read_text()
    for environment in (STAGING, PRODUCTION):
        services.apply_presets(presets_file=parse_presets(text, registry=get_registry()), environment=environment)
    example = json.loads(text)
    example["chains"]["chat"]["presets"]["normal"]["chain"][1]["timeout_ms"] = 25000
    changed = parse_presets(json.dumps(example), registry=get_registry(), path="presets.json")
    services.sync_presets(presets_file=changed)
    revision = PresetsRevision.current(STAGING)
    assert revision is not None and revision.sha256 == changed.sha256
    revision.applied_at = timezone.now() - 2 * HOUR  # it has served staging two hours
    revision.save()
    return changed.chains["chat"].presets["normal"].steps


def health(environment: str, *, at: datetime, served: int, errors: int) -> None:
    ProviderHealthMinute.objects.create(
        chain=Chain.objects.get(name="chat", environment=environment),
        provider="vendor_a",
        model="large",
        minute=at.replace(second=0, microsecond=0),
        served=served,
        server_error=errors,
    )


def drill_passed(steps: list[dict[str, Any]], *, environment: str = STAGING) -> Drill:
    now = timezone.now()
    return Drill.objects.create(
        chain=Chain.objects.get(name="chat", environment=environment),
        hop=1,
        fault="server_error",
        share_bp=1000,
        starts_at=now - 30 * timedelta(minutes=1),
        ends_at=now - 15 * timedelta(minutes=1),
        reason="staging drill",
        created_by="alice",
        created_at=now - HOUR,
        state=DrillState.ENDED,
        verdict=Verdict.PASSED,
        steps=steps,
    )


def healthy() -> None:
    """Staging served well before the revision and as well since."""
    health(STAGING, at=timezone.now() - 3 * HOUR, served=990, errors=10)
    health(STAGING, at=timezone.now() - 10 * timedelta(minutes=1), served=995, errors=5)


def refusal(**kwargs: Any) -> str:
    with pytest.raises(Conflict) as refused:
        promotions.promote(to=PRODUCTION, actor="alice", reason="CHG-1", **kwargs)
    return refused.value.message


def production_chat() -> Selection:
    return services.revert_expired_and_read(chain="chat", environment=PRODUCTION)


def test_refused_until_it_has_served_long_enough(revision: list[dict[str, Any]]) -> None:
    healthy()
    drill_passed(revision)
    stored = PresetsRevision.current(STAGING)
    assert stored is not None
    stored.applied_at = timezone.now() - timedelta(minutes=20)
    stored.save()
    message = refusal()
    assert "has served it for 20 min of the 1 h required (PROMOTION_MIN_SERVED_MINUTES)" in message
    assert production_chat().version == 1 and not Promotion.objects.exists()


def test_refused_without_usage_reports_or_with_worse_health(revision: list[dict[str, Any]]) -> None:
    drill_passed(revision)
    assert "no usage reports from staging since it got the revision" in refusal()
    health(STAGING, at=timezone.now() - 3 * HOUR, served=990, errors=10)
    health(STAGING, at=timezone.now() - 10 * timedelta(minutes=1), served=700, errors=300)
    message = refusal()
    assert "staging's health is worse since the revision: 30.0 % errors of 1000 attempts, against 1.0 %" in message
    assert production_chat().version == 1


def test_refused_without_a_passed_drill_of_the_changed_default(revision: list[dict[str, Any]]) -> None:
    healthy()
    assert "no passed failover drill in staging of the changed default chat/normal" in refusal()
    drill_passed([dict(step) for step in revision[:1]])  # a drill of other steps: not this definition
    assert "no passed failover drill" in refusal()
    drill_passed(revision, environment=PRODUCTION)  # production's drill is not staging's evidence
    assert "no passed failover drill" in refusal()


def test_accepted_when_the_evidence_holds_and_recorded_on_both_sides(revision: list[dict[str, Any]]) -> None:
    healthy()
    drill = drill_passed(revision)
    promotion = promotions.promote(to=PRODUCTION, actor="alice", reason="CHG-1")
    assert (promotion.state, promotion.source, promotion.target) == ("promoted", STAGING, PRODUCTION)
    live = production_chat()
    assert (live.version, live.steps) == (2, revision)
    assert (live.updated_by, live.action) == ("alice", "sync")
    assert live.reason.startswith(f"promoted from staging by alice (promotion {promotion.pk}): CHG-1")
    evidence = promotion.evidence
    assert evidence["holds"] and evidence["drills"]["passed"][0]["drill"] == drill.pk
    assert evidence["served"]["seconds"] >= 2 * 3600 and evidence["health"]["after"]["attempts"] == 1000
    assert PresetsRevision.current(PRODUCTION).sha256 == promotion.revision.sha256  # type: ignore[union-attr]
    assert [p.pk for p in promotions.promotions_of(STAGING)] == [promotion.pk]
    assert [p.pk for p in promotions.promotions_of(PRODUCTION)] == [promotion.pk]
    # Staging is untouched, and promoting again has nothing to promote.
    assert services.revert_expired_and_read(chain="chat", environment=STAGING).version == 2
    with pytest.raises(Conflict, match="production already serves the presets file presets.json"):
        promotions.promote(to=PRODUCTION, actor="alice", reason="again")


def test_with_approval_required_a_second_person_approves(revision: list[dict[str, Any]], settings: Any) -> None:
    settings.PROMOTION_APPROVAL = True
    healthy()
    drill_passed(revision)
    promotion = promotions.promote(to=PRODUCTION, actor="alice", reason="CHG-2")
    assert promotion.state == "pending" and production_chat().version == 1
    with pytest.raises(Forbidden, match="alice asked for promotion .*: a second person approves it"):
        promotions.approve(promotion=promotion.pk, actor="alice")
    approved = promotions.approve(promotion=promotion.pk, actor="bob")
    assert (approved.state, approved.approved_by) == ("promoted", "bob")
    assert production_chat().version == 2
    assert "approved by bob" in production_chat().reason


def test_the_first_environment_is_reached_by_a_sync_not_a_promotion(revision: list[dict[str, Any]]) -> None:
    with pytest.raises(Exception, match="staging is the first environment: a presets file reaches it by a sync"):
        promotions.promote(to=STAGING, actor="alice", reason="x")


def test_the_api_promotes_with_a_write_token_of_the_target_only(revision: list[dict[str, Any]]) -> None:
    healthy()
    drill_passed(revision)
    staging_writer = make_token("staging-ci", environment=STAGING, purpose="write")
    production_writer = make_token("production-ci", environment=PRODUCTION, purpose="write")
    path = "/api/v1/environments/production/promotions"
    refused = Client(headers=auth(staging_writer)).post(path, {"reason": "CI"}, content_type="application/json")
    assert refused.status_code == 403 and "not production" in refused.json()["error"]["message"]
    before = Client(headers=auth(production_writer)).get(path).json()
    assert before["evidence"]["holds"] and before["promotions"] == []
    made = Client(headers=auth(production_writer)).post(path, {"reason": "CI"}, content_type="application/json")
    assert made.status_code == 201, made.content
    assert made.json()["state"] == "promoted" and made.json()["requested_by"] == "token:production-ci"
    after = Client(headers=auth(production_writer)).get(path).json()
    assert [p["id"] for p in after["promotions"]] == [made.json()["id"]]
    assert "already serves" in after["nothing_to_promote"]


def test_the_api_refusal_carries_the_evidence(revision: list[dict[str, Any]]) -> None:
    writer = make_token("production-ci", environment=PRODUCTION, purpose="write")
    refused = Client(headers=auth(writer)).post(
        "/api/v1/environments/production/promotions", {"reason": "CI"}, content_type="application/json"
    )
    assert refused.status_code == 409
    evidence = refused.json()["error"]["details"]["evidence"]
    assert not evidence["holds"] and len(evidence["refusals"]) == 2  # no usage reports, no drill


def test_the_command_checks_for_ci_and_promotes(revision: list[dict[str, Any]], capsys: Any) -> None:
    with pytest.raises(SystemExit) as checked:
        call_command("promote", "--to", "production", "--check")
    assert checked.value.code == 1
    assert "is refused: no usage reports from staging" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no passed failover drill"):
        call_command("promote", "--to", "production", "--reason", "CHG-3")
    healthy()
    drill_passed(revision)
    call_command("promote", "--to", "production", "--check")
    call_command("promote", "--to", "production", "--reason", "CHG-3", "--actor", "ci")
    out = capsys.readouterr().out
    assert "promoted presets.json sha256" in out and "from staging to production" in out
    assert production_chat().updated_by == "ci"


def test_both_environments_history_pages_list_the_promotion_with_its_evidence(
    revision: list[dict[str, Any]], oncall: Client
) -> None:
    healthy()
    drill_passed(revision)
    promotion = promotions.promote(to=PRODUCTION, actor="alice", reason="CHG-9")
    for path in ("/history/", "/env/staging/history/"):
        page = oncall.get(path)
        assert page.status_code == 200
        text = page.content.decode()
        assert f"#{promotion.pk} staging &rarr; production</strong> promoted" in text
        assert "CHG-9" in text and "chat/normal passed drill" in text
