"""Usage and health reports are evidence, never authority: they need a service token, one token
(or made-up instance names) cannot raise a provider alert, reports past a per-minute limit are
answered 429 with Retry-After, and what they add to the database is bounded per report and per
chain and minute, whatever the fleet claims."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client

from audit import provider_alerts
from audit.models import (
    Alert,
    AlertKind,
    FleetInstance,
    ProviderEvidence,
    ProviderHealthMinute,
    ProviderReporter,
    ProviderUsage,
    RejectedVersion,
    ReportWindow,
)
from audit.usage import MAX_REASON, MAX_REJECTIONS
from presets import services
from presets.documents import format_time
from presets.models import Selection
from presets.providers import get_registry
from presets.wire import OUTCOME_CLASSES
from tests.conftest import make_token
from tests.health_reports import BOUNDS, latency, poll, report, step
from tests.servers import GRANIAN, free_port, granian, wait_for

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 30, 2, 0, 30, tzinfo=UTC)  # 30 s left in its minute
KB = 1024
PER_REPORT_BYTES = 20 * KB


@pytest.fixture(autouse=True)
def every_report_judged(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """No throttle between sweeps: each report is judged at once, by the default rules."""
    monkeypatch.setattr(provider_alerts, "EVALUATE_EVERY_S", 0.0)
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    settings.PROVIDER_FAILING_MINUTES = 5
    settings.PROVIDER_CREDENTIALS_INSTANCES = 3
    settings.PROVIDER_ALERT_MIN_INSTANCES = 3


def token_client(name: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {make_token(name, 'read')}"})


def post(client: Client, body: dict[str, Any], chain: str = "chat") -> Any:
    return client.post(f"/api/v1/chains/{chain}/usage", json.dumps(body), content_type="application/json")


def health_body(instance: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"client": instance, "health": {"latency_bounds_ms": BOUNDS, "steps": steps}}


# --- who may report ----------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["oncall", "viewer"])
def test_a_signed_in_session_cannot_send_a_usage_report(who: str, request: pytest.FixtureRequest) -> None:
    session: Client = request.getfixturevalue(who)
    body = health_body("checkout/i1", [step("vendor_a", "large", {"server_error": 1000})])
    body["providers"] = {"vendor_a": {"requests": 1, "last_served_at": "2026-11-30T02:00:00Z"}}

    response = post(session, body)

    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden"
    assert error["message"] == (
        "usage reports need a service token (send 'Authorization: Bearer <token>'); a signed-in session cannot send one"
    )
    assert not ProviderUsage.objects.exists() and not ProviderHealthMinute.objects.exists()


# --- one token cannot page anyone ----------------------------------------------------------------


@pytest.mark.parametrize("polled", [True, False], ids=["an-instance-that-polls", "a-made-up-instance"])
def test_one_token_claiming_a_thousand_server_errors_raises_no_alert(reader: Client, polled: bool) -> None:
    with time_machine.travel(T0, tick=False):
        for _ in range(django_settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE):
            response = report(reader, "i1", [step("vendor_a", "large", {"server_error": 1000})], polled=polled)
            assert response.status_code == 202, response.content
        sweep = provider_alerts.sweep()

    assert sweep.raised == 0
    assert not Alert.objects.exists()


def test_three_made_up_instances_from_one_token_raise_no_provider_credentials(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for name in ("a", "b", "c"):
            response = report(reader, f"made-up-{name}", [step("vendor_a", "large", {"credentials": 5})], polled=False)
            assert response.status_code == 202, response.content
            assert response.json()["dropped"]["health"] == 1  # fleet status never saw it read
        sweep = provider_alerts.sweep()

    assert sweep.raised == 0
    assert not Alert.objects.filter(kind=AlertKind.PROVIDER_CREDENTIALS).exists()
    assert not ProviderReporter.objects.exists()


def test_instances_that_stopped_polling_no_longer_count(reader: Client, settings: Any) -> None:
    settings.PROVIDER_FAILING_MINUTES = 30
    with time_machine.travel(T0, tick=False) as clock:
        for n in range(3):
            report(reader, f"i{n}", [step("vendor_a", "large", {"served": 5, "server_error": 20})])
        (alert,) = Alert.objects.filter(kind=AlertKind.PROVIDER_FAILING)
        # Their reports are still in the 30-minute window, but none has read the chain for
        # FLEET_INSTANCE_TTL_MINUTES: gone (scaled down), they are no evidence any more.
        clock.shift(timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES + 1))
        assert provider_alerts.sweep().resolved == 1

    alert.refresh_from_db()
    assert not alert.is_open


def test_honest_instances_outweigh_a_few_that_claim_a_thousand_times_their_counts(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(17):
            report(reader, f"honest-{n}", [step("vendor_a", "large", {"served": 50})])
        # Three instances that do read the chain, each claiming 1,000 server errors: without a
        # cap they would be 78 % of the attempts; weighed like the median instance, 15 %.
        for n in range(3):
            report(reader, f"loud-{n}", [step("vendor_a", "large", {"server_error": 1000})])
        sweep = provider_alerts.sweep()

    assert sweep.raised == 0
    assert not Alert.objects.exists()
    assert ProviderEvidence.objects.count() == 20  # all of them are kept as evidence, weighed


def test_an_alert_names_the_tokens_its_evidence_came_from(synced: None) -> None:
    eu, us, batch = token_client("checkout-eu"), token_client("checkout-us"), token_client("batch")
    with time_machine.travel(T0, tick=False):
        report(batch, "batch-1", [step("vendor_a", "large", {"served": 10})])  # sees nothing wrong
        for client, instance in ((eu, "eu-1"), (eu, "eu-2"), (us, "us-1")):
            report(client, instance, [step("vendor_a", "large", {"served": 10, "server_error": 10})])
        for client, instance in ((eu, "eu-1"), (us, "us-1"), (batch, "batch-1")):
            report(client, instance, [step("vendor_b", "large", {"served": 9, "credentials": 1})])

    failing = Alert.objects.get(kind=AlertKind.PROVIDER_FAILING)
    assert failing.details["tokens"] == ["checkout-eu", "checkout-us"]
    assert failing.details["clients"] == ["checkout/eu-1", "checkout/eu-2", "checkout/us-1"]
    assert failing.message.endswith(
        "3 of 4 instance(s) polling the chain see it failing (tokens checkout-eu, checkout-us)"
    )
    credentials = Alert.objects.get(kind=AlertKind.PROVIDER_CREDENTIALS)
    assert credentials.details["tokens"] == ["batch", "checkout-eu", "checkout-us"]
    assert "(tokens batch, checkout-eu, checkout-us); check its API key" in credentials.message


# --- rate limits -------------------------------------------------------------------------------


def test_an_instance_past_its_limit_gets_429_with_the_seconds_left_in_its_minute(reader: Client) -> None:
    limit = django_settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE
    served = {"vendor_a": {"requests": 1, "last_served_at": "2026-11-30T02:00:00Z"}}
    with time_machine.travel(T0, tick=False) as clock:
        poll(reader, "i1")
        answers = [post(reader, {"client": "checkout/i1", "providers": served}) for _ in range(limit + 1)]
        other = post(reader, {"client": "checkout/i2", "providers": served})  # its own limit
        clock.shift(timedelta(seconds=30))  # the next minute
        again = post(reader, {"client": "checkout/i1", "providers": served})

    assert [answer.status_code for answer in answers] == [202] * limit + [429]
    refused = answers[-1]
    assert refused["Retry-After"] == "30"
    error = refused.json()["error"]
    assert error["code"] == "throttled"
    assert error["message"].startswith(f"too many usage reports: at most {limit} a minute per instance")
    assert "USAGE_REPORTS_PER_INSTANCE_PER_MINUTE" in error["message"]
    assert error["details"] == {"limit": "instance", "allowed_per_minute": limit, "retry_after": 30}
    assert (other.status_code, again.status_code) == (202, 202)
    # The refused report added nothing.
    assert ProviderUsage.objects.get(client="checkout/i1").requests == limit + 1


def test_made_up_instance_names_share_one_limit_per_token(reader: Client) -> None:
    limit = django_settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE
    served = {"vendor_a": {"requests": 1, "last_served_at": "2026-11-30T02:00:00Z"}}
    with time_machine.travel(T0, tick=False):
        statuses = [post(reader, {"client": f"made-up/{n}", "providers": served}).status_code for n in range(20)]
        poll(reader, "real")
        real = post(reader, {"client": "checkout/real", "providers": served})
        other_token = post(token_client("other"), {"client": "made-up/x", "providers": served})

    assert statuses == [202] * limit + [429] * (20 - limit)
    assert (real.status_code, other_token.status_code) == (202, 202)


def test_a_report_refused_by_one_limit_is_counted_under_none(reader: Client, settings: Any) -> None:
    settings.USAGE_REPORTS_PER_TOKEN_PER_MINUTE = 2
    served = {"vendor_a": {"requests": 1, "last_served_at": "2026-11-30T02:00:00Z"}}
    with time_machine.travel(T0, tick=False):
        for name in ("a", "b", "c"):
            poll(reader, name)
        statuses = [post(reader, {"client": f"checkout/{name}", "providers": served}).status_code for name in "abc"]

    assert statuses == [202, 202, 429]
    counted = dict(ReportWindow.objects.values_list("key", "reports"))
    refused = FleetInstance.objects.get(client="checkout/c").pk
    assert f"instance:{refused}" not in counted  # its own minute's count untouched
    assert sorted(counted.values()) == [1, 1, 2, 2]  # a's, b's, the token's, the chain's


# --- what reports can add to the database ------------------------------------------------------


# What a usage report writes to (fleet status's instances are written by reads, not reports).
REPORT_TABLES = [
    model._meta.db_table
    for model in (
        ProviderUsage,
        RejectedVersion,
        ProviderHealthMinute,
        ProviderReporter,
        ProviderEvidence,
        ReportWindow,
    )
]


def report_tables_bytes() -> int:
    """The tables usage reports write, with their indexes and TOAST, as PostgreSQL allocated them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "WHERE c.relname = ANY(%s) AND c.relnamespace = current_schema()::regnamespace",
            [REPORT_TABLES],
        )
        (size,) = cursor.fetchone()
    return int(size)


