"""Provider health from the fleet: the usage report's ``"health"`` key counts every attempt
by outcome class, the served ones' latencies in a fixed histogram, streamed attempts' time to
their first chunk in another, and breaker openings, per provider and model; bounded, merged
back when a report fails, off with reporting."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Any

import pytest

from chainclient import BreakerSettings, Router, RoutingError, Step
from chainclient.health import (
    LATENCY_BOUNDS_MS,
    OUTCOME_CLASSES,
    HealthCounts,
    HealthTally,
    latency_bucket,
    outcome_class,
)
from chainclient.receipts import Attempt
from chainclient.testing import FakeClock, FakeProviders

PROVIDERS = ("vendor_a", "vendor_b", "self_hosted")  # the conftest registry's
BOUNDS = [100, 250, 500, 1000, 2500, 5000, 10000, 30000]
GENEROUS_S = 30.0


def attempt(
    provider: str = "vendor_a",
    model: str = "large",
    outcome: Any = "ok",
    status: int | None = None,
    elapsed_s: float = 0.05,
    *,
    chunks: int | None = None,
    first_chunk_s: float | None = None,
    tokens: tuple[Any, Any] = (None, None),
) -> Attempt:
    return Attempt(
        task_id="t",
        attempt_id="t-1",
        provider=provider,
        model=model,
        dispatch="dispatched_known",
        outcome=outcome,
        status=status,
        elapsed_s=elapsed_s,
        timeout_s=20.0,
        reason="",
        chunks=chunks,
        first_chunk_s=first_chunk_s,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )


def latencies(**buckets: int) -> list[int]:
    """A histogram: ``latencies(b0=2, b8=1)`` counts 2 in the first bucket, 1 in the last."""
    histogram = [0] * (len(BOUNDS) + 1)
    for name, count in buckets.items():
        histogram[int(name[1:])] = count
    return histogram


def steps_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A report's health steps keyed ``provider/model``."""
    return {
        f"{step['provider']}/{step['model']}": {"outcomes": step["outcomes"], "latency_ms": step["latency_ms"]}
        for step in body["health"]["steps"]
    }


def health_totals(bodies: list[Any]) -> tuple[dict[str, Counter[str]], dict[str, list[int]], Counter[str]]:
    """Outcomes and latencies per ``provider/model``, and breaker openings, added up over
    report bodies (as the control plane merges them)."""
    outcomes: dict[str, Counter[str]] = {}
    histograms: dict[str, list[int]] = {}
    openings: Counter[str] = Counter()
    for body in bodies:
        health = body.get("health")
        if health is None:
            continue
        assert health["latency_bounds_ms"] == BOUNDS
        for key, step in steps_of(body).items():
            outcomes.setdefault(key, Counter()).update(step["outcomes"])
            histogram = histograms.setdefault(key, [0] * (len(BOUNDS) + 1))
            histograms[key] = [mine + theirs for mine, theirs in zip(histogram, step["latency_ms"], strict=True)]
        openings.update(health["breaker_openings"])
    return outcomes, histograms, openings


def routed(client: Any, registry: Any, clock: FakeClock, **options: Any) -> tuple[Router, FakeProviders]:
    """A Router over ``client`` (chain: vendor_a, vendor_b, self_hosted) and its fakes."""
    fakes = FakeProviders(clock, providers=PROVIDERS)
    options.setdefault("breaker", None)
    return Router(client, transports=fakes.transports, registry=registry, clock=clock, **options), fakes


# --- the classification and the histogram, as pure functions ----------------------------

CLASSES = [
    ("ok", None, "served"),
    ("rejected", 400, "rejected"),
    ("rejected", 422, "rejected"),
    ("failed", 401, "credentials"),
    ("failed", 403, "credentials"),
    ("failed", 429, "rate_limited"),
    ("failed", 500, "server_error"),
    ("failed", 502, "server_error"),
    ("failed", 503, "server_error"),
    ("failed", 504, "server_error"),
    ("failed", 529, "server_error"),
    ("failed", 599, "server_error"),
    ("timeout", None, "timeout"),
    ("failed", None, "unknown"),
    ("error", None, "unknown"),
    ("refused", None, "content_policy"),
    ("unavailable", None, "unavailable"),
    ("verify_failed", None, "verify_failed"),
    ("interrupted", None, "interrupted"),
    ("failed", 404, "other"),
    ("failed", 409, "other"),
    ("failed", 600, "other"),
    ("something_new", None, "other"),
]


