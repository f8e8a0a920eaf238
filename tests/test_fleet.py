"""Fleet status from the SDK's identity headers, and its usage reports."""

from __future__ import annotations

import random
import re
import statistics
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.fleet import fleet_statuses, idle_head_warning, live_versions
from audit.fleet_recorder import FleetRecorder
from audit.models import FleetInstance, RejectedVersion
from presets import services
from presets.models import Chain, Selection

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


# --- fleet status in SQL: the same figures as reading every instance ------------------------


def reference_status(selection: Selection, now: datetime) -> dict[str, Any]:
    """Fleet status as it was computed before the database did it: every live instance read
    into Python (the semantics the aggregates keep)."""
    cutoff = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    instances = [i for i in FleetInstance.objects.filter(chain=selection.chain) if i.last_seen_at >= cutoff]
    on_version = [i for i in instances if i.applied_version == selection.version]
    delays = sorted(
        (i.version_seen_at - selection.updated_at).total_seconds()
        for i in on_version
        if i.first_seen_at < selection.updated_at <= i.version_seen_at
    )
    return {
        "instances": len(instances),
        "on_version": len(on_version),
        "ahead": len([i for i in instances if i.applied_version > selection.version]),
        "applied_p50_s": round(statistics.median(delays), 3) if delays else None,
        "applied_max_s": round(delays[-1], 3) if delays else None,
    }


def add_fleet(selection: Selection, rng: random.Random, *, timed: int, now: datetime) -> None:
    """``timed`` instances whose apply delay counts, and around them every kind that must not
    count: gone past the TTL, started after the change, on the version since before it (a
    restored database), behind, ahead; and the boundaries (seen exactly at the TTL's edge,
    applied at the very instant of the change, started at it)."""
    changed = selection.updated_at
    ttl = timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    version = selection.version
    name = selection.chain.name
    rows: list[tuple[int, datetime, datetime, datetime]] = []  # version, version_seen, first_seen, last_seen

    def after(seconds: float) -> datetime:
        return changed + timedelta(microseconds=round(seconds * 1_000_000))

    for n in range(timed):
        seen = changed if n == 0 else after(rng.uniform(0.0004, 9.0))  # the first one at the instant itself
        last = now - ttl if n == 1 else now - timedelta(seconds=rng.uniform(0, 60))  # the second at the edge
        rows.append((version, seen, changed - timedelta(hours=rng.uniform(0.01, 5)), last))
    live = now - timedelta(seconds=5)
    rows += [
        (version, after(0.2), changed - timedelta(hours=1), now - ttl - timedelta(microseconds=1)),  # just gone
        (version, after(500), changed - timedelta(hours=1), now - timedelta(days=2)),  # long gone, slow
        (version, after(30), after(30), live),  # started after the change
        (version, changed, changed, live),  # started at the instant of the change
        (version, changed - timedelta(seconds=1), changed - timedelta(hours=1), live),  # on it before the change
        (max(version - 1, 0), changed - timedelta(hours=2), changed - timedelta(hours=3), live),  # behind
        (version + 7, after(1), changed - timedelta(hours=1), live),  # ahead
    ]
    FleetInstance.objects.bulk_create(
        FleetInstance(
            chain=selection.chain,
            client=f"{name}/i-{n:04d}",
            applied_version=applied,
            version_seen_at=seen,
            first_seen_at=first,
            last_seen_at=last,
        )
        for n, (applied, seen, first, last) in enumerate(rows)
    )


@pytest.mark.parametrize("timed", [0, 1, 2, 3, 4, 7, 10, 101], ids=lambda n: f"{n}-timed")
def test_fleet_status_from_the_database_equals_reading_every_instance(timed: int) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")  # v2
    now = timezone.now() + timedelta(minutes=3)
    selections = list(Selection.objects.select_related("chain"))
    rng = random.Random(timed)
    for number, selection in enumerate(selections):
        add_fleet(selection, rng, timed=timed + number, now=now)  # the chains' counts differ: odd and even at once
    statuses = fleet_statuses(selections, now)
    for number, selection in enumerate(selections):
        expected = reference_status(selection, now)
        assert {key: statuses[selection.chain_id][key] for key in expected} == expected, selection.chain.name
        assert (expected["instances"], expected["ahead"]) == (timed + number + 5, 1)
        assert (expected["applied_p50_s"] is None) == (timed + number == 0)
    assert [status["name"] for status in statuses.values()] == [s.chain.name for s in selections]


