"""The API of failover drills (http_api/drills.py) on a controlled clock: start, plan, list, read
and abort, with alice's on-call session and a write token; who is refused; every refusal of a
field a 400 naming it, unknown chains and drills a 404, a pinned chain or another drill a 409,
and nothing written; the fleet's reports reaching a drill's report; each preset's last drill in
the chain's presets; the OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.test import Client

from audit import drills as fleet_drills
from audit.models import Alert, AlertKind
from presets import drills, services
from presets.models import Chain, Drill, Selection
from presets.wire import DRILL_FAULTS

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 1, 0, tzinfo=UTC)
CHAT_DRILLS = "/api/v1/chains/chat/drills"
DRILL = {
    "hop": 1,
    "fault": "server_error",
    "share": 10,
    "services": [],
    "start": None,
    "minutes": 15,
    "reason": "quarterly drill",
    "repeat_days": None,
    "max_failed": 0,
    "max_fallback_error_pct": 10,
}
DESCRIPTION = "hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests of every service"
SUMMARY_FIELDS = {
    "id",
    "chain",
    "hop",
    "fault",
    "share",
    "services",
    "starts_at",
    "ends_at",
    "minutes",
    "reason",
    "created_by",
    "preset",
    "version",
    "ended_version",
    "ended_at",
    "ended_by",
    "state",
    "verdict",
    "reasons",
    "repeat_days",
    "description",
    "url",
}


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    # Autouse, so it runs before the clients sign in: their sessions are of the travelled time.
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def post(client: Client, url: str, body: object) -> Any:
    return client.post(url, body, content_type="application/json")


def started(client: Client, chain: str = "chat", **changes: Any) -> dict[str, Any]:
    response = post(client, f"/api/v1/chains/{chain}/drills", {**DRILL, **changes})
    assert response.status_code == 201, response.content
    return response.json()


def error(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset", "drill").get(chain__name=chain)


def written() -> tuple[list[Any], int]:
    """What a refused request must leave as it was: the drills, the chains' versions."""
    return list(Drill.objects.order_by("pk").values()), Selection.history.count()


# --- starting ----------------------------------------------------------------------------------


def test_an_oncall_engineer_starts_a_drill_and_gets_its_report(oncall: Client) -> None:
    response = post(oncall, CHAT_DRILLS, DRILL)
    assert response.status_code == 201, response.content
    report = response.json()
    assert response["Location"] == f"/api/v1/drills/{report['id']}"
    assert set(report) == set(fleet_drills.DrillReport.__annotations__)
    assert {key: report[key] for key in SUMMARY_FIELDS | {"step", "stop"}} == {
        "id": report["id"],
        "chain": "chat",
        "hop": 1,
        "step": "vendor_a/large",
        "fault": "server_error",
        "share": 10.0,
        "services": [],
        "starts_at": "2026-12-10T01:00:00Z",
        "ends_at": "2026-12-10T01:15:00Z",
        "minutes": 15,
        "reason": "quarterly drill",
        "created_by": "alice",
        "preset": "normal",
        "version": 2,
        "ended_version": None,
        "ended_at": None,
        "ended_by": "",
        "state": "running",
        "verdict": "running",
        "reasons": [],
        "repeat_days": None,
        "stop": {"max_failed": 0, "max_fallback_error_pct": 10.0},
        "description": DESCRIPTION,
        "url": f"http://localhost:8000/drills/{report['id']}/",
    }
    assert report["totals"]["drilled"] == 0 and report["instances"] == [] and report["timeline"] == []
    selection = live()
    assert selection.version == 2 and selection.action == "drill" and selection.updated_by == "alice"
    assert selection.to_document()["drill"]["id"] == report["id"]


def test_a_write_token_starts_a_drill_as_the_token_with_the_defaults_left_out(writer: Client) -> None:
    body = {"hop": 1, "fault": "rate_limited", "share": 0.5, "reason": "drill from CI"}
    response = post(writer, CHAT_DRILLS, body)
    assert response.status_code == 201, response.content
    report = response.json()
    assert (report["created_by"], report["fault"], report["share"], report["minutes"]) == (
        "token:deployer",
        "rate_limited",
        0.5,
        15,
    )
    assert report["stop"] == {"max_failed": 0, "max_fallback_error_pct": 10.0}


