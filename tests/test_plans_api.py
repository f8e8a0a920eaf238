"""The API of planned pins (http_api/plans.py) on a controlled clock: plan, list, read, change,
cancel and start anyway, with alice's on-call session and a write token; who is refused; every
refusal a 400 naming its field, unknown chains and plans a 404, and nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from presets import plans, services
from presets.models import PlanEvent, PlannedPin, Selection

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 0, 0, tzinfo=UTC)
START = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
END = datetime(2026, 12, 10, 4, 0, tzinfo=UTC)
WINDOW = {"starts_at": "2026-12-10T02:00:00Z", "ends_at": "2026-12-10T04:00:00Z"}
PLAN = {"preset": "pin_secondary", **WINDOW, "reason": "vendor_a maintenance 02:00-04:00"}
CHAT_PLANS = "/api/v1/chains/chat/plans"


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    # Autouse, so it runs before the clients sign in: their sessions are of the travelled time.
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def post(client: Client, url: str, body: object) -> Any:
    return client.post(url, body, content_type="application/json")


def patch(client: Client, url: str, body: object) -> Any:
    return client.patch(url, body, content_type="application/json")


def planned(client: Client, **changes: Any) -> dict[str, Any]:
    response = post(client, CHAT_PLANS, {**PLAN, **changes})
    assert response.status_code == 201, response.content
    return response.json()


def error(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


def live() -> Selection:
    return Selection.objects.select_related("preset").get(chain__name="chat")


def written() -> tuple[int, int, int]:
    """What a refused request must leave as it was: plans, their events, the chain's versions."""
    return PlannedPin.objects.count(), PlanEvent.objects.count(), Selection.history.count()


# --- planning ---------------------------------------------------------------------------------


def test_an_oncall_engineer_plans_a_pin_and_gets_the_plan_with_its_history(oncall: Client) -> None:
    plan = planned(oncall)
    assert plan == {
        "id": plan["id"],
        "chain": "chat",
        "preset": "pin_secondary",
        "starts_at": "2026-12-10T02:00:00.000Z",
        "ends_at": "2026-12-10T04:00:00.000Z",
        "reason": "vendor_a maintenance 02:00-04:00",
        "planned_by": "alice",
        "planned_at": "2026-12-10T00:00:00.000Z",
        "state": "planned",
        "state_reason": "",
        "based_on_version": 1,
        "started_version": None,
        "summary": "at 02:00 UTC Thu 2026-12-10: pin_secondary until 04:00 UTC, planned by alice because "
        "vendor_a maintenance 02:00-04:00",
        "events": [
            {
                "kind": "planned",
                "actor": "alice",
                "reason": "vendor_a maintenance 02:00-04:00",
                "at": "2026-12-10T00:00:00.000Z",
                "details": {
                    "preset": "pin_secondary",
                    "starts_at": "2026-12-10T02:00:00Z",
                    "ends_at": "2026-12-10T04:00:00Z",
                },
            }
        ],
    }
    assert live().version == 1  # planning serves nothing


def test_a_write_token_plans_as_the_token_and_any_zone_is_read_as_its_instant(writer: Client) -> None:
    plan = planned(writer, starts_at="2026-12-09T21:00:00-05:00", ends_at="2026-12-10T04:00:00+01:00")
    assert plan["planned_by"] == "token:deployer"
    assert (plan["starts_at"], plan["ends_at"]) == ("2026-12-10T02:00:00.000Z", "2026-12-10T03:00:00.000Z")