@pytest.mark.postgres
@pytest.mark.parametrize("timed", [1, 2, 5, 6, 250], ids=lambda n: f"{n}-timed")
def test_both_ways_of_reading_the_live_versions_agree(timed: int) -> None:
    """PostgreSQL's one statement (its ordered-set aggregate) and the ORM's queries SQLite
    runs (window functions) count the same instances and pick the same middle ones."""
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")  # v2
    now = timezone.now() + timedelta(minutes=3)
    rng = random.Random(timed)
    selections = list(Selection.objects.select_related("chain"))
    for number, selection in enumerate(selections):
        add_fleet(selection, rng, timed=timed + number, now=now)
    cutoff = now - timedelta(minutes=settings.FLEET_INSTANCE_TTL_MINUTES)
    counts, by_aggregate = live_versions(selections, cutoff, one_statement=True)
    counts_too, by_window = live_versions(selections, cutoff, one_statement=False)
    assert counts == counts_too
    assert sum(sum(versions.values()) for versions in counts.values()) < FleetInstance.objects.count()  # some gone
    assert by_aggregate.keys() == by_window.keys() == {s.chain_id for s in selections}
    timed_of = {s.chain_id: timed + number for number, s in enumerate(selections)}
    for chain, (middle, slowest) in by_window.items():
        assert len(middle) == 2 - timed_of[chain] % 2  # the middle two of an even count, one of an odd
        assert (set(by_aggregate[chain][0]), by_aggregate[chain][1]) == (set(middle), slowest)


def test_a_chain_without_instances_has_no_figures() -> None:
    (status,) = fleet_statuses(Selection.objects.select_related("chain").filter(chain__name="chat")).values()
    assert {k: status[k] for k in ("instances", "on_version", "ahead", "applied_p50_s", "applied_max_s")} == {
        "instances": 0,
        "on_version": 0,
        "ahead": 0,
        "applied_p50_s": None,
        "applied_max_s": None,
    }
    assert (status["detail"], status["detail_after"], status["rejected"], status["rejected_count"]) == ([], None, [], 0)
    assert fleet_statuses([]) == {}


# --- listing the instances: bounded, and the rest by keyset --------------------------------


def add_live(chain: str, count: int, *, start: int = 0, version: int = 1) -> list[str]:
    """``count`` instances of ``chain`` reading now, named so that they sort as numbered."""
    now = timezone.now()
    instances = [
        FleetInstance(
            chain=Chain.objects.get(name=chain),
            client=f"svc/{chain}-{n:05d}",
            applied_version=version,
            version_seen_at=now - timedelta(minutes=5),
            first_seen_at=now - timedelta(hours=1),
            last_seen_at=now,
        )
        for n in range(start, start + count)
    ]
    FleetInstance.objects.bulk_create(instances)
    return [i.client for i in instances]


def test_the_instances_endpoint_pages_through_the_live_instances_by_client(reader: Client) -> None:
    clients = add_live("chat", 250)
    add_live("incident-summary", 5)  # another chain's: never listed
    FleetInstance.objects.create(
        chain=Chain.objects.get(name="chat"),
        client="svc/chat-00100x",  # between two live ones, but gone
        applied_version=1,
        version_seen_at=timezone.now() - timedelta(days=3),
        first_seen_at=timezone.now() - timedelta(days=3),
        last_seen_at=timezone.now() - timedelta(days=2),
    )
    pages, url = [], "/api/v1/chains/chat/instances"
    while url:
        body = reader.get(url).json()
        assert (body["chain"], body["version"]) == ("chat", 1)
        pages.append([i["client"] for i in body["instances"]])
        url = f"/api/v1/chains/chat/instances?{urlencode({'after': body['after']})}" if body["after"] else ""
    assert [len(page) for page in pages] == [100, 100, 50]
    assert [client for page in pages for client in page] == clients
    small = reader.get("/api/v1/chains/chat/instances?limit=3&after=svc/chat-00247").json()
    assert ([i["client"] for i in small["instances"]], small["after"]) == (clients[248:], None)
    first = reader.get("/api/v1/chains/chat/instances?limit=2").json()
    assert first["after"] == clients[1]
    assert set(first["instances"][0]) == {"client", "applied_version", "version_seen_at", "last_seen_at"}


