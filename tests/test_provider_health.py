"""Provider health from the fleet's usage reports: merged per minute, read over 5 minutes and
an hour, bounded in storage, in the API and in /metrics; bad reports refused whole; only from
instances that poll their chain."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client

from audit import provider_health
from audit.models import ProviderEvidence, ProviderHealthMinute, ProviderReporter, ProviderUsage, ReportWindow
from presets.models import Chain
from presets.selectors import active_presets
from tests.health_reports import BOUNDS, by_step, latency, report, step
from tests.metrics_text import value
from worker.tasks import prune_provider_health

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 30, 2, 0, 30, tzinfo=UTC)


def health_of(client: Client, chain: str = "chat") -> dict[str, Any]:
    response = client.get(f"/api/v1/chains/{chain}/health")
    assert response.status_code == 200, response.content
    return response.json()


def test_reports_from_many_instances_merge_into_rates_latency_and_instance_counts(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(4):
            response = report(
                reader,
                f"i{n}",
                [
                    step("vendor_a", "large", {"served": 5, "server_error": 5}, latency(b3=5)),
                    step("vendor_b", "large", {"served": 10, "rejected": 2}, latency(b1=9, b4=1)),
                ],
                breaker_openings={"vendor_a": 1},
            )
            assert response.status_code == 202, response.content

        document = health_of(reader)

    steps = by_step(document)
    head = steps["vendor_a/large"]
    assert head["recent"]["attempts"] == 40
    assert head["recent"]["error_rate"] == pytest.approx(0.5)
    assert head["recent"]["outcomes"] == {"served": 20, "server_error": 20}
    assert head["recent"]["p95_ms"] == 1000
    assert head["recent"]["breaker_openings"] == 4
    assert head["instances"] == 4
    assert head["summary"] == "vendor_a: 50.0 % errors (mostly 5xx), p95 1 s, 4 instances"
    second = steps["vendor_b/large"]
    # A rejected request (400/422) is the request's doing: neither an error nor an attempt.
    assert (second["recent"]["attempts"], second["recent"]["error_rate"]) == (40, 0.0)
    assert second["recent"]["outcomes"]["rejected"] == 8
    assert (second["recent"]["p50_ms"], second["recent"]["p95_ms"]) == (250, 2500)  # 4 of 40 above 1 s
    assert [s["provider"] for s in document["steps"]] == ["vendor_a", "vendor_b", "self_hosted"]  # live order
    # One row per step per minute, however many instances report.
    assert ProviderHealthMinute.objects.exclude(model="").count() == 2


def test_streams_show_their_time_to_first_chunk_and_interrupted_ones_count_as_errors(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            response = report(
                reader,
                f"i{n}",
                [
                    # 10 streams: 8 served (each its whole answer in 1..2.5 s), 2 broke midway;
                    # every one sent its first chunk, 9 within 250 ms.
                    step(
                        "vendor_a",
                        "large",
                        {"served": 8, "interrupted": 2},
                        latency(b4=8),
                        first_chunk=latency(b1=9, b3=1),
                    ),
                    step("vendor_b", "large", {"served": 10}, latency(b2=10)),  # complete(): no stream
                ],
            )
            assert response.status_code == 202, response.content
            assert response.json()["dropped"]["outcome_classes"] == 0  # a class this server knows

        document = health_of(reader)
        text = Client().get("/metrics").content.decode()

    assert "interrupted" in document["error_classes"]
    head = by_step(document)["vendor_a/large"]
    assert head["recent"]["outcomes"] == {"served": 24, "interrupted": 6}
    assert (head["recent"]["attempts"], head["recent"]["errors"]) == (30, 6)
    assert head["recent"]["error_rate"] == pytest.approx(0.2)
    assert (head["recent"]["p50_ms"], head["recent"]["p95_ms"]) == (2500, 2500)
    assert (head["recent"]["first_chunk_p50_ms"], head["recent"]["first_chunk_p95_ms"]) == (250, 1000)  # 3 of 30
    assert head["hour"]["first_chunk_p95_ms"] == 1000
    assert head["summary"] == (
        "vendor_a: 20.0 % errors (mostly interrupted streams), p95 2.5 s, first chunk p95 1 s, 3 instances"
    )
    # Nothing streamed on vendor_b: no time to a first chunk, and its line says none.
    second = by_step(document)["vendor_b/large"]
    assert (second["recent"]["first_chunk_p50_ms"], second["recent"]["first_chunk_p95_ms"]) == (None, None)
    assert second["summary"] == "vendor_b: 0.0 % errors, p95 500 ms, 3 instances"
    row = ProviderHealthMinute.objects.get(provider="vendor_a", model="large")
    assert (row.interrupted, row.first_chunk_1, row.first_chunk_3) == (6, 27, 3)
    labels = {"chain": "chat", "provider": "vendor_a", "model": "large"}
    assert value(text, "controlplane_provider_attempts_5m", {**labels, "outcome": "interrupted"}) == 6
    assert value(text, "controlplane_provider_error_ratio_5m", labels) == 0.2


def test_a_report_without_first_chunk_times_is_accepted_as_before_and_merges_with_streams(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        older = report(reader, "i1", [step("vendor_a", "large", {"served": 10, "timeout": 2}, latency(b3=10))])
        before = by_step(health_of(reader))["vendor_a/large"]
        newer = report(
            reader, "i2", [step("vendor_a", "large", {"served": 4}, latency(b4=4), first_chunk=latency(b2=4))]
        )
        after = by_step(health_of(reader))["vendor_a/large"]

    assert (older.status_code, newer.status_code) == (202, 202)
    assert before["recent"]["outcomes"] == {"served": 10, "timeout": 2}
    assert before["recent"]["first_chunk_p95_ms"] is None
    assert before["summary"] == "vendor_a: 16.7 % errors (mostly timeouts), p95 1 s, 1 instance"
    # One minute's row holds both: the first-chunk figures are the streams' alone.
    assert after["recent"]["outcomes"] == {"served": 14, "timeout": 2}
    assert (after["recent"]["first_chunk_p50_ms"], after["recent"]["first_chunk_p95_ms"]) == (500, 500)
    assert (
        after["summary"] == "vendor_a: 12.5 % errors (mostly timeouts), p95 2.5 s, first chunk p95 500 ms, 2 instances"
    )


def test_the_live_chain_s_steps_are_listed_even_before_any_report(reader: Client) -> None:
    document = health_of(reader)

    assert document["live"] == ["vendor_a/large", "vendor_b/large", "self_hosted/8b"]
    assert [f"{s['provider']}/{s['model']}" for s in document["steps"]] == document["live"]
    first = document["steps"][0]
    assert (first["recent"]["attempts"], first["recent"]["error_rate"], first["instances"]) == (0, None, 0)
    assert first["summary"] == "vendor_a: no attempts reported in the last 5 min (0 instances)"
    assert "server_error" in document["error_classes"] and "rejected" not in document["error_classes"]


def test_the_recent_window_and_the_sparkline_follow_the_clock(reader: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        report(reader, "i1", [step("vendor_a", "large", {"served": 1, "timeout": 3})])
        clock.shift(timedelta(minutes=2))
        report(reader, "i1", [step("vendor_a", "large", {"served": 4})])
        now = health_of(reader)["steps"][0]
        clock.shift(timedelta(minutes=10))
        later = health_of(reader)["steps"][0]

    assert now["recent"]["error_rate"] == pytest.approx(3 / 8)
    assert now["sparkline"][-3:] == [0.75, None, 0.0]
    assert len(now["sparkline"]) == provider_health.SPARK_MINUTES
    assert later["recent"]["attempts"] == 0  # 10 minutes on: out of the 5-minute window
    assert later["hour"]["attempts"] == 8
    assert later["instances"] == 0


def test_instances_that_saw_their_credentials_rejected_are_counted(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            report(reader, f"i{n}", [step("vendor_a", "large", {"credentials": 2, "served": 1})])
        report(reader, "i9", [step("vendor_a", "large", {"served": 3})])
        head = by_step(health_of(reader))["vendor_a/large"]

    assert head["credential_failures_instances"] == 3
    assert head["instances"] == 4
    assert "mostly rejected credentials" in head["summary"]


@pytest.mark.slow
def test_storage_stays_within_the_window_over_three_simulated_days(reader: Client, settings) -> None:
    """Slow on purpose (432 reports through the API and 72 prunes): the bound only shows once
    the window has been passed more than once, a day and a half over it."""
    settings.PROVIDER_HEALTH_RETENTION_HOURS = 48
    with time_machine.travel(T0, tick=False) as clock:
        for tick in range(3 * 24 * 6):  # a report every 10 minutes for 3 days
            report(reader, f"i{tick % 3}", [step("vendor_a", "large", {"served": 1})])
            if tick % 6 == 5:  # the beat's prune, hourly here
                prune_provider_health()
            clock.shift(timedelta(minutes=10))
        oldest = ProviderHealthMinute.objects.order_by("minute").first()
        assert oldest is not None
        assert oldest.minute >= provider_health.minute_of(datetime.now(UTC) - timedelta(hours=49))
    # 48 h of one report per 10 minutes, plus the hour since the last prune.
    assert ProviderHealthMinute.objects.count() <= 49 * 6
    assert ProviderReporter.objects.count() == 3
    # The alerts' evidence: their 5-minute window, plus the hour since the last prune.
    assert ProviderEvidence.objects.count() <= 7
    assert ReportWindow.objects.count() <= 3 * 6  # the report limits' minutes since then


def test_the_prune_command_says_what_it_removed(reader: Client, settings) -> None:
    settings.PROVIDER_HEALTH_RETENTION_HOURS = 1
    with time_machine.travel(T0, tick=False) as clock:
        report(reader, "i1", [step("vendor_a", "large", {"served": 1})])
        clock.shift(timedelta(hours=2))
        out = io.StringIO()
        call_command("prune_provider_health", stdout=out)
    assert out.getvalue().strip() == "pruned 1 provider-health minute bucket(s)"
    assert not ProviderReporter.objects.exists()


@pytest.mark.parametrize(
    ("health", "fragment"),
    [
        ({"latency_bounds_ms": [1, 2], "steps": []}, "the histogram this control plane merges"),
        (
            {"latency_bounds_ms": BOUNDS, "steps": [step("vendor_a", "large", {f"c{n}": 1 for n in range(51)})]},
            "at most 50 outcome classes per step",
        ),
        ({"latency_bounds_ms": BOUNDS, "steps": [step("vendor_a", "large", {"served": -1})]}, "greater than or equal"),
        (
            {"latency_bounds_ms": BOUNDS, "steps": [{**step("vendor_a", "large", {}), "latency_ms": [1, 2]}]},
            "at least 9 elements",
        ),
        ({"latency_bounds_ms": BOUNDS, "steps": [step("vendor_a", "large", {})] * 51}, "no more than 50 elements"),
        (
            {"latency_bounds_ms": BOUNDS, "steps": [step("vendor_a", "large", {"served": 1}, first_chunk=[1, 2])]},
            "health.steps.0.first_chunk_ms: Ensure this field has at least 9 elements.",
        ),
        (
            {"latency_bounds_ms": BOUNDS, "steps": [step("vendor_a", "large", {"served": 1}, first_chunk=[0] * 10)]},
            "health.steps.0.first_chunk_ms: Ensure this field has no more than 9 elements.",
        ),
        (
            {
                "latency_bounds_ms": BOUNDS,
                "steps": [{**step("vendor_a", "large", {"served": 1}), "first_chunk_ms": None}],
            },
            "health.steps.0.first_chunk_ms: This field may not be null.",
        ),
    ],
    ids=[
        "other-bounds",
        "too-many-classes",
        "negative",
        "short-histogram",
        "too-many-steps",
        "short-first-chunk-histogram",
        "long-first-chunk-histogram",
        "null-first-chunk-histogram",
    ],
)
def test_a_bad_health_report_is_refused_whole_with_what_was_wrong(reader: Client, health, fragment: str) -> None:
    body = {
        "client": "checkout/i1",
        "providers": {"vendor_a": {"requests": 5, "last_served_at": "2026-11-30T02:00:00Z"}},
        "health": health,
    }
    response = reader.post("/api/v1/chains/chat/usage", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert fragment in response.content.decode()
    assert not ProviderUsage.objects.exists()  # nothing of the report was applied
    assert not ProviderHealthMinute.objects.exists()


def test_health_needs_a_token_and_a_known_chain(client: Client, reader: Client) -> None:
    assert client.get("/api/v1/chains/chat/health").status_code == 401
    assert reader.get("/api/v1/chains/nope/health").status_code == 404


def test_metrics_show_each_step_s_attempts_and_error_ratio(reader: Client) -> None:
    report(
        reader, "i1", [step("vendor_a", "large", {"served": 3, "rate_limited": 1})], breaker_openings={"vendor_a": 2}
    )

    text = Client().get("/metrics").content.decode()

    labels = {"chain": "chat", "provider": "vendor_a", "model": "large"}
    assert value(text, "controlplane_provider_attempts_5m", {**labels, "outcome": "rate_limited"}) == 1
    assert value(text, "controlplane_provider_error_ratio_5m", labels) == 0.25
    assert value(text, "controlplane_provider_breaker_openings_5m", {"chain": "chat", "provider": "vendor_a"}) == 2


def test_steps_reported_outside_the_live_chain_follow_it_worst_first(reader: Client) -> None:
    report(
        reader,
        "i1",
        [
            step("vendor_b", "small", {"served": 9, "timeout": 1}),
            step("self_hosted", "vision-11b", {"served": 1, "server_error": 1}),
        ],
    )

    names = [f"{s['provider']}/{s['model']}" for s in health_of(reader)["steps"]]

    assert names == ["vendor_a/large", "vendor_b/large", "self_hosted/8b", "self_hosted/vision-11b", "vendor_b/small"]


def test_a_step_over_the_threshold_with_enough_attempts_is_failing_now(reader: Client, settings) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    with time_machine.travel(T0, tick=False) as clock:
        report(reader, "i1", [step("vendor_a", "large", {"served": 10, "server_error": 9})])
        assert provider_health.failing_steps() == []  # 19 attempts: too few to judge
        report(reader, "i2", [step("vendor_a", "large", {"served": 8, "server_error": 2})])
        report(reader, "i3", [step("vendor_b", "large", {"served": 80, "timeout": 19})])
        (failing,) = provider_health.failing_steps()
        clock.shift(timedelta(minutes=settings.PROVIDER_FAILING_MINUTES + 1))
        assert provider_health.failing_steps() == []  # out of the window

    assert (failing.chain, failing.provider, failing.model, failing.worst) == (
        "chat",
        "vendor_a",
        "large",
        "server_error",
    )
    assert failing.error_rate == pytest.approx(11 / 29)
    assert (
        failing.describe()
        == "vendor_a/large on chat: 37.9 % errors (mostly 5xx) over the last 5 min, 11 of 29 attempts"
    )


def test_interrupted_streams_make_a_step_fail_now_like_any_error(reader: Client, settings) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    with time_machine.travel(T0, tick=False):
        report(
            reader,
            "i1",
            [step("vendor_a", "large", {"served": 15, "interrupted": 9, "timeout": 1}, first_chunk=latency(b1=24))],
        )
        (failing,) = provider_health.failing_steps()

    assert (failing.provider, failing.worst, failing.attempts, failing.errors) == ("vendor_a", "interrupted", 25, 10)
    assert failing.describe() == (
        "vendor_a/large on chat: 40.0 % errors (mostly interrupted streams) over the last 5 min, 10 of 25 attempts"
    )


def test_credential_failures_count_once_enough_instances_saw_them(reader: Client, settings) -> None:
    settings.PROVIDER_CREDENTIALS_INSTANCES = 3
    with time_machine.travel(T0, tick=False):
        for n in range(2):
            report(reader, f"i{n}", [step("vendor_a", "large", {"credentials": 1})])
        assert provider_health.alert_evidence().credentials == []
        report(reader, "i2", [step("vendor_a", "large", {"credentials": 4})])
        (failures,) = provider_health.alert_evidence().credentials

    assert (failures.chain, failures.provider) == ("chat", "vendor_a")
    assert failures.clients == ["checkout/i0", "checkout/i1", "checkout/i2"]
    assert failures.tokens == ["reader"]


def test_the_healthiest_reviewed_preset_is_suggested_only_when_the_live_head_fails(reader: Client) -> None:
    chain = Chain.objects.get(name="chat")
    presets = list(active_presets(chain=chain.pk).values())

    def suggest(live: str) -> provider_health.Suggestion | None:
        health = provider_health.health_by_step(chain, [preset.steps for preset in presets])
        return provider_health.healthiest_preset(presets, health, live=live)

    with time_machine.travel(T0, tick=False):
        assert suggest("normal") is None  # nothing known
        report(reader, "i1", [step("vendor_a", "large", {"served": 50, "server_error": 50})])
        # vendor_b unheard of: the only preset without vendor_a is local_only, marked degraded
        assert suggest("normal") == provider_health.Suggestion(
            "pin_secondary", "its head vendor_b: no attempts reported in the last 5 min (0 instances)"
        )
        report(reader, "i2", [step("vendor_b", "large", {"served": 100})])
        suggestion = suggest("normal")
        assert suggest("pin_secondary") is None

    assert suggestion is not None
    assert suggestion.preset == "pin_secondary"
    assert suggestion.reason == "its head vendor_b: 0.0 % errors, 1 instance"


def test_health_from_an_instance_that_has_not_read_the_chain_lately_is_dropped_and_counted(
    reader: Client, settings
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        response = report(reader, "i1", [step("vendor_a", "large", {"served": 2, "server_error": 40})], polled=False)
        assert response.status_code == 202, response.content
        assert response.json()["dropped"]["health"] == 1
        assert health_of(reader)["steps"][0]["recent"]["attempts"] == 0

        report(reader, "i2", [step("vendor_a", "large", {"served": 4})])  # it reads, then reports
        clock.shift(timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES + 1))
        late = report(reader, "i2", [step("vendor_a", "large", {"server_error": 40})], polled=False)
        head = by_step(health_of(reader))["vendor_a/large"]

    assert late.json()["dropped"]["health"] == 1  # it stopped reading the chain 11 minutes ago
    assert head["hour"]["outcomes"] == {"served": 4}
    assert ProviderReporter.objects.get().instance.client == "checkout/i2"  # no row for the unknown one
    assert ProviderUsage.objects.filter(client="checkout/i1").exists()  # its served counts are kept


def test_steps_providers_and_classes_the_registry_does_not_know_are_dropped_and_counted(reader: Client) -> None:
    with time_machine.travel(T0, tick=False):
        response = report(
            reader,
            "i1",
            [
                step("vendor_a", "large", {"served": 3, "server_error": 1, "exploded": 7, "melted": 1}),
                step("vendor_a", "huge", {"served": 1}),
                step("vendor_zzz", "large", {"served": 1}),
            ],
            breaker_openings={"vendor_a": 1, "vendor_zzz": 2},
        )
        steps = by_step(health_of(reader))

    assert response.status_code == 202, response.content
    assert response.json() == {
        "accepted": True,
        "dropped": {
            "providers": 1,  # vendor_zzz's served count
            "steps": 2,
            "outcome_classes": 2,
            "breaker_openings": 1,
            "rejections": 0,
            "health": 0,
            "drill": 0,
        },
    }
    assert steps["vendor_a/large"]["recent"]["outcomes"] == {"served": 3, "server_error": 1}
    assert steps["vendor_a/large"]["recent"]["breaker_openings"] == 1
    assert set(steps) == {"vendor_a/large", "vendor_b/large", "self_hosted/8b"}
    assert set(ProviderUsage.objects.values_list("provider", flat=True)) == {"vendor_a"}
    assert set(ProviderHealthMinute.objects.values_list("provider", flat=True)) == {"vendor_a"}
