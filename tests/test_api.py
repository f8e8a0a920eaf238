"""The HTTP API of DESIGN §7: the document, ETags, writes, history, restore and errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from presets import models
from presets.models import Selection, ServiceToken

pytestmark = pytest.mark.usefixtures("synced")

DOCUMENT_FIELDS = {
    "name",
    "environment",
    "version",
    "preset",
    "is_default",
    "chain",
    "marking",
    "updated_by",
    "reason",
    "updated_at",
    "expires_at",
    "epoch",
    "default",
}


def post(client: Client, url: str, body: object) -> object:
    return client.post(url, body, content_type="application/json")


def history_count() -> int:
    return Selection.history.count()


# --- reads ------------------------------------------------------------------------------


def test_the_chain_document_has_exactly_the_contract_fields(reader: Client) -> None:
    response = reader.get("/api/v1/chains/chat")
    assert response.status_code == 200
    document = response.json()
    assert set(document) == DOCUMENT_FIELDS
    assert document["name"] == "chat"
    assert document["version"] == 1
    assert document["preset"] == "normal"
    assert document["is_default"] is True
    assert document["chain"][0] == {"provider": "vendor_a", "model": "large", "timeout_ms": 20000}
    assert document["marking"] == {"degraded": False, "note": ""}
    assert document["expires_at"] is None
    assert document["updated_at"].endswith("Z")
    assert response["ETag"] == '"1"'
    assert response["Cache-Control"] == "no-cache"


def test_a_matching_if_none_match_answers_304(reader: Client) -> None:
    assert reader.get("/api/v1/chains/chat", headers={"If-None-Match": '"1"'}).status_code == 304
    assert reader.get("/api/v1/chains/chat", headers={"If-None-Match": 'W/"1"'}).status_code == 304
    assert reader.get("/api/v1/chains/chat", headers={"If-None-Match": '"0"'}).status_code == 200


def test_a_change_answers_200_to_the_old_etag(reader: Client, writer: Client) -> None:
    post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1"})
    response = reader.get("/api/v1/chains/chat", headers={"If-None-Match": '"1"'})
    assert response.status_code == 200
    assert response["ETag"] == '"2"'
    assert response.json()["preset"] == "pin_secondary"


def test_the_list_holds_every_chain_document(reader: Client) -> None:
    chains = reader.get("/api/v1/chains").json()["chains"]
    assert [c["name"] for c in chains] == ["chat", "incident-summary"]
    assert all(set(c) == DOCUMENT_FIELDS for c in chains)


def test_a_degraded_preset_carries_its_marking(writer: Client) -> None:
    document = post(
        writer, "/api/v1/chains/chat/select", {"preset": "local_only", "reason": "both vendors down"}
    ).json()
    assert document["marking"]["degraded"] is True
    assert document["marking"]["note"]


def test_an_expired_pin_is_never_served(reader: Client, writer: Client) -> None:
    post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1", "duration_minutes": 5})
    with time_machine.travel(timezone.now() + timedelta(minutes=5, seconds=1)):
        document = reader.get("/api/v1/chains/chat").json()
    assert (document["preset"], document["version"]) == ("normal", 3)
    entry = reader.get("/api/v1/chains/chat/history").json()["entries"][0]
    assert (entry["action"], entry["actor"]) == ("expire", "system:expiry")


# --- writes -----------------------------------------------------------------------------


def test_select_answers_the_new_document_attributed_to_the_token(writer: Client) -> None:
    response = post(
        writer,
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": " INC-4411 ", "duration_minutes": 90, "expected_version": 1},
    )
    assert response.status_code == 200
    document = response.json()
    assert (document["version"], document["preset"], document["is_default"]) == (2, "pin_secondary", False)
    assert (document["updated_by"], document["reason"]) == ("token:deployer", "INC-4411")
    assert response["ETag"] == '"2"'


def test_select_accepts_an_explicit_expiry(writer: Client) -> None:
    expires = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    document = post(
        writer,
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "r", "expires_at": expires.isoformat()},
    ).json()
    assert document["expires_at"] == expires.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_revert_extend_and_restore_through_the_api(writer: Client) -> None:
    post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1"})
    extended = post(
        writer, "/api/v1/chains/chat/extend", {"reason": "still broken", "duration_minutes": 600, "expected_version": 2}
    )
    assert extended.status_code == 200 and extended.json()["version"] == 3
    reverted = post(writer, "/api/v1/chains/chat/revert", {"reason": "fixed"})
    assert reverted.json()["preset"] == "normal" and reverted.json()["expires_at"] is None
    restored = post(writer, "/api/v1/chains/chat/history/4/restore", {"reason": "undo v4"})
    assert restored.status_code == 200
    assert (restored.json()["version"], restored.json()["preset"]) == (5, "pin_secondary")
    assert restored.json()["expires_at"] is not None


def test_history_lists_every_change_newest_first_with_previous_values(writer: Client, reader: Client) -> None:
    post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1"})
    post(writer, "/api/v1/chains/chat/revert", {"reason": "fixed"})
    entries = reader.get("/api/v1/chains/chat/history").json()["entries"]
    assert [e["version"] for e in entries] == [3, 2, 1]
    latest = entries[0]
    for key in (
        "version",
        "action",
        "actor",
        "reason",
        "at",
        "preset",
        "chain",
        "expires_at",
        "previous_version",
        "previous_preset",
        "previous_chain",
        "previous_expires_at",
    ):
        assert key in latest
    assert (latest["action"], latest["preset"], latest["previous_preset"]) == ("revert", "normal", "pin_secondary")
    assert latest["previous_chain"][0]["provider"] == "vendor_b"
    assert latest["previous_expires_at"] is not None
    page = reader.get("/api/v1/chains/chat/history?limit=1&before=3").json()["entries"]
    assert [e["version"] for e in page] == [2]


def test_a_select_and_a_revert_stay_within_their_queries(writer: Client, django_assert_max_num_queries) -> None:
    # The write path's budget (bench/select_latency.py): the token, the transaction (a
    # savepoint inside the test's), the lock, the chain with its default and live preset, the
    # target preset (a select), the update and its history row, the epoch and NOTIFY of the
    # change notification, and the epoch of the answer.
    writer.get("/api/v1/chains/chat")  # the token's first use records it (last_used_at)
    with django_assert_max_num_queries(11):
        selected = post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "INC-1"})
    with django_assert_max_num_queries(10):
        reverted = post(writer, "/api/v1/chains/chat/revert", {"reason": "fixed"})
    assert (selected.status_code, reverted.status_code) == (200, 200)
    assert [e.action for e in Selection.history.filter(chain__name="chat").order_by("version")] == [
        "sync",
        "select",
        "revert",
    ]


def test_a_conflict_answers_409_naming_who_won(writer: Client) -> None:
    post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "first", "expected_version": 1})
    response = post(
        writer, "/api/v1/chains/chat/select", {"preset": "local_only", "reason": "second", "expected_version": 1}
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict"
    assert "token:deployer" in error["message"] and "first" in error["message"]
    assert error["details"]["current"]["version"] == 2


def test_an_oncall_session_can_write_with_csrf(alice) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = post(client, "/api/v1/chains/chat/revert", {"reason": "r"})
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    client.get("/admin/login/")  # a page with a form sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "r"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 200
    assert response.json()["updated_by"] == "alice"


def test_a_viewer_session_can_read_but_not_write(bob) -> None:
    client = Client()
    client.force_login(bob)
    assert client.get("/api/v1/chains/chat").status_code == 200
    response = post(client, "/api/v1/chains/chat/revert", {"reason": "r"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


# --- errors -----------------------------------------------------------------------------

SELECT = "/api/v1/chains/chat/select"
BAD_INPUT = [
    ("preset-number", SELECT, {"preset": 5, "reason": "r"}, 400, "preset"),
    ("preset-list", SELECT, {"preset": ["a"], "reason": "r"}, 400, "preset"),
    ("missing-preset", SELECT, {"reason": "r"}, 400, "preset"),
    ("missing-reason", SELECT, {"preset": "pin_secondary"}, 400, "reason"),
    ("blank-reason", SELECT, {"preset": "pin_secondary", "reason": "   "}, 400, "reason"),
    ("10kB-reason", SELECT, {"preset": "pin_secondary", "reason": "x" * 10_000}, 400, "reason"),
    ("reason-number", SELECT, {"preset": "pin_secondary", "reason": 7}, 400, "reason"),
    (
        "duration-string",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": "60"},
        400,
        "duration_minutes",
    ),
    (
        "duration-bool",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": True},
        400,
        "duration_minutes",
    ),
    (
        "duration-zero",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": 0},
        400,
        "duration_minutes",
    ),
    ("duration-too-long", SELECT, {"preset": "pin_secondary", "reason": "r", "duration_minutes": 1441}, 400, "1440"),
    (
        "duration-huge",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": 10**30},
        400,
        "duration_minutes",
    ),
    (
        "past-expiry",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "expires_at": "2020-01-01T00:00:00Z"},
        400,
        "not in the future",
    ),
    (
        "far-expiry",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "expires_at": "2099-01-01T00:00:00Z"},
        400,
        "minutes ahead",
    ),
    ("bad-expiry", SELECT, {"preset": "pin_secondary", "reason": "r", "expires_at": "tomorrow"}, 400, "expires_at"),
    (
        "both-expiries",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": 5, "expires_at": "2099-01-01T00:00:00Z"},
        400,
        "not both",
    ),
    (
        "expected-version-string",
        SELECT,
        {"preset": "pin_secondary", "reason": "r", "expected_version": "1"},
        400,
        "expected_version",
    ),
    ("unknown-preset", SELECT, {"preset": "nope", "reason": "r"}, 400, "use one of"),
    ("body-is-a-list", SELECT, ["preset"], 400, "dictionary"),
    ("unknown-chain", "/api/v1/chains/nope/select", {"preset": "normal", "reason": "r"}, 404, "unknown chain"),
    ("unknown-version", "/api/v1/chains/chat/history/99/restore", {"reason": "r"}, 404, "no version 99"),
    ("restore-unknown-chain", "/api/v1/chains/nope/history/1/restore", {"reason": "r"}, 404, "unknown chain"),
    ("restore-version-zero", "/api/v1/chains/chat/history/0/restore", {"reason": "r"}, 404, "no version 0"),
    ("extend-not-pinned", "/api/v1/chains/chat/extend", {"reason": "r"}, 400, "not pinned"),
    ("revert-on-default", "/api/v1/chains/chat/revert", {"reason": "r"}, 400, "nothing to revert"),
]


@pytest.mark.parametrize("url,body,status,fragment", [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_a_json_error_and_writes_nothing(writer: Client, url, body, status, fragment) -> None:
    before = history_count()
    response = post(writer, url, body)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == {400: "validation_error", 404: "not_found"}[status]
    assert fragment in error["message"]
    assert history_count() == before


@pytest.mark.parametrize(
    "body,content_type",
    [
        ("{not json", "application/json"),
        ("", "application/json"),
        ("preset=pin_secondary&reason=r", "application/x-www-form-urlencoded"),
        ("\xff\xfe", "application/json"),
    ],
    ids=["broken-json", "empty", "form-encoded", "binary"],
)
def test_a_body_that_is_not_json_is_a_json_error(writer: Client, body, content_type) -> None:
    response = writer.post(SELECT, body, content_type=content_type)
    assert response.status_code in (400, 415)
    assert response.json()["error"]["message"]
    assert Selection.objects.get(chain__name="chat").version == 1


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", "/api/v1/chains"),
        ("get", "/api/v1/chains/chat"),
        ("get", "/api/v1/chains/chat/history"),
        ("post", "/api/v1/chains/chat/select"),
        ("post", "/api/v1/chains/chat/revert"),
        ("post", "/api/v1/chains/chat/extend"),
        ("post", "/api/v1/chains/chat/history/1/restore"),
        ("get", "/api/v1/plans"),
        ("get", "/api/v1/chains/chat/plans"),
        ("post", "/api/v1/chains/chat/plans"),
        ("get", "/api/v1/chains/chat/plans/1"),
        ("patch", "/api/v1/chains/chat/plans/1"),
        ("post", "/api/v1/chains/chat/plans/1/cancel"),
        ("post", "/api/v1/chains/chat/plans/1/start"),
        ("get", "/api/v1/chains/chat/guard"),
        ("post", "/api/v1/chains/chat/guard/off"),
        ("get", "/api/v1/chains/chat/presets"),
        ("get", "/api/v1/chains/chat/drills"),
        ("post", "/api/v1/chains/chat/drills"),
        ("get", "/api/v1/drills/1"),
        ("post", "/api/v1/drills/1/abort"),
        ("get", "/api/v1/chains/chat/spend"),
    ],
)
def test_every_endpoint_without_credentials_answers_401(client: Client, method, url) -> None:
    response = getattr(client, method)(url)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/chains/chat/select",
        "/api/v1/chains/chat/revert",
        "/api/v1/chains/chat/extend",
        "/api/v1/chains/chat/history/1/restore",
        "/api/v1/chains/chat/plans",
        "/api/v1/chains/chat/plans/1/cancel",
        "/api/v1/chains/chat/plans/1/start",
        "/api/v1/chains/chat/guard/off",
        "/api/v1/chains/chat/drills",
        "/api/v1/drills/1/abort",
    ],
)
def test_a_read_token_cannot_write(reader: Client, url) -> None:
    response = post(reader, url, {"preset": "pin_secondary", "reason": "r"})
    assert response.status_code == 403
    assert "write-scope token" in response.json()["error"]["message"]
    assert history_count() == 2


def test_a_write_token_revoked_here_is_refused_at_once_and_elsewhere_within_a_second(writer, monkeypatch) -> None:
    """Changes look their token up once a burst (``models.TOKEN_RECHECK_S``): a token revoked
    by this process is forgotten at once, one revoked by another (no signal here) within it,
    and an expiry holds on every use."""
    assert post(writer, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "a"}).status_code == 200
    with CaptureQueriesContext(connection) as queries:  # the next change, a moment later: no lookup
        assert post(writer, "/api/v1/chains/chat/extend", {"duration_minutes": 240, "reason": "a2"}).status_code == 200
    assert not [q for q in queries if "presets_servicetoken" in q["sql"]]
    token = ServiceToken.objects.get(name="deployer")
    ServiceToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())  # as another process does it
    later = models._clock() + models.TOKEN_RECHECK_S + 0.01
    monkeypatch.setattr(models, "_clock", lambda: later)
    assert post(writer, "/api/v1/chains/chat/revert", {"reason": "b"}).status_code == 401
    assert history_count() == 4

    raw = ServiceToken(name="second", scope="write")
    secret = raw.issue()
    raw.save()
    second = Client(headers={"Authorization": f"Bearer {secret}"})
    assert post(second, "/api/v1/chains/chat/revert", {"reason": "c"}).status_code == 200
    raw.revoked_at = timezone.now()
    raw.save()  # here: forgotten at once
    assert post(second, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "d"}).status_code == 401

    third = ServiceToken(name="third", scope="write", expires_at=timezone.now() + timedelta(minutes=1))
    secret = third.issue()
    third.save()
    short = Client(headers={"Authorization": f"Bearer {secret}"})
    assert post(short, "/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "e"}).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):  # looked up a moment ago, expired since
        assert post(short, "/api/v1/chains/chat/revert", {"reason": "f"}).status_code == 401
    assert history_count() == 6


@pytest.mark.parametrize("header", ["Bearer nope", "Basic dXNlcjpwYXNz", "Bearer", "Token abc"])
def test_a_wrong_token_answers_401(client: Client, header) -> None:
    response = client.get("/api/v1/chains/chat", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_unknown_api_paths_and_methods_are_json(reader: Client) -> None:
    response = reader.get("/api/v1/nothing-here")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    response = reader.get("/api/v1/chains/nope")
    assert response.status_code == 404 and "unknown chain" in response.json()["error"]["message"]
    response = reader.delete("/api/v1/chains/chat")
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("query", ["limit=0", "limit=abc", "limit=501", "before=x"])
def test_bad_history_paging_is_a_validation_error(reader: Client, query) -> None:
    response = reader.get(f"/api/v1/chains/chat/history?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_the_openapi_schema_describes_the_api(client: Client) -> None:
    response = client.get("/api/schema/", headers={"Accept": "application/json"})
    assert response.status_code == 200
    text = response.content.decode()
    assert "openapi: 3" in text or '"openapi": "3' in text
    for path in (
        "/api/v1/chains/{name}",
        "/api/v1/chains/{name}/select",
        "/api/v1/chains/{name}/history/{version}/restore",
    ):
        assert path in text


def test_health_and_readiness(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