def test_the_fleet_lists_a_bounded_detail_and_says_where_the_rest_continues(reader: Client) -> None:
    clients = add_live("chat", 130)
    fleet = fleet_of(reader)
    assert (fleet["instances"], fleet["on_version"]) == (130, 130)
    assert [d["client"] for d in fleet["detail"]] == clients[:100]
    assert fleet["detail_after"] == clients[99]
    rest = reader.get(f"/api/v1/chains/chat/instances?after={fleet['detail_after']}").json()
    assert ([i["client"] for i in rest["instances"]], rest["after"]) == (clients[100:], None)
    few = next(c for c in reader.get("/api/v1/fleet?detail=5").json()["chains"] if c["name"] == "chat")
    assert ([d["client"] for d in few["detail"]], few["detail_after"]) == (clients[:5], clients[4])
    every = next(c for c in reader.get("/api/v1/fleet?detail=500").json()["chains"] if c["name"] == "chat")
    assert (len(every["detail"]), every["detail_after"]) == (130, None)
    # What the pages poll: the counts and the line, no instance.
    none = next(c for c in reader.get("/api/v1/fleet?detail=0").json()["chains"] if c["name"] == "chat")
    assert (none["detail"], none["detail_after"], none["summary"]) == ([], "", fleet["summary"])


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/chains/chat/instances?limit=0", "limit"),
        ("/api/v1/chains/chat/instances?limit=501", "limit"),
        ("/api/v1/chains/chat/instances?limit=ten", "limit"),
        ("/api/v1/chains/chat/instances?after=" + "a" * 201, "after"),
        ("/api/v1/chains/chat/instances?after=svc/a%0Ab", "after"),
        ("/api/v1/fleet?detail=-1", "detail"),
        ("/api/v1/fleet?detail=501", "detail"),
        ("/api/v1/fleet?detail=all", "detail"),
    ],
    ids=[
        "limit-0",
        "limit-501",
        "limit-word",
        "after-too-long",
        "after-newline",
        "detail-negative",
        "detail-501",
        "detail-word",
    ],
)
def test_a_bad_paging_parameter_is_a_400_naming_it(reader: Client, url: str, field: str) -> None:
    response = reader.get(url)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("validation_error", field)
    assert error["message"].startswith(f"{field}: ")


def test_the_instances_of_an_unknown_chain_are_a_404(reader: Client) -> None:
    response = reader.get("/api/v1/chains/nope/instances")
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")