def maximal_report(client: str, version: int) -> dict[str, Any]:
    """The largest report the API parses: a 200-character client, 50 providers and 50 steps
    (the registry's and made-up ones, 100-character names) with every outcome class, 50
    breaker providers, 100 refusals of 2,000 characters."""
    registry = get_registry()
    known = [(provider, model) for provider, spec in registry.items() for model in spec.models]
    made_up = [(f"{n:02d}".ljust(100, "p"), "m" * 100) for n in range(50 - len(known))]
    outcomes = dict.fromkeys(OUTCOME_CLASSES, 10**9)
    providers = [*registry, *(f"{n:02d}".ljust(100, "q") for n in range(50 - len(registry)))]
    now = format_time(datetime.now(UTC))
    return {
        "client": client.ljust(200, "x"),
        "applied_version": version,
        "providers": {name: {"requests": 10**9, "last_served_at": now} for name in providers},
        "rejected": [
            {"version": max(0, version - n), "reason": f"{n}".ljust(2000, "r"), "at": now} for n in range(100)
        ],
        "health": {
            "latency_bounds_ms": BOUNDS,
            "steps": [step(p, m, outcomes, latency(b2=10**9, b8=10**9)) for p, m in [*known, *made_up]],
            "breaker_openings": dict.fromkeys(providers, 3),
        },
        # A drill section naming a drill of this chain that may not exist: never kept from an
        # instance fleet status does not know, nor for a drill that is not the chain's.
        "drill": {
            "id": 2**31 - 1,
            "requests": 10**12,
            "drilled": 10**12,
            "ended_on": {"2": 10**12},
            "failed": 10**12,
            "deadline": 10**12,
            "refusals": 10**12,
            "fallback_attempts": 10**12,
            "fallback_failures": 10**12,
            "latency_ms": {"drilled": [10**12] * (len(BOUNDS) + 1), "other": [10**12] * (len(BOUNDS) + 1)},
        },
    }


