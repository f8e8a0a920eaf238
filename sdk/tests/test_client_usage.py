"""Usage reports: requests served per provider and refused documents, batched to the control
plane, never lost when a report fails, and never in a caller's way."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from typing import Any

import pytest

import chainclient
from chainclient import RequestRejected, Router
from chainclient.client import MAX_REPORTED_REJECTIONS
from chainclient.testing import FakeChainClient, FakeProviders, fake_chain, fake_registry
from chainclient.usage import MAX_RETRY_AFTER_S

UTC_SECOND = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def served_totals(reports: list[Any]) -> dict[str, int]:
    """Requests per provider, added up over report bodies."""
    totals: Counter[str] = Counter()
    for body in reports:
        for provider, usage in body["providers"].items():
            totals[provider] += usage["requests"]
    return dict(totals)


def test_served_requests_arrive_batched_with_the_clients_identity(make_client, control_plane, eventually, document):
    control_plane.publish(document(3))
    client = make_client(service="checkout", instance="web-7", poll_interval=0.02, usage_interval=0.05).start()
    eventually(lambda: client.current().version == 3)
    for _ in range(3):
        client.record_served("vendor_a")
    client.record_served("vendor_b")

    eventually(lambda: control_plane.report_count() >= 1)
    # Several more intervals pass with nothing new: no further (empty) report is sent.
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 10)

    assert control_plane.report_count() == 1
    report = control_plane.reports[0]
    assert report.path == "/api/v1/chains/chat/usage"
    assert report.headers["Authorization"] == "Bearer s3cret"
    assert report.headers["X-Chain-Client"] == "checkout/web-7"
    assert report.headers["X-Chain-Applied-Version"] == "3"
    assert report.headers["Content-Type"] == "application/json"
    assert report.headers["User-Agent"].startswith(f"chainclient/{chainclient.__version__} ")
    body = report.body
    assert body["client"] == "checkout/web-7"
    assert body["applied_version"] == 3
    assert body["rejected"] == []
    assert {name: usage["requests"] for name, usage in body["providers"].items()} == {
        "vendor_a": 3,
        "vendor_b": 1,
    }
    for usage in body["providers"].values():
        assert UTC_SECOND.match(usage["last_served_at"])
    assert client.health()["unreported_requests"] == 0
    assert client.health()["last_usage_report_at"] is not None


FAILED_REPORTS = [
    ({"status": 503, "body": {"error": {"code": "unavailable", "message": "db down"}}}),
    ({"status": 500, "body": "<html>oops</html>"}),
    ({"status": 400, "body": {"error": {"code": "validation_error", "message": "bad"}}}),
    ({"status": 404}),
    ({"hang_up": True}),
    ({"hang": True}),
]


@pytest.mark.parametrize(
    "failure",
    FAILED_REPORTS,
    ids=["503", "500-html", "400", "no-endpoint", "connection-dropped", "timeout"],
)
def test_a_failed_report_keeps_its_counts_for_the_next_one(make_client, control_plane, eventually, failure):
    control_plane.always(304)
    control_plane.reply_usage(**failure)
    client = make_client(usage_interval=0.05, timeout=0.2)
    for _ in range(3):
        client.record_served("vendor_a")
    client.start()
    eventually(lambda: control_plane.report_count() >= 1)
    client.record_served("vendor_a")
    client.record_served("vendor_b")

    eventually(
        lambda: (
            served_totals(control_plane.accepted_reports())
            == {
                "vendor_a": 4,
                "vendor_b": 1,
            }
        )
    )

    assert served_totals([control_plane.reports[0].body]) == {"vendor_a": 3}
    assert control_plane.reports[0].accepted is False
    # The first accepted report carries the failed one's counts, merged.
    assert control_plane.accepted_reports()[0]["providers"]["vendor_a"]["requests"] >= 3
    eventually(lambda: client.health()["usage_report_failures"] == 0)  # the client read the 202


def test_report_failures_are_logged_once_per_outage(make_client, control_plane, eventually, caplog):
    caplog.set_level(logging.DEBUG, logger="chainclient")
    control_plane.always(304)
    control_plane.reply_usage(503, {"error": {"code": "unavailable", "message": "db down"}}, times=3)
    client = make_client(usage_interval=0.05)
    client.record_served("vendor_a")
    client.start()

    eventually(lambda: control_plane.accepted_reports())
    eventually(lambda: client.health()["usage_report_failures"] == 0)  # the client read the 202
    # The recovery line is written just after the count is reset: wait for it too.
    eventually(lambda: any("usage report accepted" in r.getMessage() for r in caplog.records))

    failed = [r for r in caplog.records if "usage report failed (" in r.getMessage()]
    recovered = [r for r in caplog.records if "usage report accepted" in r.getMessage()]
    assert len(failed) == 1
    assert failed[0].levelno == logging.WARNING
    assert "HTTP 503: db down" in failed[0].getMessage()
    assert len(recovered) == 1
    assert "after 3 failed attempts" in recovered[0].getMessage()
    assert served_totals(control_plane.accepted_reports()) == {"vendor_a": 1}


THROTTLED = {"error": {"code": "throttled", "message": "too many usage reports"}}


def test_a_429_holds_the_next_report_for_its_retry_after_and_keeps_the_counts(make_client, control_plane, eventually):
    control_plane.always(304)
    control_plane.reply_usage(429, THROTTLED, headers={"Retry-After": "1", "Content-Type": "application/json"})
    client = make_client(usage_interval=0.05)
    client.record_served("vendor_a")
    client.start()
    eventually(lambda: control_plane.report_count() >= 1)
    client.record_served("vendor_a")
    client.record_served("vendor_b")

    eventually(lambda: control_plane.accepted_reports(), timeout=5)

    refused, accepted = control_plane.reports[:2]
    assert refused.accepted is False
    # Every 0.05 s otherwise: the second report waited the second the control plane asked for.
    assert accepted.at - refused.at >= 1.0
    assert served_totals(control_plane.accepted_reports()) == {"vendor_a": 2, "vendor_b": 1}
    assert control_plane.report_count() == 2


def test_stop_sends_no_last_report_while_the_control_plane_asks_to_wait(make_client, control_plane, eventually):
    control_plane.always(304)
    control_plane.reply_usage(429, THROTTLED, headers={"Retry-After": "30", "Content-Type": "application/json"})
    client = make_client(usage_interval=0.05).start()
    client.record_served("vendor_a")
    eventually(lambda: control_plane.report_count() == 1)
    eventually(lambda: client.health()["usage_report_failures"] == 1)
    client.record_served("vendor_b")

    client.stop()

    assert control_plane.report_count() == 1  # it would be refused again
    assert client.health()["unreported_requests"] == 2  # kept, not dropped


def test_a_retry_after_is_honoured_for_ten_minutes_at_most(make_client, control_plane, eventually):
    control_plane.always(304)
    control_plane.reply_usage(429, THROTTLED, headers={"Retry-After": "86400", "Content-Type": "application/json"})
    client = make_client(usage_interval=0.05).start()
    client.record_served("vendor_a")

    eventually(lambda: client.health()["usage_report_failures"] == 1)

    # A proxy's mistake (a day) must not silence the reports for a day.
    held_for = client._usage._not_before - time.monotonic()
    assert MAX_RETRY_AFTER_S == 600
    assert 590 <= held_for <= 660


REFUSED = [
    ({"chain": [{"provider": "x", "model": "large", "timeout_ms": 20000}]}, 8, "chain[0]: unknown provider 'x'"),
    ({"updated_by": " "}, 8, "'updated_by' must not be blank"),
    ({"name": "billing"}, 8, "document is for chain 'billing'"),
]


@pytest.mark.parametrize(
    ("change", "version", "reason"), REFUSED, ids=["unknown-provider", "blank-author", "other-chain"]
)
def test_a_refused_document_is_reported_once_with_its_reason(
    make_client, control_plane, eventually, document, change, version, reason
):
    # The server sends the same bad document on every poll: it is one entry, not many.
    control_plane.always_document(document(version, **change))
    client = make_client(poll_interval=0.02, usage_interval=0.1)
    client.start()

    eventually(lambda: control_plane.report_count() >= 1)

    assert client.health()["rejected"] >= 2
    body = control_plane.reports[0].body
    assert body["providers"] == {}
    assert body["applied_version"] == 0
    assert [(r["version"], r["reason"]) for r in body["rejected"]] == [(version, reason)]
    assert UTC_SECOND.match(body["rejected"][0]["at"])


def test_a_document_that_is_not_json_is_reported_as_version_0(make_client, control_plane, eventually):
    control_plane.always(200, "{not json", headers={"ETag": '"5"'})
    make_client(usage_interval=0.1).start()

    eventually(lambda: control_plane.report_count() >= 1)

    [refusal] = control_plane.reports[0].body["rejected"]
    assert refusal["version"] == 0  # the control plane's field is a non-null integer
    assert refusal["reason"].startswith("not JSON")


def test_a_report_lists_at_most_the_newest_twenty_refused_documents(make_client, control_plane, eventually, document):
    for version in range(2, 27):
        control_plane.reply_document(document(version, reason=""))
    control_plane.always(304)
    client = make_client(poll_interval=0.01).start()  # reports only when stopped
    eventually(lambda: client.health()["rejected"] == 25)

    client.stop()

    [body] = control_plane.accepted_reports()
    assert MAX_REPORTED_REJECTIONS == 20
    assert [r["version"] for r in body["rejected"]] == list(range(7, 27))
    assert all(r["reason"] == "'reason' must not be blank" for r in body["rejected"])


def test_refusals_from_a_failed_report_are_merged_into_the_next(make_client, control_plane, eventually, document):
    control_plane.reply_document(document(8, updated_by=""))
    control_plane.reply_document(document(9, reason=""))
    control_plane.always(304)
    control_plane.reply_usage(503)
    client = make_client(usage_interval=0.05)
    client.start()

    eventually(lambda: control_plane.accepted_reports())

    refused = [r["version"] for body in control_plane.accepted_reports() for r in body["rejected"]]
    assert refused == [8, 9]


def test_nothing_happened_so_nothing_is_reported(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    client = make_client(poll_interval=0.02, usage_interval=0.02).start()
    eventually(lambda: client.current().version == 1)  # applying a change is not usage
    eventually(lambda: control_plane.count() >= 10)

    client.stop()

    assert control_plane.report_count() == 0


def test_stop_flushes_what_is_pending_and_returns_promptly(make_client, control_plane, eventually):
    control_plane.always(304)
    client = make_client().start()  # the default interval: a minute
    eventually(lambda: control_plane.count() >= 1)
    client.record_served("vendor_b")
    client.record_served("vendor_b")

    started = time.monotonic()
    client.stop()
    elapsed = time.monotonic() - started

    assert elapsed < 0.6
    assert [served_totals([body]) for body in control_plane.accepted_reports()] == [{"vendor_b": 2}]
    assert client.health()["unreported_requests"] == 0


def test_stop_stays_prompt_when_the_report_hangs_and_keeps_the_counts(make_client, control_plane, eventually):
    control_plane.always(304)
    control_plane.reply_usage(hang=True)
    client = make_client(timeout=30).start()
    client.record_served("vendor_a")

    started = time.monotonic()
    client.stop()
    elapsed = time.monotonic() - started

    assert elapsed < 0.6
    assert control_plane.report_count() == 1
    eventually(lambda: client.health()["unreported_requests"] == 1)

    client.start()
    client.stop()

    assert served_totals(control_plane.accepted_reports()) == {"vendor_a": 1}


def test_stop_returns_promptly_when_the_control_plane_is_down(make_client, refused_url):
    client = make_client(base_url=refused_url, timeout=30).start()
    client.record_served("vendor_a")

    started = time.monotonic()
    client.stop()

    assert time.monotonic() - started < 0.6
    assert client.health()["unreported_requests"] == 1


def test_record_served_is_exact_under_concurrent_callers_and_reports(make_client, control_plane, eventually):
    control_plane.always(304)
    client = make_client(usage_interval=0.01).start()
    threads, minimum = 8, 5_000
    calls = [0] * threads

    def serve(index: int) -> None:
        # Keep recording until several reports were taken meanwhile, so the two race.
        while calls[index] < minimum or control_plane.report_count() < 3:
            client.record_served("vendor_a" if calls[index] % 2 else "vendor_b")
            calls[index] += 1

    workers = [threading.Thread(target=serve, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    client.stop()

    expected = Counter()
    for count in calls:
        expected["vendor_b"] += (count + 1) // 2
        expected["vendor_a"] += count // 2
    assert served_totals(control_plane.accepted_reports()) == dict(expected)
    assert control_plane.report_count() >= 3


def test_with_report_usage_off_nothing_is_counted_or_sent(make_client, control_plane, eventually, document):
    control_plane.reply_document(document(4, reason=""))
    control_plane.always(304)
    client = make_client(report_usage=False, poll_interval=0.02, usage_interval=0.02).start()
    client.record_served("vendor_a")
    eventually(lambda: client.health()["rejected"] == 1)
    eventually(lambda: control_plane.count() >= 10)

    client.stop()

    assert control_plane.report_count() == 0
    assert client.health()["unreported_requests"] == 0


def test_a_report_names_at_most_fifty_providers(make_client, control_plane):
    control_plane.always(304)
    client = make_client().start()
    for number in range(60):  # the control plane refuses a report naming more
        client.record_served(f"provider_{number}")

    client.stop()

    [body] = control_plane.accepted_reports()
    assert sorted(body["providers"]) == sorted(f"provider_{number}" for number in range(50))


def test_a_failed_report_merged_back_still_names_at_most_fifty_providers(make_client):
    client = make_client()
    usage = client._usage
    for number in range(40):
        client.record_served(f"old_{number}")
    with usage._lock:  # a report takes what was recorded ...
        taken, usage._served = usage._served, {}
    for number in range(40):  # ... more providers serve meanwhile ...
        client.record_served(f"new_{number}")

    usage._put_back(taken, [])  # ... and the report failed

    assert len(usage._served) == 50  # never a report the control plane would refuse forever
    assert all(f"old_{number}" in usage._served for number in range(40))  # the older batch first


@pytest.mark.parametrize("usage_interval", [0, -1, float("nan"), float("inf")], ids=["zero", "negative", "nan", "inf"])
def test_it_refuses_a_usage_interval_that_is_not_a_positive_number(make_client, usage_interval):
    with pytest.raises(ValueError, match="usage_interval"):
        make_client(usage_interval=usage_interval)


# --- the router tells its source who served each request -------------------------------


def test_a_routed_request_counts_for_the_provider_that_served_it(make_client, control_plane, eventually, registry):
    control_plane.always(304)
    client = make_client(usage_interval=0.05)  # default chain: vendor_a, vendor_b, self_hosted
    fakes = FakeProviders().configure({"vendor_a": 503, "vendor_b": "ok", "self_hosted": "ok"})
    router = Router(client, transports=fakes.transports, registry=registry)

    assert router.complete("hello").provider == "vendor_b"  # the head failed: fallback served
    fakes.ok("vendor_a")
    assert router.complete("hello").provider == "vendor_a"
    fakes.fail("vendor_a", 400)
    with pytest.raises(RequestRejected):
        router.complete("hello")  # nothing served, nothing counted
    assert client.health()["unreported_requests"] == 2
    client.start()

    eventually(
        lambda: (
            served_totals(control_plane.accepted_reports())
            == {
                "vendor_a": 1,
                "vendor_b": 1,
            }
        )
    )


def test_the_fake_chain_client_records_what_the_router_served():
    source = FakeChainClient(fake_chain())
    fakes = FakeProviders().configure({"alpha": 503, "beta": "ok", "gamma": "ok"})
    router = Router(source, transports=fakes.transports, registry=fake_registry(), breaker=None)

    router.complete("one")
    router.complete("two")
    fakes.fail("beta", 503)
    router.complete("three")

    assert source.served == {"beta": 2, "gamma": 1}


def test_a_source_whose_record_served_raises_does_not_cost_the_request_its_answer(caplog):
    class Broken(FakeChainClient):
        def record_served(self, provider: str) -> None:
            raise RuntimeError("accounting bug")

    fakes = FakeProviders().configure({"alpha": "ok"})
    router = Router(Broken(fake_chain()), transports=fakes.transports, registry=fake_registry())

    assert router.complete("hello").value == "answer from alpha"
    assert any("record_served('alpha') raised" in r.getMessage() for r in caplog.records)


def test_a_router_over_a_fixed_chain_needs_no_record_served():
    fakes = FakeProviders().configure({"alpha": "ok"})
    router = Router(fake_chain(), transports=fakes.transports, registry=fake_registry())

    assert router.complete("hello").provider == "alpha"