# (id, body changes, field, words the message holds)
BAD_PLANS = [
    ("naive-start", {"starts_at": "2026-12-10T02:00:00"}, "starts_at", "needs a time zone"),
    ("naive-end", {"ends_at": "2026-12-10T04:00:00"}, "ends_at", "needs a time zone"),
    ("date-only", {"starts_at": "2026-12-10"}, "starts_at", "needs a time zone"),
    ("bad-format", {"starts_at": "tomorrow 2am"}, "starts_at", "wrong format"),
    ("start-a-number", {"starts_at": 1796868000}, "starts_at", "starts_at"),
    ("past-start", {"starts_at": "2026-12-09T23:59:00Z"}, "starts_at", "not in the future"),
    ("end-before-start", {"ends_at": "2026-12-10T01:00:00Z"}, "ends_at", "not after the start"),
    ("end-at-start", {"ends_at": "2026-12-10T02:00:00Z"}, "ends_at", "not after the start"),
    ("too-long", {"ends_at": "2026-12-11T02:01:00Z"}, "ends_at", "longer than the longest pin of 1440"),
    ("too-far-ahead", {"starts_at": "2027-03-11T00:00:00Z", "ends_at": "2027-03-11T01:00:00Z"}, "starts_at", "90"),
    ("default-preset", {"preset": "normal"}, "preset", "chat's default"),
    ("unknown-preset", {"preset": "nope"}, "preset", "does not exist on chat: use one of"),
    ("preset-a-list", {"preset": ["pin_secondary"]}, "preset", "preset"),
    ("missing-preset", {"preset": None}, "preset", "preset"),
    ("missing-reason", {"reason": None}, "reason", "reason"),
    ("blank-reason", {"reason": "   "}, "reason", "is required"),
    ("missing-end", {"ends_at": None}, "ends_at", "ends_at"),
]


@pytest.mark.parametrize(("changes", "field", "words"), [c[1:] for c in BAD_PLANS], ids=[c[0] for c in BAD_PLANS])
def test_a_bad_plan_is_a_400_naming_its_field_and_writes_nothing(
    oncall: Client, changes: dict[str, Any], field: str, words: str
) -> None:
    body = {key: value for key, value in {**PLAN, **changes}.items() if value is not None}
    before = written()
    refused = error(post(oncall, CHAT_PLANS, body))
    assert refused["code"] == "validation_error"
    assert refused["message"].startswith(f"{field}: ") and words in refused["message"], refused
    # The services name the field in details.field; the input's shape checks in details.fields.
    assert refused["details"].get("field") == field or field in refused["details"].get("fields", {}), refused
    assert written() == before


def test_an_overlapping_plan_is_refused_naming_the_other_one(oncall: Client, writer: Client) -> None:
    first = planned(oncall)
    before = written()
    refused = error(post(writer, CHAT_PLANS, {**PLAN, "starts_at": "2026-12-10T03:59:00Z", "ends_at": END.isoformat()}))
    assert refused["details"] == {"field": "starts_at", "plan": first["id"]}
    assert f"overlaps plan #{first['id']} (planned: pin_secondary from 2026-12-10T02:00:00Z" in refused["message"]
    assert "planned by alice" in refused["message"]
    assert written() == before
    # Back to back is no overlap, and another chain is its own.
    after = post(writer, CHAT_PLANS, {**PLAN, "starts_at": "2026-12-10T04:00:00Z", "ends_at": "2026-12-10T05:00:00Z"})
    assert after.status_code == 201
    assert post(writer, "/api/v1/chains/incident-summary/plans", {**PLAN, "preset": "local_only"}).status_code == 201


def test_a_field_the_api_does_not_know_is_ignored_as_on_every_endpoint(writer: Client) -> None:
    """As select, revert and extend do: a body's extra field is neither read nor refused."""
    plan = planned(writer, expected_version=1, note="ignored")
    assert "note" not in plan and plan["state"] == "planned"


# --- reading ----------------------------------------------------------------------------------


def test_the_list_holds_every_plan_still_holding_its_time_soonest_first(oncall: Client, reader: Client) -> None:
    later = planned(oncall, starts_at="2026-12-10T05:00:00Z", ends_at="2026-12-10T06:00:00Z", reason="later")
    sooner = planned(oncall, reason="sooner")
    other = post(oncall, "/api/v1/chains/incident-summary/plans", {**PLAN, "preset": "local_only", "reason": "other"})
    cancelled = planned(oncall, starts_at="2026-12-11T02:00:00Z", ends_at="2026-12-11T03:00:00Z", reason="gone")
    post(oncall, f"{CHAT_PLANS}/{cancelled['id']}/cancel", {"reason": "not needed"})

    response = reader.get("/api/v1/plans")
    assert response.status_code == 200
    listed = response.json()["plans"]
    assert [(p["id"], p["chain"]) for p in listed] == [
        (sooner["id"], "chat"),
        (other.json()["id"], "incident-summary"),
        (later["id"], "chat"),
    ]
    assert "events" not in listed[0]
    assert {key: value for key, value in sooner.items() if key != "events"} == listed[0]