def test_refusals_are_listed_newest_first_up_to_a_bound_and_counted_in_full(oncall: Client, reader: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")  # chat v2
    chat, summary = Chain.objects.get(name="chat"), Chain.objects.get(name="incident-summary")
    now = timezone.now()

    def refused(chain: Chain, version: int, count: int, prefix: str) -> None:
        RejectedVersion.objects.bulk_create(
            RejectedVersion(
                chain=chain,
                client=f"svc/{prefix}-{n:03d}",
                version=version,
                reason="unknown provider",
                at=now - timedelta(seconds=n),
            )
            for n in range(count)
        )

    refused(chat, 2, 130, "r")
    refused(chat, 1, 3, "old")  # chat's earlier version (incident-summary's live one): not chat's
    refused(summary, 2, 4, "other")  # chat's live version, another chain's: not chat's
    refused(summary, 1, 2, "is")
    fleet = fleet_of(reader)
    assert (len(fleet["rejected"]), fleet["rejected_count"]) == (100, 130)
    assert [r["client"] for r in fleet["rejected"]] == [f"svc/r-{n:03d}" for n in range(100)]
    assert fleet["summary"] == "no service instance has read this chain in the last 10 min"
    other = fleet_of(reader, "incident-summary")
    assert ([r["client"] for r in other["rejected"]], other["rejected_count"]) == (["svc/is-000", "svc/is-001"], 2)
    add_live("chat", 1, version=2)
    assert fleet_of(reader)["summary"] == "1 of 1 instances on v2; 130 refused it"
    assert "1 of 1 instances on v2; 130 refused it" in oncall.get("/").content.decode()  # the pages count them alike


# --- the pages: a few queries, whatever the fleet's size -------------------------------------


def query_count(client: Client, url: str) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200, url
    return len(captured), [q["sql"] for q in captured.captured_queries]


@pytest.mark.parametrize(
    "url", ["/", "/chains/chat/", "/api/v1/fleet", "/api/v1/fleet?detail=0", "/api/v1/chains/chat/instances"]
)
def test_the_query_count_does_not_grow_with_the_fleet(oncall: Client, url: str) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
    add_live("chat", 10, version=2)
    add_live("incident-summary", 3)
    few, _ = query_count(oncall, url)
    add_live("chat", 490, start=10, version=2)
    add_live("incident-summary", 200, start=3)
    assert query_count(oncall, url)[0] == few


def test_the_dashboard_reads_every_chains_fleet_in_two_queries(oncall: Client) -> None:
    add_live("chat", 3)
    _, queries = query_count(oncall, "/")
    fleet_queries = [q for q in queries if "audit_fleetinstance" in q or "audit_rejectedversion" in q]
    assert len(fleet_queries) == (2 if connection.vendor == "postgresql" else 3)  # SQLite counts apart


@pytest.mark.parametrize("url", ["/history/", "/history/?chain=chat", "/chains/chat/history/"])
def test_the_history_pages_read_no_fleet_status(oncall: Client, url: str) -> None:
    add_live("chat", 20)
    _, queries = query_count(oncall, url)
    assert not [q for q in queries if "audit_fleetinstance" in q or "audit_rejectedversion" in q]


def test_the_pages_poll_the_fleets_lines_without_its_instances(oncall: Client) -> None:
    add_live("chat", 150)
    html = oncall.get("/chains/chat/").content.decode()
    poll = re.search(r'data-fleet-url="([^"]+)"', html)
    assert poll and poll.group(1) == "/api/v1/fleet?detail=0"
    chat = next(c for c in oncall.get(poll.group(1)).json()["chains"] if c["name"] == "chat")
    assert (chat["detail"], chat["summary"]) == ([], "150 of 150 instances on v1")
    assert f'data-fleet="chat" aria-live="polite">{chat["summary"]}<' in html


def test_an_open_page_refreshes_its_fleet_line_from_the_counts_alone(open_page: Any, alice: Any) -> None:
    from playwright.sync_api import expect

    page = open_page(alice, "/chains/chat/", fake_clock=True)
    line = page.locator('[data-fleet="chat"]')
    expect(line).to_have_text("no service instance has read this chain in the last 10 min")
    polled: list[str] = []
    page.on("request", lambda request: polled.append(request.url) if "/api/v1/fleet" in request.url else None)
    add_live("chat", 2)
    page.clock.run_for(3_100)  # the page's fleet refresh (every 3 s)
    expect(line).to_have_text("2 of 2 instances on v1")
    assert polled and all(url.endswith("/api/v1/fleet?detail=0") for url in polled)


# --- a relay's fleet report -------------------------------------------------------------------


def test_a_relays_fleet_report_counts_the_instances_behind_it(relay: Client, reader: Client) -> None:
    """POST /api/v1/fleet/seen (what a relay sends once a second, with its relay token): each
    valid identity is noted as a read would note it; what is not one is dropped and counted,
    nothing else refused."""
    instances = [
        {"chain": "chat", "client": "behind-relay/pod-1", "applied_version": "1"},
        {"chain": "chat", "client": "no-slash", "applied_version": "1"},  # not an identity
        {"chain": "chat", "client": "behind-relay/pod-2", "applied_version": "x"},  # not a version
        {"chain": "chat", "client": 7},  # not even the shape
    ]
    answer = relay.post("/api/v1/fleet/seen", {"instances": instances}, content_type="application/json")
    assert answer.status_code == 202, answer.content
    assert answer.json() == {"accepted": 1, "dropped": 3}
    assert reader.get("/api/v1/fleet").status_code == 200  # flushes this process's reads
    assert list(FleetInstance.objects.values_list("client", "applied_version")) == [("behind-relay/pod-1", 1)]


def test_a_fleet_report_needs_a_service_token_and_its_shape(relay: Client, alice: Any) -> None:
    assert relay.post("/api/v1/fleet/seen", {"seen": []}, content_type="application/json").status_code == 400
    assert relay.post("/api/v1/fleet/seen", "[]", content_type="application/json").status_code == 400
    session = Client()
    session.force_login(alice)
    answer = session.post("/api/v1/fleet/seen", {"instances": []}, content_type="application/json")
    assert answer.status_code == 403
    assert Client().post("/api/v1/fleet/seen", {"instances": []}, content_type="application/json").status_code == 401