@pytest.mark.parametrize(
    ("outcome", "status", "expected"),
    CLASSES,
    ids=[f"{outcome}-{status}" for outcome, status, _ in CLASSES],
)
def test_each_attempt_falls_in_one_outcome_class(outcome, status, expected):
    assert outcome_class(attempt(outcome=outcome, status=status)) == expected


def test_the_outcome_classes_are_the_contracts_in_its_order_and_the_table_covers_them_all():
    assert OUTCOME_CLASSES == (
        "served",
        "rejected",
        "credentials",
        "rate_limited",
        "server_error",
        "timeout",
        "unknown",
        "content_policy",
        "unavailable",
        "verify_failed",
        "interrupted",
        "other",
    )
    assert {expected for _, _, expected in CLASSES} == set(OUTCOME_CLASSES)


BUCKETS = [
    (0.0, 0),
    (0.1, 0),
    (0.1001, 1),
    (0.25, 1),
    (0.2501, 2),
    (0.5, 2),
    (1.0, 3),
    (2.5, 4),
    (5.0, 5),
    (10.0, 6),
    (30.0, 7),
    (30.001, 8),
    (3600.0, 8),
    (1000.1 - 1000.0, 0),  # 100.00000000002274 ms: clock noise, not a slower answer
]


@pytest.mark.parametrize(("elapsed_s", "bucket"), BUCKETS, ids=[f"{s!r}s" for s, _ in BUCKETS])
def test_a_latency_counts_in_the_bucket_whose_bound_it_does_not_exceed(elapsed_s, bucket):
    assert LATENCY_BOUNDS_MS == tuple(BOUNDS)
    assert latency_bucket(elapsed_s) == bucket


def test_the_tally_is_empty_after_a_take_and_a_put_back_adds_what_came_since():
    tally = HealthTally()
    tally.record(attempt(elapsed_s=0.2))
    tally.record_opening("vendor_a")
    taken = tally.take()
    assert tally.take().empty
    tally.record(attempt(elapsed_s=0.2))
    tally.record(attempt(outcome="failed", status=503))

    tally.put_back(taken)

    assert tally.take().body() == {
        "latency_bounds_ms": BOUNDS,
        "steps": [
            {
                "provider": "vendor_a",
                "model": "large",
                "outcomes": {"served": 2, "server_error": 1},
                "latency_ms": latencies(b1=2),
            }
        ],
        "breaker_openings": {"vendor_a": 1},
    }
    assert HealthCounts().body() is None


def test_streamed_attempts_count_their_time_to_first_chunk_whatever_their_outcome():
    tally = HealthTally()
    tally.record(attempt(elapsed_s=4.0, chunks=12, first_chunk_s=0.2))  # served, streamed
    tally.record(attempt(outcome="interrupted", elapsed_s=1.5, chunks=3, first_chunk_s=0.05))
    tally.record(attempt(outcome="interrupted", elapsed_s=40.0, chunks=1, first_chunk_s=31.0))
    tally.record(attempt(outcome="failed", status=503, chunks=0))  # broke before its first chunk
    tally.record(attempt(elapsed_s=0.3))  # complete(): no stream
    tally.record(attempt(provider="vendor_b", elapsed_s=0.3))

    body = tally.take().body()

    assert body is not None
    assert body["steps"] == [
        {
            "provider": "vendor_a",
            "model": "large",
            "outcomes": {"served": 2, "server_error": 1, "interrupted": 2},
            # Served latency counts the served attempts only, the streamed one's whole 4 s.
            "latency_ms": latencies(b2=1, b5=1),
            "first_chunk_ms": latencies(b0=1, b1=1, b8=1),
        },
        # A step that streamed nothing says nothing of first chunks: the body it always had.
        {"provider": "vendor_b", "model": "large", "outcomes": {"served": 1}, "latency_ms": latencies(b2=1)},
    ]