def test_a_chains_plans_are_its_recent_ones_latest_first_with_their_events(oncall: Client, viewer: Client) -> None:
    first = planned(oncall)
    second = planned(oncall, starts_at="2026-12-10T05:00:00Z", ends_at="2026-12-10T06:00:00Z", reason="second")
    post(oncall, f"{CHAT_PLANS}/{second['id']}/cancel", {"reason": "not needed"})
    post(oncall, "/api/v1/chains/incident-summary/plans", {**PLAN, "preset": "local_only"})

    response = viewer.get(CHAT_PLANS)
    assert response.status_code == 200
    listed = response.json()["plans"]
    assert [(p["id"], p["state"]) for p in listed] == [(second["id"], "cancelled"), (first["id"], "planned")]
    assert [(e["kind"], e["actor"], e["reason"]) for e in listed[0]["events"]] == [
        ("planned", "alice", "second"),
        ("cancelled", "alice", "not needed"),
    ]
    assert viewer.get("/api/v1/chains/incident-summary/plans").json()["plans"][0]["chain"] == "incident-summary"


def test_one_plan_reads_as_it_was_answered(oncall: Client, reader: Client) -> None:
    plan = planned(oncall)
    response = reader.get(f"{CHAT_PLANS}/{plan['id']}")
    assert response.status_code == 200 and response.json() == plan


@pytest.mark.parametrize(
    ("method", "url", "words"),
    [
        ("get", "/api/v1/chains/nope/plans", "unknown chain 'nope'"),
        ("post", "/api/v1/chains/nope/plans", "unknown chain 'nope'"),
        ("get", "/api/v1/chains/chat/plans/{missing}", "chat has no plan #{missing}"),
        ("get", "/api/v1/chains/incident-summary/plans/{plan}", "incident-summary has no plan #{plan}"),
        ("get", "/api/v1/chains/nope/plans/{plan}", "nope has no plan #{plan}"),
        ("patch", "/api/v1/chains/chat/plans/{missing}", "chat has no plan #{missing}"),
        ("patch", "/api/v1/chains/nope/plans/{plan}", "unknown chain 'nope'"),
        ("post", "/api/v1/chains/chat/plans/{missing}/cancel", "chat has no plan #{missing}"),
        ("post", "/api/v1/chains/incident-summary/plans/{plan}/cancel", "incident-summary has no plan #{plan}"),
        ("post", "/api/v1/chains/chat/plans/{missing}/start", "chat has no plan #{missing}"),
        ("post", "/api/v1/chains/nope/plans/{plan}/start", "unknown chain 'nope'"),
    ],
)
def test_an_unknown_chain_or_plan_is_a_404(writer: Client, method: str, url: str, words: str) -> None:
    plan = planned(writer)
    ids = {"plan": plan["id"], "missing": plan["id"] + 1000}
    body = {**PLAN, "reason": "r"} if method != "get" else None
    before = written()
    response = getattr(writer, method)(url.format(**ids), body, content_type="application/json")
    refused = error(response, 404)
    assert refused["code"] == "not_found" and refused["message"] == words.format(**ids)
    assert written() == before


# --- changing ---------------------------------------------------------------------------------