def test_services_are_named_by_their_tokens_and_a_recurring_drill_says_so(oncall: Client, read_token: str) -> None:
    report = started(oncall, services=["reader"], repeat_days=7, max_failed=2, max_fallback_error_pct=5.5)
    assert report["services"] == ["reader"] and report["repeat_days"] == 7
    assert report["stop"] == {"max_failed": 2, "max_fallback_error_pct": 5.5}
    assert report["description"].endswith("of requests of reader")
    assert len(live().to_document()["drill"]["services"]) == 1  # a digest, never the name


def test_a_drill_with_a_start_ahead_is_planned_and_not_in_the_document(oncall: Client) -> None:
    report = started(oncall, start="2026-12-10T03:00:00+01:00", minutes=30)
    assert (report["state"], report["verdict"], report["version"]) == ("planned", "planned", None)
    assert (report["starts_at"], report["ends_at"]) == ("2026-12-10T02:00:00Z", "2026-12-10T02:30:00Z")
    assert live().version == 1 and "drill" not in live().to_document()


# (id, body changes, field, words the message holds)
BAD_DRILLS = [
    ("hop-missing", {"hop": None}, "hop", "This field may not be null"),
    ("hop-a-string", {"hop": "1"}, "hop", "A valid integer is required"),
    ("hop-the-last", {"hop": 3}, "hop", "nothing to fall back to"),
    ("hop-zero", {"hop": 0}, "hop", "from 1 to 8"),
    ("hop-huge", {"hop": 10**30}, "hop", "out of range"),
    ("fault-unknown", {"fault": "meteor"}, "fault", '"meteor" is not a fault a drill knows: use one of server_error'),
    ("fault-a-number", {"fault": 5}, "fault", "is not a fault a drill knows"),
    ("share-a-string", {"share": "10"}, "share", "A valid number is required"),
    ("share-a-boolean", {"share": True}, "share", "A valid number is required"),
    ("share-too-large", {"share": 30}, "share", "0.1 % to 25 %"),
    ("share-too-small", {"share": 0.05}, "share", "0.1 % to 25 %"),
    ("share-huge", {"share": 10**400}, "share", "share"),
    ("services-a-string", {"services": "reader"}, "services", "Expected a list"),
    ("services-unknown", {"services": ["nobody"]}, "services", "no live token named nobody"),
    ("services-a-number", {"services": [5]}, "services", "Not a valid string"),
    ("start-naive", {"start": "2026-12-10T02:00:00"}, "start", "needs a time zone"),
    ("start-passed", {"start": "2026-12-10T00:00:00Z"}, "start", "has passed"),
    ("start-too-far", {"start": "2027-06-01T00:00:00Z"}, "start", "more than 90 days ahead"),
    ("start-year-9999-west", {"start": "9999-12-31T23:59:59-05:00"}, "start", "out of range"),
    ("start-year-1-east", {"start": "0001-01-01T00:00:00+05:00"}, "start", "out of range"),
    ("minutes-too-long", {"minutes": 61}, "minutes", "from 1 to 60"),
    ("minutes-a-string", {"minutes": "15"}, "minutes", "A valid integer is required"),
    ("reason-blank", {"reason": "  "}, "reason", "required"),
    ("reason-a-number", {"reason": 5}, "reason", "Not a valid string"),
    ("repeat-too-rare", {"repeat_days": 91}, "repeat_days", "from 1 to 90"),
    ("max-failed-negative", {"max_failed": -1}, "max_failed", "from 0 to"),
    ("fallback-pct-above-100", {"max_fallback_error_pct": 101}, "max_fallback_error_pct", "percentage from 0 to 100"),
]


@pytest.mark.parametrize("who", ["oncall", "writer"])
@pytest.mark.parametrize(
    ("changes", "field", "words"), [case[1:] for case in BAD_DRILLS], ids=[case[0] for case in BAD_DRILLS]
)
def test_bad_input_is_a_400_naming_its_field_and_nothing_is_written(
    request: pytest.FixtureRequest, read_token: str, who: str, changes: dict[str, Any], field: str, words: str
) -> None:
    client = request.getfixturevalue(who)
    before = written()
    body = {**DRILL, **changes}
    if body.get("hop") is None:
        body.pop("hop")
        words = "This field is required"
    response = post(client, CHAT_DRILLS, body)
    refusal = error(response)
    assert refusal["code"] == "validation_error"
    named = refusal["message"].split(":")[0].split(".")[0]  # "services.0: ..." names an item of services
    assert named == field and words in refusal["message"], refusal
    assert written() == before


