"""provider_failing and provider_credentials: raised once while the reports of at least
PROVIDER_ALERT_MIN_INSTANCES instances that poll the chain show the condition, resolved by
themselves when it ends, delivered like every alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from audit import provider_alerts
from audit.models import Alert, AlertKind
from presets.wire import LATENCY_BOUNDS_MS
from tests.health_reports import poll
from worker.tasks import alert_providers

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 30, 2, 0, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def thresholds(settings: Any) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    settings.PROVIDER_FAILING_MINUTES = 5
    settings.PROVIDER_CREDENTIALS_INSTANCES = 3
    settings.PROVIDER_ALERT_MIN_INSTANCES = 3


@pytest.fixture(autouse=True)
def every_report_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """No throttle between sweeps in these tests: each report is judged at once."""
    monkeypatch.setattr(provider_alerts, "EVALUATE_EVERY_S", 0.0)


def report(client: Client, instance: str, outcomes: dict[str, int], provider: str = "vendor_a") -> None:
    """The instance ``checkout/{instance}`` reads the chain, then reports ``outcomes`` of
    ``provider``'s large model, as an SDK instance does."""
    poll(client, instance)
    body = {
        "client": f"checkout/{instance}",
        "health": {
            "latency_bounds_ms": list(LATENCY_BOUNDS_MS),
            "steps": [
                {
                    "provider": provider,
                    "model": "large",
                    "outcomes": outcomes,
                    "latency_ms": [0] * (len(LATENCY_BOUNDS_MS) + 1),
                }
            ],
        },
    }
    response = client.post("/api/v1/chains/chat/usage", body, content_type="application/json")
    assert response.status_code == 202, response.content


def alerts(kind: str) -> list[Alert]:
    return list(Alert.objects.filter(kind=kind).order_by("id"))


def test_a_failing_provider_raises_one_alert_that_resolves_when_it_recovers(reader: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        for n in range(2):
            report(reader, f"i{n}", {"served": 5, "server_error": 5})
        assert alerts(AlertKind.PROVIDER_FAILING) == []  # two instances: not yet
        for n in range(2, 4):  # every report keeps it failing: still one alert
            report(reader, f"i{n}", {"served": 5, "server_error": 5})
        (alert,) = alerts(AlertKind.PROVIDER_FAILING)
        assert alert.is_open
        assert (alert.subject, alert.version) == ("vendor_a/large", 1)
        assert alert.message == (
            "vendor_a/large on chat: 50.0 % errors (mostly 5xx) over the last 5 min, 15 of 30 attempts; "
            "3 of 3 instance(s) polling the chain see it failing (token reader)"
        )
        assert alert.details["error_rate"] == 0.5  # as raised, at the third report
        assert (alert.details["failing_instances"], alert.details["tokens"]) == (3, ["reader"])

        clock.shift(timedelta(minutes=6))  # the failures leave the window
        for n in range(4):
            report(reader, f"i{n}", {"served": 10})

    alert.refresh_from_db()
    assert not alert.is_open
    assert "below 20 % errors over the last 5 min" in alert.resolution
    assert "fewer than 3 instances polling the chain see it failing" in alert.resolution
    assert len(alerts(AlertKind.PROVIDER_FAILING)) == 1


def test_failing_again_after_recovering_is_a_new_alert(reader: Client) -> None:
    def every_instance(outcomes: dict[str, int]) -> None:
        for n in range(3):
            report(reader, f"i{n}", outcomes)

    with time_machine.travel(T0, tick=False) as clock:
        every_instance({"served": 10, "timeout": 20})
        clock.shift(timedelta(minutes=6))
        every_instance({"served": 30})
        clock.shift(timedelta(minutes=6))
        every_instance({"served": 10, "timeout": 20})

    first, second = alerts(AlertKind.PROVIDER_FAILING)
    assert (first.is_open, second.is_open) == (False, True)
    assert "mostly timeouts" in second.message


def test_streams_interrupted_on_three_instances_raise_provider_failing(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(reader, f"i{n}", {"served": 6, "interrupted": 4})

    (alert,) = alerts(AlertKind.PROVIDER_FAILING)
    assert alert.message == (
        "vendor_a/large on chat: 40.0 % errors (mostly interrupted streams) over the last 5 min, 12 of 30 attempts; "
        "3 of 3 instance(s) polling the chain see it failing (token reader)"
    )


def test_too_few_attempts_or_a_low_rate_raise_nothing(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(reader, f"i{n}", {"served": 1, "server_error": 5})  # 18 attempts: too few
            report(reader, f"i{n}", {"served": 200, "rate_limited": 30}, provider="vendor_b")  # 13 %

    assert alerts(AlertKind.PROVIDER_FAILING) == []


def test_credentials_rejected_by_three_instances_raise_provider_credentials(reader: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        report(reader, "i1", {"served": 100, "credentials": 1})
        report(reader, "i2", {"served": 100, "credentials": 1})
        assert alerts(AlertKind.PROVIDER_CREDENTIALS) == []
        report(reader, "i3", {"served": 100, "credentials": 2})
        (alert,) = alerts(AlertKind.PROVIDER_CREDENTIALS)
        assert alert.subject == "vendor_a"
        assert alert.message.startswith("vendor_a rejected the credentials (HTTP 401/403) of 3 instance(s) of chat")
        assert "checkout/i1, checkout/i2, checkout/i3 (token reader)" in alert.message
        assert alert.details["tokens"] == ["reader"]
        assert alerts(AlertKind.PROVIDER_FAILING) == []  # 4 of 304 attempts: not failing
        clock.shift(timedelta(minutes=6))
        assert alert_providers() == 0  # the beat resolves it with no report arriving

    alert.refresh_from_db()
    assert not alert.is_open
    assert "fewer than 3 instances polling the chain saw vendor_a reject" in alert.resolution


def test_provider_alerts_are_in_the_api_with_their_subject_and_deliveries(reader: Client, settings: Any) -> None:
    settings.ALERT_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # configured: a pending delivery
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(reader, f"i{n}", {"served": 10, "server_error": 30})

    (entry,) = reader.get("/api/v1/alerts?open=true").json()["alerts"]
    assert (entry["kind"], entry["subject"], entry["chain"]) == ("provider_failing", "vendor_a/large", "chat")
    assert entry["deliveries"]["log"]["state"] == "delivered"
    assert entry["deliveries"]["webhook"]["state"] in {"pending", "failed"}


def test_a_sweep_that_breaks_does_not_fail_the_report(reader: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("database hiccup")

    monkeypatch.setattr(provider_alerts, "sweep", broken)

    report(reader, "i1", {"served": 10, "server_error": 30})  # still 202: the SDK must not resend it