def test_a_put_back_adds_the_first_chunk_histograms_too():
    tally = HealthTally()
    tally.record(attempt(chunks=2, first_chunk_s=0.2))
    tally.record(attempt(provider="vendor_b"))
    taken = tally.take()
    tally.record(attempt(chunks=5, first_chunk_s=0.2))
    tally.record(attempt(outcome="interrupted", chunks=1, first_chunk_s=0.7))
    tally.record(attempt(provider="vendor_b", chunks=1, first_chunk_s=2.0))  # its first stream

    tally.put_back(taken)

    body = tally.take().body()
    assert body is not None
    assert {f"{s['provider']}/{s['model']}": (s["outcomes"], s.get("first_chunk_ms")) for s in body["steps"]} == {
        "vendor_a/large": ({"served": 2, "interrupted": 1}, latencies(b1=2, b3=1)),
        "vendor_b/large": ({"served": 2}, latencies(b4=1)),
    }


def test_tokens_are_summed_per_step_and_only_served_attempts_with_both_counts_are_known():
    tally = HealthTally()
    tally.record(attempt(tokens=(1000, 200)))
    tally.record(attempt(tokens=(500, None)))  # one count: in the sums, not a known request
    tally.record(attempt())  # no counts: unknown, the control plane's count of the rest
    tally.record(attempt(outcome="interrupted", chunks=3, first_chunk_s=0.2, tokens=(300, 40)))  # used, not served
    tally.record(attempt(provider="vendor_b"))  # never said tokens: no token keys
    taken = tally.take()
    tally.record(attempt(tokens=(10, 1)))
    tally.put_back(taken)

    body = tally.take().body()
    assert body is not None
    steps = {f"{s['provider']}/{s['model']}": s for s in body["steps"]}
    head = steps["vendor_a/large"]
    assert (head["input_tokens"], head["output_tokens"], head["served_with_tokens"]) == (1810, 241, 2)
    assert list(head)[-3:] == ["input_tokens", "output_tokens", "served_with_tokens"]
    assert not {"input_tokens", "output_tokens", "served_with_tokens"} & set(steps["vendor_b/large"])


# --- what the control plane receives ----------------------------------------------------

PATTERNS = [
    pytest.param(
        {},
        {"vendor_a": 0.3},
        {},
        {"vendor_a/large": ({"served": 2}, latencies(b2=2))},
        id="the-head-serves-in-300ms",
    ),
    pytest.param(
        {"vendor_a": 503},
        {},
        {},
        {
            "vendor_a/large": ({"server_error": 2}, latencies()),
            "vendor_b/large": ({"served": 2}, latencies(b0=2)),
        },
        id="a-503-then-the-second-serves",
    ),
    pytest.param(
        {"vendor_a": 502, "vendor_b": 504, "self_hosted": 529},
        {},
        {},
        {
            "vendor_a/large": ({"server_error": 2}, latencies()),
            "vendor_b/large": ({"server_error": 2}, latencies()),
            "self_hosted/8b": ({"server_error": 2}, latencies()),
        },
        id="gateway-errors-and-529-all-failed",
    ),
    pytest.param(
        {"vendor_a": 429, "vendor_b": 403},
        {},
        {},
        {
            "vendor_a/large": ({"rate_limited": 2}, latencies()),
            "vendor_b/large": ({"credentials": 2}, latencies()),
            "self_hosted/8b": ({"served": 2}, latencies(b0=2)),
        },
        id="rate-limited-and-credentials",
    ),
    pytest.param(
        {"vendor_a": "timeout", "vendor_b": "unavailable"},
        {},
        {},
        {
            "vendor_a/large": ({"timeout": 2}, latencies()),
            "vendor_b/large": ({"unavailable": 2}, latencies()),
            "self_hosted/8b": ({"served": 2}, latencies(b0=2)),
        },
        id="timeout-and-connection-refused",
    ),
    pytest.param(
        {"vendor_a": "unknown", "vendor_b": "error"},
        {},
        {},
        {
            "vendor_a/large": ({"unknown": 2}, latencies()),
            "vendor_b/large": ({"unknown": 2}, latencies()),
            "self_hosted/8b": ({"served": 2}, latencies(b0=2)),
        },
        id="no-status-back-and-a-transport-bug",
    ),
    pytest.param(
        {"vendor_a": 400},
        {},
        {},
        {"vendor_a/large": ({"rejected": 2}, latencies())},
        id="a-400-stops-the-request",
    ),
    pytest.param(
        {"vendor_a": "content_policy"},
        {},
        {},
        {"vendor_a/large": ({"content_policy": 2}, latencies())},
        id="a-content-policy-refusal",
    ),
    pytest.param(
        {"vendor_a": 404},
        {},
        {},
        {
            "vendor_a/large": ({"other": 2}, latencies()),
            "vendor_b/large": ({"served": 2}, latencies(b0=2)),
        },
        id="a-404-is-other",
    ),
    pytest.param(
        {},
        {"vendor_b": 1.5},
        {"verify": lambda value: value != "answer from vendor_a"},
        {
            "vendor_a/large": ({"verify_failed": 2}, latencies()),
            "vendor_b/large": ({"served": 2}, latencies(b4=2)),
        },
        id="an-answer-failing-verify",
    ),
]