def test_a_plan_is_changed_and_its_history_says_what_it_was(oncall: Client, writer: Client) -> None:
    plan = planned(oncall)
    response = patch(
        writer,
        f"{CHAT_PLANS}/{plan['id']}",
        {"preset": "drop_vendor_b", "starts_at": "2026-12-10T02:30:00Z", "reason": "window moved"},
    )
    assert response.status_code == 200, response.content
    changed = response.json()
    assert (changed["preset"], changed["starts_at"], changed["ends_at"]) == (
        "drop_vendor_b",
        "2026-12-10T02:30:00.000Z",
        "2026-12-10T04:00:00.000Z",
    )
    assert changed["planned_by"] == "alice"  # who planned it; who changed it is in its history
    assert changed["events"][-1] == {
        "kind": "changed",
        "actor": "token:deployer",
        "reason": "window moved",
        "at": "2026-12-10T00:00:00.000Z",
        "details": {
            "before": {
                "preset": "pin_secondary",
                "starts_at": "2026-12-10T02:00:00Z",
                "ends_at": "2026-12-10T04:00:00Z",
            },
            "preset": "drop_vendor_b",
            "starts_at": "2026-12-10T02:30:00Z",
            "ends_at": "2026-12-10T04:00:00Z",
        },
    }
    assert oncall.get(f"{CHAT_PLANS}/{plan['id']}").json() == changed


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"reason": "r"}, "send what to change: preset, starts_at or ends_at"),
        ({"reason": "r", "start_at": "2026-12-10T02:30:00Z"}, "send what to change"),  # misspelt: nothing to change
        ({"preset": "drop_vendor_b"}, "reason: This field is required"),
        ({"preset": "drop_vendor_b", "reason": ""}, "reason: is required"),
        ({"ends_at": "2026-12-10T05:00:00", "reason": "r"}, "ends_at: needs a time zone"),
        ({"ends_at": "2026-12-10T01:00:00Z", "reason": "r"}, "ends_at: 2026-12-10T01:00:00Z is not after the start"),
        ({"ends_at": "2026-12-11T03:00:00Z", "reason": "r"}, "longer than the longest pin of 1440"),
        ({"preset": "normal", "reason": "r"}, "preset: 'normal' is chat's default"),
        ({"preset": "nope", "reason": "r"}, "preset: 'nope' does not exist on chat"),
    ],
    ids=[
        "nothing",
        "misspelt",
        "no-reason",
        "blank-reason",
        "naive",
        "end-before-start",
        "too-long",
        "default",
        "unknown-preset",
    ],
)
def test_a_bad_change_is_a_400_and_leaves_the_plan_as_it_was(oncall: Client, body: dict[str, Any], words: str) -> None:
    plan = planned(oncall)
    before = written()
    assert words in error(patch(oncall, f"{CHAT_PLANS}/{plan['id']}", body))["message"]
    assert written() == before
    assert oncall.get(f"{CHAT_PLANS}/{plan['id']}").json() == plan


def test_a_change_overlapping_another_plan_names_it(oncall: Client) -> None:
    plan = planned(oncall)
    other = planned(oncall, starts_at="2026-12-10T05:00:00Z", ends_at="2026-12-10T06:00:00Z")
    refused = error(patch(oncall, f"{CHAT_PLANS}/{plan['id']}", {"ends_at": "2026-12-10T05:30:00Z", "reason": "r"}))
    assert refused["details"] == {"field": "starts_at", "plan": other["id"]}
    assert f"overlaps plan #{other['id']}" in refused["message"]


# --- cancelling, starting anyway --------------------------------------------------------------


def test_a_cancelled_plan_frees_its_time_and_cannot_be_cancelled_or_changed_again(oncall: Client) -> None:
    plan = planned(oncall)
    response = post(oncall, f"{CHAT_PLANS}/{plan['id']}/cancel", {"reason": "vendor moved the window"})
    assert response.status_code == 200
    cancelled = response.json()
    assert (cancelled["state"], cancelled["state_reason"]) == (
        "cancelled",
        "cancelled by alice: vendor moved the window",
    )
    assert cancelled["events"][-1]["kind"] == "cancelled"
    assert (
        "nothing to cancel" in error(post(oncall, f"{CHAT_PLANS}/{plan['id']}/cancel", {"reason": "again"}))["message"]
    )
    changed = patch(oncall, f"{CHAT_PLANS}/{plan['id']}", {"preset": "drop_vendor_b", "reason": "r"})
    assert "only a plan not started yet can be changed" in error(changed)["message"]
    assert "reason" in error(post(oncall, f"{CHAT_PLANS}/{plan['id']}/cancel", {}))["message"]
    planned(oncall)  # its time is free


