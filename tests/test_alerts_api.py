"""GET /api/v1/alerts: newest first, ?open=true, the documented shape, the API's errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from audit import alerts
from presets import services

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
ALERT_FIELDS = {
    "id",
    "kind",
    "chain",
    "environment",
    "version",
    "preset",
    "actor",
    "reason",
    "pin_version",
    "pinned_by",
    "pinned_at",
    "expires_at",
    "age_seconds",
    "age",
    "subject",
    "message",
    "url",
    "created_at",
    "resolved_at",
    "resolution",
    "deliveries",
    "resolution_deliveries",
}


def pin(preset: str = "pin_secondary", **kwargs) -> None:
    services.select_preset(chain="chat", preset=preset, actor="alice", reason="INC-7", **kwargs)


@pytest.fixture
def three_alerts() -> None:
    """chat: a stale pin (v2) that expired (pin_expired v3), then a new stale pin (v4)."""
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(minutes=90))
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        clock.shift(timedelta(minutes=30))
        services.expire_pins()
        pin(preset="local_only")
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()


def test_it_lists_alerts_newest_first_with_their_delivery_state(reader: Client, three_alerts) -> None:
    response = reader.get("/api/v1/alerts")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-cache"
    entries = response.json()["alerts"]
    assert [(e["kind"], e["version"], e["preset"]) for e in entries] == [
        ("stale_pin", 4, "local_only"),
        ("pin_expired", 3, "pin_secondary"),
        ("stale_pin", 2, "pin_secondary"),
    ]
    for entry in entries:
        assert set(entry) == ALERT_FIELDS
    newest = entries[0]
    assert (newest["created_at"], newest["resolved_at"], newest["age"]) == ("2026-11-29T04:32:00Z", None, "1 h 1 min")
    assert newest["deliveries"] == {  # a read token sees no error text (docs/notifications.md)
        "log": {"state": "delivered", "attempts": 1, "last_error": None, "delivered_at": "2026-11-29T04:32:00Z"}
    }
    assert entries[2]["resolution"].startswith("pin ended by v3: expire to normal")


def test_open_true_lists_only_the_alerts_still_open(reader: Client, three_alerts) -> None:
    entries = reader.get("/api/v1/alerts?open=true").json()["alerts"]
    assert [(e["kind"], e["version"]) for e in entries] == [("stale_pin", 4)]
    assert len(reader.get("/api/v1/alerts?open=false").json()["alerts"]) == 3


def test_limit_and_chain_narrow_the_list(reader: Client, three_alerts) -> None:
    assert [e["version"] for e in reader.get("/api/v1/alerts?limit=2").json()["alerts"]] == [4, 3]
    assert reader.get("/api/v1/alerts?chain=incident-summary").json() == {"alerts": []}
    assert len(reader.get("/api/v1/alerts?chain=chat").json()["alerts"]) == 3


@pytest.mark.parametrize(
    "query",
    ["open=maybe", "limit=0", "limit=501", "limit=ten"],
    ids=["open-not-a-boolean", "limit-zero", "limit-too-big", "limit-text"],
)
def test_bad_parameters_are_a_validation_error(reader: Client, query: str) -> None:
    response = reader.get(f"/api/v1/alerts?{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"].startswith(query.split("=")[0] + ":")


def test_an_unknown_chain_is_not_found(reader: Client) -> None:
    response = reader.get("/api/v1/alerts?chain=nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_reading_alerts_needs_a_token_or_a_signed_in_person(client: Client, bob: User) -> None:
    response = client.get("/api/v1/alerts")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    client.force_login(bob)  # a viewer may read
    assert client.get("/api/v1/alerts").json() == {"alerts": []}


def test_the_openapi_schema_documents_the_alert_shape(client: Client) -> None:
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/alerts"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"open", "limit", "chain"}
    listing = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    components = schema["components"]["schemas"]
    items = components[listing.rsplit("/", 1)[1]]["properties"]["alerts"]["items"]["$ref"]
    alert = components[items.rsplit("/", 1)[1]]
    assert set(alert["properties"]) == ALERT_FIELDS
    delivery = alert["properties"]["deliveries"]["additionalProperties"]["$ref"]
    assert set(components[delivery.rsplit("/", 1)[1]]["properties"]) == {
        "state",
        "attempts",
        "last_error",
        "delivered_at",
    }


def test_the_admin_lists_alerts_read_only(client: Client, three_alerts) -> None:
    admin = User.objects.create_superuser("root", password="root-pass-123")
    client.force_login(admin)
    listing = client.get("/admin/audit/alert/")
    assert listing.status_code == 200
    assert b"stale_pin" in listing.content and b"log: delivered" in listing.content
    assert client.get("/admin/audit/alert/add/").status_code == 403
    alert_id = alerts.recent_alerts(limit=1)[0].pk
    assert client.post(f"/admin/audit/alert/{alert_id}/delete/", {"post": "yes"}).status_code == 403
    assert len(alerts.recent_alerts()) == 3