@pytest.mark.parametrize(("specs", "answer_after_s", "options", "expected"), PATTERNS)
def test_the_report_counts_each_steps_attempts_by_class_with_served_latencies(
    make_client, control_plane, registry, specs, answer_after_s, options, expected
):
    control_plane.always(304)
    client = make_client().start()  # reports a minute apart: the one report is stop()'s
    clock = FakeClock()
    router, fakes = routed(client, registry, clock)
    fakes.configure(specs)
    for name, seconds in answer_after_s.items():
        fakes.ok(name, after_s=seconds)

    for _ in range(2):
        with contextlib.suppress(RoutingError):
            router.complete("hello", **options)
    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert body["health"]["latency_bounds_ms"] == BOUNDS
    assert body["health"]["breaker_openings"] == {}
    assert {key: (step["outcomes"], step["latency_ms"]) for key, step in steps_of(body).items()} == expected
    # The per-provider "providers" report is unchanged: who served how many requests.
    served = {key.split("/")[0]: outcomes["served"] for key, (outcomes, _) in expected.items() if "served" in outcomes}
    assert {provider: usage["requests"] for provider, usage in body["providers"].items()} == served


def test_the_health_key_is_exactly_the_contracts_shape(make_client, control_plane, registry):
    control_plane.always(304)
    client = make_client().start()
    clock = FakeClock()
    router, fakes = routed(client, registry, clock, breaker=BreakerSettings(failure_threshold=2))
    fakes.configure({"vendor_a": 503}).ok("vendor_b", after_s=45.0)  # its step allows 20 s
    router.complete("one")  # vendor_a fails, vendor_b times out, self_hosted serves
    fakes.ok("vendor_b", after_s=0.12)
    router.complete("two")  # vendor_a's second failure opens its breaker
    router.complete("three")  # vendor_a skipped: nothing attempted, nothing counted
    router.complete("four")

    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert body["health"] == {
        "latency_bounds_ms": [100, 250, 500, 1000, 2500, 5000, 10000, 30000],
        "steps": [
            {
                "provider": "vendor_a",
                "model": "large",
                "outcomes": {"server_error": 2},
                "latency_ms": [0, 0, 0, 0, 0, 0, 0, 0, 0],
            },
            {
                "provider": "vendor_b",
                "model": "large",
                "outcomes": {"served": 3, "timeout": 1},
                "latency_ms": [0, 3, 0, 0, 0, 0, 0, 0, 0],
            },
            {
                "provider": "self_hosted",
                "model": "8b",
                "outcomes": {"served": 1},
                "latency_ms": [1, 0, 0, 0, 0, 0, 0, 0, 0],
            },
        ],
        "breaker_openings": {"vendor_a": 1},
    }
    # Classes in OUTCOME_CLASSES order, whatever order they happened in.
    assert list(body["health"]["steps"][1]["outcomes"]) == ["served", "timeout"]


def test_every_latency_bucket_through_the_router(make_client, control_plane, registry):
    control_plane.always(304)
    client = make_client(default=[Step("vendor_a", "large", 60_000)]).start()
    clock = FakeClock()
    router, fakes = routed(client, registry, clock, deadline_s=120)

    for seconds in (0, 0.1, 0.1005, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 30.001, 45.0):
        fakes.ok("vendor_a", after_s=seconds)
        router.complete("hello")
    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert steps_of(body) == {"vendor_a/large": {"outcomes": {"served": 13}, "latency_ms": [2, 2, 1, 2, 1, 1, 1, 1, 2]}}


def test_nothing_recorded_means_no_health_key(make_client, control_plane):
    control_plane.always(304)
    client = make_client().start()
    client.record_served("vendor_a")  # served, without a router telling attempts

    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert "health" not in body
    assert body["providers"]["vendor_a"]["requests"] == 1