def test_a_suspended_plan_is_started_anyway_and_serves_until_its_end(
    oncall: Client, writer: Client, clock: Any
) -> None:
    plan = planned(oncall)
    url = f"{CHAT_PLANS}/{plan['id']}"
    refused = error(post(writer, f"{url}/start", {"reason": "now"}))
    assert refused["message"] == f"plan: plan #{plan['id']} is planned: only a suspended plan is started by hand"
    # bob pins by hand after the plan was made: at its start, the plan does not start by itself.
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-9", expires_at=timedelta(hours=5)
    )
    clock.move_to(START + timedelta(seconds=2))
    assert plans.run_plans().suspended == [plan["id"]]
    suspended = writer.get(url).json()
    assert suspended["state"] == "suspended"
    assert "chat was changed by bob" in suspended["state_reason"] and "INC-9" in suspended["state_reason"]

    stale = error(post(writer, f"{url}/start", {"reason": "seen an hour ago", "expected_version": 1}), 409)
    assert stale["code"] == "conflict" and stale["message"].startswith("chat changed since v1: it is now v2")
    response = post(writer, f"{url}/start", {"reason": "checked with bob", "expected_version": 2})
    assert response.status_code == 200, response.content
    started = response.json()
    assert (started["state"], started["started_version"]) == ("started", 3)
    assert [(e["kind"], e["actor"]) for e in started["events"]] == [
        ("planned", "alice"),
        ("suspended", "system:schedule"),
        ("started", "token:deployer"),
    ]
    document = writer.get("/api/v1/chains/chat").json()
    assert (document["version"], document["preset"], document["updated_by"]) == (3, "pin_secondary", "token:deployer")
    assert document["expires_at"] == "2026-12-10T04:00:00.000Z"
    assert "revert the chain to end it" in error(post(writer, f"{url}/cancel", {"reason": "no"}))["message"]
    assert "only a suspended plan" in error(post(writer, f"{url}/start", {"reason": "again"}))["message"]
    assert "reason" in error(post(writer, f"{url}/start", {"reason": 7}))["message"]


def test_a_plan_started_on_time_by_the_sweep_reads_as_started(oncall: Client, clock: Any) -> None:
    plan = planned(oncall)
    clock.move_to(START)
    assert plans.run_plans().started == [plan["id"]]
    started = oncall.get(f"{CHAT_PLANS}/{plan['id']}").json()
    assert (started["state"], started["started_version"], started["state_reason"]) == (
        "started",
        2,
        "started as v2 by system:schedule",
    )
    assert [p["state"] for p in oncall.get("/api/v1/plans").json()["plans"]] == ["started"]


# --- who may ----------------------------------------------------------------------------------


def test_a_viewer_and_a_read_token_read_plans_but_change_none(oncall: Client, viewer: Client, reader: Client) -> None:
    plan = planned(oncall)
    url = f"{CHAT_PLANS}/{plan['id']}"
    before = written()
    for client in (viewer, reader):
        assert client.get("/api/v1/plans").status_code == 200
        assert client.get(CHAT_PLANS).status_code == 200
        assert client.get(url).status_code == 200
        for response in (
            post(client, CHAT_PLANS, {**PLAN, "starts_at": "2026-12-10T05:00:00Z", "ends_at": "2026-12-10T06:00:00Z"}),
            patch(client, url, {"preset": "drop_vendor_b", "reason": "r"}),
            post(client, f"{url}/cancel", {"reason": "r"}),
            post(client, f"{url}/start", {"reason": "r"}),
        ):
            refused = error(response, 403)
            assert refused["code"] == "forbidden"
            assert "needs a write-scope token or the on-call role" in refused["message"]
    assert written() == before


def test_without_credentials_every_plan_endpoint_answers_401(oncall: Client, client: Client) -> None:
    plan = planned(oncall)
    client.logout()
    url = f"{CHAT_PLANS}/{plan['id']}"
    for method, path in [
        ("get", "/api/v1/plans"),
        ("get", CHAT_PLANS),
        ("post", CHAT_PLANS),
        ("get", url),
        ("patch", url),
        ("post", f"{url}/cancel"),
        ("post", f"{url}/start"),
    ]:
        assert error(getattr(client, method)(path), 401)["code"] == "unauthorized", (method, path)
