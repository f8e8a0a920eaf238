"""Fleet status from the SDK's identity headers, and its usage reports."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.fleet import idle_head_warning
from audit.fleet_recorder import FleetRecorder
from audit.models import FleetInstance
from presets import services
from presets.models import Chain

pytestmark = pytest.mark.usefixtures("synced")


def read_as(client: Client, instance: str, version: int, chain: str = "chat") -> int:
    return client.get(
        f"/api/v1/chains/{chain}",
        headers={"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": str(version)},
    ).status_code


def fleet_of(client: Client, chain: str = "chat") -> dict:
    chains = client.get("/api/v1/fleet").json()["chains"]
    return next(c for c in chains if c["name"] == chain)


def test_the_fleet_view_counts_instances_and_versions(reader: Client) -> None:
    for n in range(3):
        read_as(reader, f"i{n}", 1)
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
    read_as(reader, "i0", 2)
    read_as(reader, "i1", 2)
    fleet = fleet_of(reader)
    assert (fleet["version"], fleet["instances"], fleet["on_version"]) == (2, 3, 2)
    assert fleet["summary"].startswith("2 of 3 instances on v2; p50 applied")
    assert fleet["applied_p50_s"] is not None and fleet["applied_p50_s"] >= 0
    assert sorted(d["client"] for d in fleet["detail"]) == ["checkout/i0", "checkout/i1", "checkout/i2"]
    other = fleet_of(reader, "incident-summary")
    assert (other["instances"], other["summary"]) == (0, "no service instance has read this chain in the last 10 min")


def test_reads_without_identity_headers_are_not_counted(reader: Client) -> None:
    reader.get("/api/v1/chains/chat")
    reader.get("/api/v1/chains/chat", headers={"X-Chain-Client": "no-slash", "X-Chain-Applied-Version": "1"})
    reader.get("/api/v1/chains/chat", headers={"X-Chain-Client": "a/b", "X-Chain-Applied-Version": "x"})
    assert fleet_of(reader)["instances"] == 0


def test_an_instance_is_written_once_a_minute_unless_its_version_changes() -> None:
    recorder = FleetRecorder()
    start = timezone.now()
    recorder.seen("chat", "svc/a", 1, at=start)
    assert recorder.flush() == 1
    recorder.seen("chat", "svc/a", 1, at=start + timedelta(seconds=30))
    assert not recorder.has_pending  # same version within the minute: nothing to write
    recorder.seen("chat", "svc/a", 2, at=start + timedelta(seconds=31))
    assert recorder.flush() == 1
    instance = FleetInstance.objects.get(client="svc/a")
    assert instance.applied_version == 2
    assert instance.version_seen_at == start + timedelta(seconds=31)
    recorder.seen("chat", "svc/a", 2, at=start + timedelta(seconds=95))
    assert recorder.flush() == 1
    instance.refresh_from_db()
    assert instance.last_seen_at == start + timedelta(seconds=95)
    assert instance.version_seen_at == start + timedelta(seconds=31)


def test_instances_that_stopped_reading_drop_out_of_the_fleet(reader: Client) -> None:
    read_as(reader, "old", 1)
    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        read_as(reader, "new", 1)
        fleet = fleet_of(reader)
    assert (fleet["instances"], [d["client"] for d in fleet["detail"]]) == (1, ["checkout/new"])


def usage(client: Client, body: object, chain: str = "chat"):  # type: ignore[no-untyped-def]
    return client.post(f"/api/v1/chains/{chain}/usage", body, content_type="application/json")


def test_the_idle_head_warning_appears_and_disappears_as_usage_is_reported(reader: Client) -> None:
    chat = Chain.objects.get(name="chat")
    pin_secondary = chat.presets.get(name="pin_secondary").steps

    def served(provider: str, at: datetime) -> None:
        body = {"client": "checkout/i1", "providers": {provider: {"requests": 3, "last_served_at": at.isoformat()}}}
        assert usage(reader, body).status_code == 202

    # A fresh install: no service reports usage yet, so no provider can be called idle.
    assert idle_head_warning(chat, pin_secondary) is None
    now = timezone.now()
    served("vendor_a", now)
    assert "vendor_b has not served a chat request in the last 24 h" in idle_head_warning(chat, pin_secondary)
    served("vendor_b", now)
    assert idle_head_warning(chat, pin_secondary) is None
    with time_machine.travel(now + timedelta(hours=25)):
        assert idle_head_warning(chat, pin_secondary) is None  # nothing measured for 24 h
        served("vendor_a", timezone.now())
        assert "vendor_b has not served" in idle_head_warning(chat, pin_secondary)


def test_usage_reports_add_up_and_rejections_show_in_the_fleet(reader: Client) -> None:
    now = timezone.now().isoformat()
    for _ in range(2):
        usage(reader, {"client": "checkout/i1", "providers": {"vendor_a": {"requests": 5, "last_served_at": now}}})
    from audit.models import ProviderUsage

    assert ProviderUsage.objects.get(client="checkout/i1", provider="vendor_a").requests == 10
    usage(
        reader,
        {
            "client": "checkout/i2",
            "rejected": [{"version": 1, "reason": "chain[0]: unknown provider 'vendor_a'", "at": now}],
        },
    )
    read_as(reader, "i2", 0)
    fleet = fleet_of(reader)
    assert fleet["rejected"] == [
        {"client": "checkout/i2", "reason": "chain[0]: unknown provider 'vendor_a'", "at": fleet["rejected"][0]["at"]}
    ]
    assert "1 refused it" in fleet["summary"]


@pytest.mark.parametrize(
    "body",
    [
        {"providers": {}},
        {"client": 5},
        {"client": "a/b", "providers": {"vendor_a": {"requests": -1, "last_served_at": "2026-11-29T00:00:00Z"}}},
        {"client": "a/b", "providers": {"vendor_a": {"requests": "7", "last_served_at": "2026-11-29T00:00:00Z"}}},
        {"client": "a/b", "rejected": [{"version": 1, "reason": "x"}]},
        ["not", "an", "object"],
    ],
    ids=["no-client", "client-number", "negative-count", "count-string", "rejection-without-time", "list"],
)
def test_a_bad_usage_report_is_a_json_400(reader: Client, body) -> None:
    response = usage(reader, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_usage_for_an_unknown_chain_is_404_and_needs_a_token(client: Client, reader: Client) -> None:
    assert usage(reader, {"client": "a/b"}, chain="nope").status_code == 404
    assert usage(client, {"client": "a/b"}).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_one_row_the_database_refuses_does_not_drop_the_others() -> None:
    recorder = FleetRecorder()
    recorder.seen("chat", "svc/honest-1", 1)
    recorder.seen("chat", "svc/huge", 1099511627776)  # beyond the column: the database refuses it
    recorder.seen("chat", "svc/honest-2", 1)
    assert recorder.flush() == 2
    assert sorted(FleetInstance.objects.values_list("client", flat=True)) == ["svc/honest-1", "svc/honest-2"]


def test_instances_ahead_of_the_server_are_counted_and_named_in_the_summary(reader: Client) -> None:
    read_as(reader, "restored-1", 1)
    read_as(reader, "restored-2", 1071)  # saved before the database was restored to v1
    read_as(reader, "restored-3", 1071)
    fleet = fleet_of(reader)
    assert (fleet["instances"], fleet["on_version"], fleet["ahead"]) == (3, 1, 2)
    assert fleet["summary"] == (
        "1 of 3 instances on v1; 2 instances ahead of the server: restored database? run manage.py raise_epoch"
    )