def at_version(version: int) -> int:
    """Changes ``chat`` until it is at ``version``: refusals of that many versions can be kept."""
    while Selection.objects.get(chain__name="chat").version < version:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="more versions")
        services.revert_to_default(chain="chat", actor="alice", reason="more versions")
    return Selection.objects.get(chain__name="chat").version


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # each report commits, as in production
def test_a_flood_of_maximal_reports_from_one_token_gets_429s_and_adds_little(reader: Client) -> None:
    """300 of the largest reports the API parses, from one token under made-up instance names,
    over three minutes."""
    version = at_version(12)
    with time_machine.travel(T0, tick=False) as clock:
        # An honest instance first: every table has its first pages, as in any running plane.
        body = maximal_report("checkout/warm", version)
        poll(reader, body["client"].removeprefix("checkout/"))
        assert post(reader, body).status_code == 202
        before = report_tables_bytes()
        answers = []
        for minute in range(3):
            clock.shift(timedelta(minutes=1))
            answers += [post(reader, maximal_report(f"flood/{minute}-{n:02d}", version)) for n in range(100)]
        grown = report_tables_bytes() - before

    statuses = Counter(answer.status_code for answer in answers)
    accepted = statuses[202]
    # Made-up names share one instance limit per token: six a minute.
    assert accepted == 3 * django_settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE
    assert statuses[429] == 300 - accepted
    assert {answer["Retry-After"] for answer in answers if answer.status_code == 429} == {"30"}
    # Their health is dropped whole: fleet status never saw those instances read the chain.
    assert answers[0].json()["dropped"] == {
        "providers": 47,
        "steps": 0,
        "outcome_classes": 0,
        "breaker_openings": 0,
        "rejections": 100 - MAX_REJECTIONS,
        "health": 1,
        "drill": 1,
    }
    assert grown <= accepted * PER_REPORT_BYTES, f"{grown / accepted / KB:.1f} KB a report"
    assert RejectedVersion.objects.filter(client__startswith="flood/").count() == accepted * MAX_REJECTIONS
    assert max(len(reason) for reason in RejectedVersion.objects.values_list("reason", flat=True)) == MAX_REASON
    assert not Alert.objects.exists()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_fleet_of_made_up_polling_instances_adds_a_bounded_amount_per_chain_and_minute(
    reader: Client, settings: Any
) -> None:
    """The fleet claims 90 instances (each reads the chain under a name of its own) and each
    sends the largest report there is, minute after minute: the chain's limit bounds what a
    minute adds, and each report adds at most 20 KB."""
    settings.USAGE_REPORTS_PER_CHAIN_PER_MINUTE = per_minute = 60
    version = at_version(12)
    bodies = [maximal_report(f"checkout/claimed-{n:02d}", version) for n in range(90)]
    with time_machine.travel(T0, tick=False) as clock:
        warm = maximal_report("checkout/warm", version)
        for body in [warm, *bodies]:
            poll(reader, body["client"].removeprefix("checkout/"))
        assert post(reader, warm).status_code == 202
        growth, accepted = [], []
        for _ in range(2):  # two minutes of it
            clock.shift(timedelta(minutes=1))
            before = report_tables_bytes()
            answers = [post(reader, body) for body in bodies]
            growth.append(report_tables_bytes() - before)
            accepted.append(sum(answer.status_code == 202 for answer in answers))
            refused = [answer for answer in answers if answer.status_code == 429]
            assert {answer.json()["error"]["details"]["limit"] for answer in refused} == {"chain"}

    assert accepted == [per_minute, per_minute]
    for grown in growth:
        assert grown <= per_minute * PER_REPORT_BYTES, f"{grown / per_minute / KB:.1f} KB a report"
    # Their health counts (they read the chain), bounded by the registry: a row per step a minute.
    assert ProviderHealthMinute.objects.exclude(model="").values("minute").distinct().count() == 3
    assert ProviderHealthMinute.objects.exclude(model="").count() == 3 * 6