def test_a_failed_report_is_merged_into_the_next_and_counted_once(make_client, control_plane, registry, eventually):
    control_plane.always(304)
    control_plane.reply_usage(503, {"error": {"code": "unavailable", "message": "db down"}})
    client = make_client(usage_interval=0.05)
    clock = FakeClock()
    breaker = BreakerSettings(failure_threshold=1, cooldown_s=30.0)
    router, fakes = routed(client, registry, clock, breaker=breaker)
    fakes.configure({"vendor_a": 503}).ok("vendor_b", after_s=0.3)
    router.complete("before the failed report")  # vendor_a fails and its breaker opens
    client.start()
    eventually(lambda: control_plane.report_count() >= 1, timeout=GENEROUS_S)
    clock.advance(31.0)
    router.complete("after it")  # vendor_a's probe fails: its breaker opens again

    expected = (
        {"vendor_a/large": Counter(server_error=2), "vendor_b/large": Counter(served=2)},
        {"vendor_a/large": latencies(), "vendor_b/large": latencies(b2=2)},
        Counter(vendor_a=2),
    )
    eventually(lambda: health_totals(control_plane.accepted_reports()) == expected, timeout=GENEROUS_S)
    client.stop(timeout=GENEROUS_S)

    first = control_plane.reports[0]
    assert first.accepted is False
    assert steps_of(first.body) == {
        "vendor_a/large": {"outcomes": {"server_error": 1}, "latency_ms": latencies()},
        "vendor_b/large": {"outcomes": {"served": 1}, "latency_ms": latencies(b2=1)},
    }
    assert first.body["health"]["breaker_openings"] == {"vendor_a": 1}
    # Sent exactly once: nothing more arrived after the counts were whole.
    assert health_totals(control_plane.accepted_reports()) == expected