def test_a_body_that_is_no_object_is_a_400(oncall: Client) -> None:
    assert error(post(oncall, CHAT_DRILLS, ["hop", 1]))["code"] == "validation_error"
    assert not Drill.objects.exists()


def test_a_drill_is_refused_with_a_409_while_the_chain_is_pinned(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="bob", reason="INC-1 vendor_a")
    before = written()
    refusal = error(post(oncall, CHAT_DRILLS, DRILL), 409)
    assert refusal["code"] == "conflict"
    assert "never runs while the chain is pinned: revert the pin first" in refusal["message"]
    assert written() == before


def test_a_drill_is_refused_with_a_409_while_a_provider_alert_is_open(oncall: Client) -> None:
    Alert.objects.create(
        kind=AlertKind.PROVIDER_FAILING,
        chain=Chain.objects.get(name="chat"),
        version=1,
        subject="vendor_a/large",
        message="failing",
        details={},
    )
    before = written()
    refusal = error(post(oncall, CHAT_DRILLS, DRILL), 409)
    assert "the provider alert on vendor_a/large" in refusal["message"]
    assert written() == before


def test_one_drill_at_a_time_the_other_named_in_the_409(oncall: Client) -> None:
    first = started(oncall)
    before = written()
    refusal = error(post(oncall, CHAT_DRILLS, {**DRILL, "start": "2026-12-10T01:10:00Z"}), 409)
    assert f"drill {first['id']} is running" in refusal["message"]
    assert refusal["details"] == {"drill": first["id"]}
    assert written() == before


def test_an_unknown_chain_is_a_404(oncall: Client) -> None:
    refusal = error(post(oncall, "/api/v1/chains/nope/drills", DRILL), 404)
    assert refusal["code"] == "not_found" and "nope" in refusal["message"]
    assert error(oncall.get("/api/v1/chains/nope/drills"), 404)["code"] == "not_found"
    assert not Drill.objects.exists()


# --- who may ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "status", "words"),
    [
        ("reader", 403, "write-scope token or the on-call role"),
        ("viewer", 403, "write-scope token or the on-call role"),
        ("client", 401, "no credentials"),
    ],
    ids=["read-token", "viewer", "signed-out"],
)
def test_only_write_tokens_and_on_call_start_or_abort(
    request: pytest.FixtureRequest, who: str, status: int, words: str
) -> None:
    client = request.getfixturevalue(who)
    drill = fleet_drills.start_drill(
        chain="incident-summary", hop=1, fault="timeout", share=5, reason="drill", actor="alice"
    )
    before = written()
    assert words in error(post(client, CHAT_DRILLS, DRILL), status)["message"]
    assert words in error(post(client, f"/api/v1/drills/{drill.pk}/abort", {"reason": "stop"}), status)["message"]
    assert written() == before


@pytest.mark.parametrize("who", ["reader", "viewer", "oncall", "writer"])
def test_readers_list_and_read_drills(request: pytest.FixtureRequest, who: str) -> None:
    drill = fleet_drills.start_drill(chain="chat", hop=2, fault="timeout", share=5, reason="hop 2", actor="alice")
    client = request.getfixturevalue(who)
    listed = client.get(CHAT_DRILLS)
    assert listed.status_code == 200 and [d["id"] for d in listed.json()["drills"]] == [drill.pk]
    read = client.get(f"/api/v1/drills/{drill.pk}")
    assert read.status_code == 200 and read.json()["step"] == "vendor_b/large"


# --- listing and reading ------------------------------------------------------------------------


def test_the_list_gives_the_chains_drills_latest_start_first_without_the_fleets_figures(
    oncall: Client, clock: Any
) -> None:
    first = started(oncall, minutes=5)
    drills.abort_drill(drill=first["id"], actor="alice", reason="done early")
    later = started(oncall, start="2026-12-11T01:00:00Z")
    started(oncall, "incident-summary")
    listed = oncall.get(CHAT_DRILLS)
    assert listed.status_code == 200 and listed["Cache-Control"] == "no-cache"
    entries = listed.json()["drills"]
    assert [entry["id"] for entry in entries] == [later["id"], first["id"]]
    assert set(entries[0]) == SUMMARY_FIELDS
    assert (entries[1]["verdict"], entries[1]["reasons"], entries[1]["ended_by"]) == (
        "aborted",
        ["aborted by alice: done early"],
        "alice",
    )
    assert entries[1]["description"] == DESCRIPTION
    assert [d["id"] for d in oncall.get(f"{CHAT_DRILLS}?limit=1").json()["drills"]] == [later["id"]]
    assert error(oncall.get(f"{CHAT_DRILLS}?limit=0"))["details"] == {"field": "limit"}
    assert oncall.get("/api/v1/chains/incident-summary/drills").json()["drills"][0]["chain"] == "incident-summary"