# --- the limits hold across the production server's worker processes --------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_limit_holds_across_the_web_server_s_worker_processes(
    subprocess_env: dict[str, str], read_token: str, tmp_path: Path
) -> None:
    if not Path(GRANIAN).exists():
        pytest.skip("needs granian in the virtualenv")
    import urllib.error
    import urllib.request

    limit = 4
    env = {key: value for key, value in subprocess_env.items() if not key.startswith("PROMETHEUS_")}
    env |= {"USAGE_REPORTS_PER_INSTANCE_PER_MINUTE": str(limit), "LOG_LEVEL": "ERROR"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        granian(port, workers=2),
        cwd=django_settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def send(method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, str | None]:
        headers |= {"Authorization": f"Bearer {read_token}", "Content-Type": "application/json"}
        req = urllib.request.Request(url + path, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as response:  # a new connection each
                return response.status, response.headers.get("Retry-After")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Retry-After")
        except OSError:
            return 0, None

    try:
        assert wait_for(lambda: send("GET", "/healthz")[0] == 200, 30), "the web server did not start"
        ident = {"X-Chain-Client": "checkout/i1", "X-Chain-Applied-Version": "1"}
        assert send("GET", "/api/v1/chains/chat", **ident)[0] == 200
        assert wait_for(lambda: FleetInstance.objects.filter(client="checkout/i1").exists(), 10)
        # The reports below must fall in one minute: start with at least 10 s of it left.
        assert wait_for(lambda: datetime.now(UTC).second < 50, 11)
        body = json.dumps(health_body("checkout/i1", [step("vendor_a", "large", {"served": 1})])).encode()
        answers = [send("POST", "/api/v1/chains/chat/usage", body) for _ in range(4 * limit)]
    finally:
        os.killpg(server.pid, 15)
        server.wait(10)

    statuses = [status for status, _ in answers]
    # Each worker counting for itself would have let up to twice the limit through.
    assert statuses == [202] * limit + [429] * (3 * limit), statuses
    assert all(wait is not None and 1 <= int(wait) <= 60 for status, wait in answers if status == 429)
    assert ProviderEvidence.objects.get().served == limit