def test_attempts_are_exact_under_concurrent_callers_and_failing_reports(make_client, control_plane):
    control_plane.always(304)
    control_plane.reply_usage(503, times=3)
    client = make_client(usage_interval=0.01).start()
    threads, minimum = 8, 3_000
    calls = [0] * threads

    def record(index: int) -> None:
        # Keep recording until several reports (failed ones included) were taken meanwhile.
        while calls[index] < minimum or control_plane.report_count() < 6:
            client.record_attempt(attempt(outcome="ok" if calls[index] % 2 else "timeout", elapsed_s=0.3))
            calls[index] += 1

    workers = [threading.Thread(target=record, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    client.stop(timeout=GENEROUS_S)

    served = sum(count // 2 for count in calls)
    timeouts = sum((count + 1) // 2 for count in calls)
    outcomes, histograms, _ = health_totals(control_plane.accepted_reports())
    assert outcomes == {"vendor_a/large": Counter(served=served, timeout=timeouts)}
    assert histograms == {"vendor_a/large": latencies(b2=served)}


def test_a_report_names_at_most_fifty_steps_and_fifty_providers_with_openings(make_client, control_plane):
    control_plane.always(304)
    client = make_client().start()
    for number in range(60):  # the control plane refuses a report naming more
        client.record_attempt(attempt(provider=f"provider_{number}", model=f"model_{number}"))
        client.record_breaker_opened(f"provider_{number}")
    client.record_attempt(attempt(provider="provider_0", model="model_0"))  # a known key still counts
    client.record_breaker_opened("provider_0")

    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    steps = steps_of(body)
    assert list(steps) == [f"provider_{number}/model_{number}" for number in range(50)]
    assert steps["provider_0/model_0"]["outcomes"] == {"served": 2}
    assert body["health"]["breaker_openings"] == {f"provider_{number}": 2 if number == 0 else 1 for number in range(50)}


def test_merging_a_failed_report_back_keeps_the_caps(make_client, control_plane):
    control_plane.always(304)
    control_plane.reply_usage(503)
    client = make_client()
    for number in range(50):
        client.record_attempt(attempt(provider=f"old_{number}"))
        client.record_breaker_opened(f"old_{number}")
    client.start()
    client.stop(timeout=GENEROUS_S)  # its last report fails: the counts are put back
    for number in range(50):
        client.record_attempt(attempt(provider=f"new_{number}"))
        client.record_breaker_opened(f"new_{number}")
    client.record_attempt(attempt(provider="old_7"))

    client.start()
    client.stop(timeout=GENEROUS_S)

    failed, accepted = control_plane.reports
    assert failed.accepted is False and accepted.accepted is True
    steps = steps_of(accepted.body)
    # The older keys stay; the ones first seen past the cap are dropped, as at recording.
    assert list(steps) == [f"old_{number}/large" for number in range(50)]
    assert steps["old_7/large"]["outcomes"] == {"served": 2}
    assert accepted.body["health"]["breaker_openings"] == {f"old_{number}": 1 for number in range(50)}


def test_first_chunk_times_and_interruptions_reach_the_control_plane_and_survive_a_failed_report(
    make_client, control_plane
):
    control_plane.always(304)
    control_plane.reply_usage(503)
    client = make_client()
    client.record_attempt(attempt(chunks=4, first_chunk_s=0.4))
    client.start()
    client.stop(timeout=GENEROUS_S)  # its last report fails: the counts are put back
    client.record_attempt(attempt(outcome="interrupted", elapsed_s=2.0, chunks=2, first_chunk_s=0.45))

    client.start()
    client.stop(timeout=GENEROUS_S)

    failed, accepted = control_plane.reports
    assert failed.accepted is False and accepted.accepted is True
    assert failed.body["health"]["steps"][0]["first_chunk_ms"] == latencies(b2=1)
    assert accepted.body["health"]["steps"] == [
        {
            "provider": "vendor_a",
            "model": "large",
            "outcomes": {"served": 1, "interrupted": 1},
            "latency_ms": latencies(b0=1),
            "first_chunk_ms": latencies(b2=2),
        }
    ]


def test_breaker_openings_are_counted_per_provider(make_client, control_plane, registry):
    control_plane.always(304)
    client = make_client().start()
    clock = FakeClock()
    breaker = BreakerSettings(failure_threshold=2, window_s=60.0, cooldown_s=30.0)
    router, fakes = routed(client, registry, clock, breaker=breaker)
    fakes.configure({"vendor_a": 503, "vendor_b": 503})
    router.complete("one")
    router.complete("two")  # both open: closed -> open
    clock.advance(31.0)
    router.complete("three")  # both probes fail: half_open -> open
    clock.advance(31.0)
    fakes.ok("vendor_a")
    router.complete("four")  # vendor_a's probe succeeds and closes it: not an opening
    assert router.breaker_state("vendor_a") == "closed"
    assert router.breaker_state("vendor_b") == "open"

    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert body["health"]["breaker_openings"] == {"vendor_a": 2, "vendor_b": 2}


def test_with_report_usage_off_no_health_is_counted_or_sent(make_client, control_plane, registry, eventually):
    control_plane.always(304)
    client = make_client(report_usage=False, poll_interval=0.02, usage_interval=0.02)
    clock = FakeClock()
    router, fakes = routed(client, registry, clock, breaker=BreakerSettings(failure_threshold=1))
    fakes.configure({"vendor_a": 503})
    router.complete("hello")
    client.record_attempt(attempt())
    client.record_breaker_opened("vendor_b")
    client.start()
    eventually(lambda: control_plane.count() >= 10, timeout=GENEROUS_S)

    client.stop(timeout=GENEROUS_S)

    assert control_plane.report_count() == 0
    assert client._usage._health.take().empty  # not even counted in memory


def test_a_forked_child_starts_from_zero(make_client, control_plane, registry):
    control_plane.always(304)
    client = make_client()
    clock = FakeClock()
    router, fakes = routed(client, registry, clock, breaker=BreakerSettings(failure_threshold=1))
    fakes.configure({"vendor_a": 503})
    router.complete("in the parent")  # vendor_a fails (its breaker opens), vendor_b serves

    # What ChainClient.after_fork() does to the usage reporter in a forked child (the
    # fork tests cover that it is called there).
    client._usage.after_fork(client._endpoint)
    client.record_attempt(attempt(provider="self_hosted", model="8b", elapsed_s=0.6))
    client.start()
    client.stop(timeout=GENEROUS_S)

    [body] = control_plane.accepted_reports()
    assert steps_of(body) == {"self_hosted/8b": {"outcomes": {"served": 1}, "latency_ms": latencies(b3=1)}}
    assert body["health"]["breaker_openings"] == {}