def test_a_drill_is_read_by_its_id_and_an_unknown_one_is_a_404(oncall: Client) -> None:
    report = started(oncall)
    read = oncall.get(f"/api/v1/drills/{report['id']}")
    assert read.status_code == 200 and read.json() == report
    for missing in (report["id"] + 1, 2**31, 10**30):
        refusal = error(oncall.get(f"/api/v1/drills/{missing}"), 404)
        assert refusal["message"] == f"unknown drill {missing}"


# --- aborting -----------------------------------------------------------------------------------


def test_abort_takes_a_running_drill_out_of_the_document_at_once(oncall: Client) -> None:
    report = started(oncall)
    response = post(oncall, f"/api/v1/drills/{report['id']}/abort", {"reason": "customer demo now"})
    assert response.status_code == 200, response.content
    aborted = response.json()
    assert (aborted["state"], aborted["verdict"], aborted["ended_version"]) == ("ended", "aborted", 3)
    assert aborted["reasons"] == ["aborted by alice: customer demo now"]
    selection = live()
    assert selection.version == 3 and "drill" not in selection.to_document()
    assert "customer demo now" in selection.reason and selection.updated_by == "alice"


def test_abort_cancels_a_planned_drill_with_a_write_token(writer: Client) -> None:
    report = started(writer, start="2026-12-10T05:00:00Z")
    aborted = post(writer, f"/api/v1/drills/{report['id']}/abort", {"reason": "not this week"}).json()
    assert aborted["verdict"] == "aborted"
    assert aborted["reasons"] == ["cancelled before its start by token:deployer: not this week"]
    assert live().version == 1


def test_abort_refusals_name_what_is_wrong_and_write_nothing(oncall: Client) -> None:
    report = started(oncall)
    url = f"/api/v1/drills/{report['id']}/abort"
    before = written()
    assert error(post(oncall, url, {"reason": " "}))["message"].startswith("reason: ")
    assert error(post(oncall, url, {}))["message"] == "reason: This field is required."
    assert error(post(oncall, "/api/v1/drills/999999/abort", {"reason": "x"}), 404)["message"] == (
        "unknown drill 999999"
    )
    assert written() == before
    post(oncall, url, {"reason": "stop"})
    again = error(post(oncall, url, {"reason": "stop again"}))
    assert again["details"] == {"field": "drill"} and "has already ended (aborted)" in again["message"]


# --- the fleet's reports ------------------------------------------------------------------------


def read_as(client: Client, instance: str, version: int, chain: str = "chat") -> None:
    """An SDK instance's read: fleet status knows it from then on."""
    response = client.get(
        f"/api/v1/chains/{chain}",
        headers={"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": str(version)},
    )
    assert response.status_code == 200


def usage(client: Client, body: dict[str, Any], chain: str = "chat") -> dict[str, Any]:
    response = post(client, f"/api/v1/chains/{chain}/usage", body)
    assert response.status_code == 202, response.content
    return response.json()


def test_a_usage_reports_drill_section_reaches_the_drills_report(oncall: Client, reader: Client) -> None:
    report = started(oncall)
    other = started(oncall, "incident-summary")
    read_as(reader, "i1", report["version"])
    section = {"id": report["id"], "requests": 100, "drilled": 10, "failed": 0, "ended_on": {"2": 10}}
    answer = usage(reader, {"client": "checkout/i1", "drill": section})
    assert answer["dropped"]["drill"] == 0
    # Another chain's drill, sent to chat's reports: dropped, counted, and in neither report.
    answer = usage(reader, {"client": "checkout/i1", "drill": {**section, "id": other["id"]}})
    assert answer["dropped"]["drill"] == 1
    # An instance fleet status has not seen read chat: its section is dropped too.
    answer = usage(reader, {"client": "checkout/unseen", "drill": section})
    assert answer["dropped"]["drill"] == 1

    read = oncall.get(f"/api/v1/drills/{report['id']}").json()
    assert (read["totals"]["requests"], read["totals"]["drilled"], read["totals"]["ended_on"]) == (100, 10, {"2": 10})
    assert [(row["service"], row["client"], row["drilled"]) for row in read["instances"]] == [
        ("reader", "checkout/i1", 10)
    ]
    assert read["timeline"][0]["drilled"] == 10 and read["verdict"] == "running"
    assert oncall.get(f"/api/v1/drills/{other['id']}").json()["totals"]["requests"] == 0


def test_a_drilled_request_failing_for_the_caller_aborts_the_drill(oncall: Client, reader: Client) -> None:
    report = started(oncall)
    read_as(reader, "i1", report["version"])
    usage(reader, {"client": "checkout/i1", "drill": {"id": report["id"], "requests": 10, "drilled": 2, "failed": 1}})
    read = oncall.get(f"/api/v1/drills/{report['id']}").json()
    assert read["verdict"] == "aborted" and "1 drilled request(s) failed for the caller" in read["reasons"][0]
    assert "drill" not in live().to_document()


# --- each preset's last drill ---------------------------------------------------------------------


def test_the_chains_presets_carry_each_ones_last_drill_and_the_document_does_not(
    oncall: Client, viewer: Client, reader: Client
) -> None:
    listed = viewer.get("/api/v1/chains/chat/presets")
    assert listed.status_code == 200
    body = listed.json()
    assert (body["chain"], body["version"]) == ("chat", 1)
    assert [p["name"] for p in body["presets"]] == ["normal", "drop_vendor_b", "local_only", "pin_secondary"]
    normal = body["presets"][0]
    assert normal["is_default"] and normal["is_live"] and normal["last_drill"] is None
    assert normal["chain"][0] == {"provider": "vendor_a", "model": "large", "timeout_ms": 20000}
    assert body["presets"][2]["marking"]["degraded"] is True
    assert all(p["failure_policy"] is None for p in body["presets"])  # the example file sets none

    report = started(oncall)
    assert viewer.get("/api/v1/chains/chat/presets").json()["presets"][0]["last_drill"] is None  # not judged yet
    post(oncall, f"/api/v1/drills/{report['id']}/abort", {"reason": "stop"})
    presets = reader.get("/api/v1/chains/chat/presets").json()["presets"]
    assert presets[0]["last_drill"] == {
        "id": report["id"],
        "at": "2026-12-10T01:00:00Z",
        "version": 2,
        "verdict": "aborted",
    }
    assert all(p["last_drill"] is None for p in presets[1:])
    document = reader.get("/api/v1/chains/chat").json()
    assert "last_drill" not in str(document) and "drill" not in document
    assert error(reader.get("/api/v1/chains/nope/presets"), 404)["code"] == "not_found"


# --- the schema -----------------------------------------------------------------------------------


def test_the_openapi_schema_names_the_drill_endpoints(client: Client) -> None:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    operations = {
        ("get", "/api/v1/chains/{name}/drills"): "chains_drills_list",
        ("post", "/api/v1/chains/{name}/drills"): "chains_drills_start",
        ("get", "/api/v1/drills/{drill}"): "drills_read",
        ("post", "/api/v1/drills/{drill}/abort"): "drills_abort",
        ("get", "/api/v1/chains/{name}/presets"): "chains_presets",
    }
    for (method, path), operation_id in operations.items():
        assert paths[path][method]["operationId"] == operation_id
    start = paths["/api/v1/chains/{name}/drills"]["post"]
    assert set(start["responses"]) == {"201", "400", "401", "403", "404", "409", "503"}
    components = schema["components"]["schemas"]
    assert components["ChainDrillsInput"]["required"] == ["fault", "hop", "reason", "share"]
    fault = components["ChainDrillsInput"]["properties"]["fault"]["$ref"].rsplit("/", 1)[1]
    assert components[fault]["enum"] == list(DRILL_FAULTS)
    assert set(components["DrillReport"]["properties"]) == set(fleet_drills.DrillReport.__annotations__)
    assert components["PresetEntry"]["properties"]["last_drill"]["allOf"][0]["$ref"].endswith("/LastDrill")
