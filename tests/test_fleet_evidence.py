"""The fleet's evidence is bounded by who sends it: instance rows capped per token, fleet reports
only from relay tokens and within a rate, usage reports only from tokens allowed to send them,
and page-level alerts and guard restores only on evidence from EVIDENCE_MIN_TOKENS tokens (or
one marked sole evidence). What is refused answers a plain 4xx and is counted in /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core.asgi import get_asgi_application
from django.test import Client
from django.utils import timezone

from audit import guards as weighing
from audit import provider_alerts
from audit.models import Alert, AlertKind, FleetInstance, RefusedEvidence
from audit.provider_health import StepReport, record_health
from presets import services
from presets.models import Chain, PinGuard, Selection
from presets.wire import LATENCY_BOUNDS_MS
from read_path.front import ReadFront
from tests.conftest import make_token
from tests.health_reports import report, step
from tests.test_guards import fleet  # the same made-up fleet, polling since an hour before T0

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, 30, tzinfo=UTC)
NOT_ENOUGH = "evidence from 1 token (svc-a); 2 needed or a token marked sole evidence"


def client_of(raw: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"})


def fleet_of(client: Client, chain: str = "chat") -> dict[str, Any]:
    answer = client.get("/api/v1/fleet")
    assert answer.status_code == 200, answer.content
    return next(item for item in answer.json()["chains"] if item["name"] == chain)


def metrics() -> str:
    return Client().get("/metrics").content.decode()


# --- instance rows: capped per token ------------------------------------------------------------


async def read(app: ReadFront, token: str, client: str) -> int:
    """One SDK read of chat through the read front, as ``client`` on v1."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/chains/chat",
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"x-chain-client", client.encode()),
            (b"x-chain-applied-version", b"1"),
        ],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    return statuses[0]


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_one_tokens_made_up_fleet_stays_at_its_cap_and_the_fleet_says_so(settings: Any) -> None:
    """10,000 reads through the real read front (in process: the ASGI app production runs, its
    plain-read path included; 10,000 HTTP round trips through granian would add minutes and
    test nothing more), each under a made-up X-Chain-Client of one token, then floods of
    POST /api/v1/fleet/seen: each token's rows stay at FLEET_MAX_INSTANCES_PER_TOKEN, the
    honest service's instances are all still counted, fleet reports from a read token answer
    403 and past the rate 429, and the fleet API and page say which token reached its cap."""
    settings.FLEET_MAX_INSTANCES_PER_TOKEN = 1_000
    settings.FLEET_SEEN_PER_TOKEN_PER_MINUTE = 3
    flood, honest, relay = make_token("flood", "read"), make_token("checkout", "read"), make_token("relay-eu", "relay")

    async def body(app: ReadFront) -> list[int]:
        statuses = [await read(app, honest, f"checkout/pod-{n}") for n in range(3)]
        statuses += [await read(app, flood, f"made-up/{n}") for n in range(10_000)]
        await app.flush_fleet()
        return statuses

    async def main() -> list[int]:
        app = ReadFront(get_asgi_application())
        try:
            return await body(app)
        finally:
            await app.stop()

    assert asyncio.run(main()) == [200] * 10_003
    rows = FleetInstance.objects.filter(token__name="flood")
    assert rows.count() == 1_000
    assert not rows.filter(client="made-up/0").exists()  # the least recently seen went first
    assert FleetInstance.objects.filter(token__name="checkout").count() == 3

    names = [{"chain": "chat", "client": f"relayed/{n}", "applied_version": "1"} for n in range(1_000)]
    relayed, refused = client_of(relay), client_of(flood)
    with time_machine.travel(timezone.now(), tick=False):
        answers = [
            relayed.post(
                "/api/v1/fleet/seen",
                {"instances": [{**item, "client": f"{item['client']}-{call}"} for item in names]},
                content_type="application/json",
            )
            for call in range(10)
        ]
        not_a_relay = refused.post("/api/v1/fleet/seen", {"instances": names[:1]}, content_type="application/json")
        fleet = fleet_of(relayed)  # flushes this process's noted instances

    assert [answer.status_code for answer in answers] == [202] * 3 + [429] * 7
    message = answers[3].json()["error"]["message"]
    assert message.startswith("too many fleet reports: at most 3 a minute per token (FLEET_SEEN_PER_TOKEN_PER_MINUTE)")
    assert 1 <= int(answers[3]["Retry-After"]) <= 60
    assert not_a_relay.status_code == 403
    assert not_a_relay.json()["error"]["message"] == (
        "fleet reports (POST /api/v1/fleet/seen) need a token with purpose relay; token 'flood' has purpose "
        "read. Make the relay its own: manage.py create_token NAME --purpose relay"
    )
    assert FleetInstance.objects.filter(token__name="relay-eu").count() == 1_000
    assert FleetInstance.objects.filter(token__name="checkout").count() == 3

    assert (fleet["instances"], fleet["capped_tokens"]) == (2_003, ["flood", "relay-eu"])
    assert fleet["summary"] == (
        "2003 of 2003 instances on v1; tokens flood, relay-eu reached the cap of 1000 instances "
        "(FLEET_MAX_INSTANCES_PER_TOKEN): the oldest are pruned, so these counts are partial"
    )
    oncall = Client()
    oncall.force_login(make_oncall())
    assert "tokens flood, relay-eu reached the cap of 1000 instances" in oncall.get("/chains/chat/").content.decode()
    counted = metrics()
    assert 'controlplane_evidence_refused_total{reason="instances_pruned",token="flood"} 9000.0' in counted
    assert 'controlplane_evidence_refused_total{reason="instances_pruned",token="relay-eu"} 2000.0' in counted
    assert 'controlplane_evidence_refused_total{reason="seen_too_many",token="relay-eu"} 7.0' in counted
    assert 'controlplane_evidence_refused_total{reason="seen_not_relay",token="flood"} 1.0' in counted


def make_oncall() -> Any:
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("carol", password="carol-pass-123")
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])
    return user


def test_a_relayed_instance_keeps_the_token_that_first_recorded_it(relay: Client, read_token: str) -> None:
    """A made-up name that is another service's instance refreshes its row but never moves it
    under the sender's cap, to be pruned there."""
    identity = {"X-Chain-Client": "checkout/pod-1", "X-Chain-Applied-Version": "1"}
    assert client_of(read_token).get("/api/v1/chains/chat", headers=identity).status_code == 200
    seen = [{"chain": "chat", "client": "checkout/pod-1", "applied_version": "1"}]
    assert relay.post("/api/v1/fleet/seen", {"instances": seen}, content_type="application/json").status_code == 202
    fleet_of(relay)
    assert list(FleetInstance.objects.values_list("client", "token__name")) == [("checkout/pod-1", "reader")]


def test_items_of_the_wrong_shape_are_dropped_and_the_others_taken(relay: Client) -> None:
    """Each item is checked as ``SeenSerializer`` says: strings, not blank, within their lengths,
    trimmed; what is not one is dropped and counted in the answer, the rest taken."""
    good = {"chain": "chat", "client": " checkout/pod-7 ", "applied_version": "1"}
    bad = [
        "not an object",
        {"chain": "chat", "client": "checkout/pod-8", "applied_version": 1},  # a number, not a string
        {"chain": "chat", "client": "", "applied_version": "1"},
        {"chain": "chat", "client": "checkout/" + "x" * 300, "applied_version": "1"},
        {"chain": "chat", "client": "checkout/pod-9", "applied_version": "12345678901"},
        {"chain": "chat", "client": "   ", "applied_version": "1"},  # blank once trimmed
        {"chain": "chat", "client": "checkout/pod-10"},
    ]
    answer = relay.post("/api/v1/fleet/seen", {"instances": [good, *bad]}, content_type="application/json")
    assert (answer.status_code, answer.json()) == (202, {"accepted": 1, "dropped": len(bad)})
    fleet_of(relay)
    assert list(FleetInstance.objects.values_list("client", "applied_version")) == [("checkout/pod-7", 1)]


@pytest.mark.django_db(transaction=True)
def test_a_relay_sends_an_instance_upstream_again_only_when_its_version_changes(
    live_server: Any, settings: Any, tmp_path: Any
) -> None:
    """A held long poll's client asks again at every change and every wait: a relay sends each
    instance upstream once, then again only on a new version (or a minute later). With two
    reports allowed a minute, the third flush, a new version, is still taken: the second (the
    same version again) sent nothing."""
    from relay.app import Relay
    from relay.config import from_env

    settings.FLEET_SEEN_PER_TOKEN_PER_MINUTE = 2
    raw = make_token("relay-dedupe", "relay")
    relay = Relay(from_env({"RELAY_UPSTREAM": live_server.url, "RELAY_TOKEN": raw, "RELAY_CACHE_DIR": str(tmp_path)}))

    async def three_flushes() -> None:
        try:
            for version in (b"1", b"1", b"2"):
                relay.seen[("chat", b"checkout/pod-1")] = version  # as a read notes it
                await relay._send_seen()  # the relay's flush, once a second
        finally:
            await relay.upstream.close()

    asyncio.run(three_flushes())
    from audit.fleet_recorder import recorder

    recorder.flush()
    assert FleetInstance.objects.get(client="checkout/pod-1").applied_version == 2
    assert not RefusedEvidence.objects.filter(token="relay-dedupe").exists()


def test_a_relay_holds_no_instance_that_could_never_be_an_identity(tmp_path: Any) -> None:
    """A service's headers are the relay's input: an X-Chain-Client or X-Chain-Applied-Version
    longer than the control plane takes (or no version) is never an identity, so the relay
    neither holds it until its flush nor sends it upstream; a flood of made-up header-long
    names would otherwise hold SEEN_MAX of them, kilobytes each."""
    from audit.models import MAX_CLIENT_LENGTH
    from http_api.fleet import SEEN_CHAIN_MAX, SEEN_VERSION_MAX
    from relay import app
    from relay.config import from_env

    assert (app.SEEN_CHAIN_MAX, app.SEEN_CLIENT_MAX, app.SEEN_VERSION_MAX) == (
        SEEN_CHAIN_MAX,
        MAX_CLIENT_LENGTH,
        SEEN_VERSION_MAX,
    )
    relay = app.Relay(
        from_env({"RELAY_UPSTREAM": "http://127.0.0.1:9", "RELAY_TOKEN": "cpt_x", "RELAY_CACHE_DIR": str(tmp_path)})
    )
    try:
        assert relay._note_seen("chat", b"checkout/pod-1", b"3")
        assert relay._note_seen("chat", b"c/" + b"x" * (MAX_CLIENT_LENGTH - 2), b"1234567890")  # the longest taken
        assert not relay._note_seen("chat", b"c/" + b"x" * 8000, b"3")
        assert not relay._note_seen("chat", b"checkout/pod-2", b"1" * (SEEN_VERSION_MAX + 1))
        assert not relay._note_seen("chat", b"checkout/pod-3", b"")
        assert not relay._note_seen("c" * 5000, b"checkout/pod-4", b"3")  # from a downstream relay's report
        assert sorted(client for _, client in relay.seen) == [b"c/" + b"x" * (MAX_CLIENT_LENGTH - 2), b"checkout/pod-1"]
    finally:
        asyncio.run(relay.upstream.close())


# --- refused with a clear 4xx, and counted ------------------------------------------------------


def test_a_relay_token_may_not_send_usage_reports_and_is_told_why(relay: Client) -> None:
    body = {"client": "relay/self", "providers": {}}
    answer = relay.post("/api/v1/chains/chat/usage", body, content_type="application/json")
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == (
        "token 'relay-eu' may not send usage reports (purpose relay: a relay forwards each service's report with "
        "the service's own token); send them with the service's token, one made with manage.py create_token NAME "
        "(without --no-reports)"
    )
    assert 'controlplane_evidence_refused_total{reason="reports_not_allowed",token="relay-eu"} 1.0' in metrics()


def test_a_service_token_made_without_reports_is_refused_and_one_with_them_is_taken() -> None:
    quiet, chatty = make_token("dashboards", "read", reports=False), make_token("checkout", "read")
    body = {"client": "checkout/pod-1", "providers": {}}
    assert client_of(quiet).post("/api/v1/chains/chat/usage", body, content_type="application/json").status_code == 403
    assert client_of(chatty).post("/api/v1/chains/chat/usage", body, content_type="application/json").status_code == 202
    assert RefusedEvidence.objects.get(token="dashboards").count == 1


# --- page-level alerts need enough tokens ------------------------------------------------------


@pytest.fixture
def thresholds(settings: Any) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    settings.PROVIDER_FAILING_MINUTES = 5
    settings.PROVIDER_CREDENTIALS_INSTANCES = 3
    settings.PROVIDER_ALERT_MIN_INSTANCES = 3
    settings.EVIDENCE_MIN_TOKENS = 2


def failing_reports(client: Client, prefix: str, count: int) -> None:
    """``count`` instances under ``client``'s token see vendor_a's large model fail (5xx and
    rejected credentials)."""
    for n in range(count):
        outcomes = {"served": 5, "server_error": 4, "credentials": 1}
        answer = report(client, f"{prefix}-{n}", [step("vendor_a", "large", outcomes)])
        assert answer.status_code == 202, answer.content


@pytest.mark.usefixtures("thresholds")
def test_one_tokens_made_up_instances_cannot_raise_a_page_level_alert_and_the_health_says_why(
    oncall: Client,
) -> None:
    svc_a = client_of(make_token("svc-a", "read"))
    with time_machine.travel(T0, tick=False):
        failing_reports(svc_a, "fake", 6)
        sweep = provider_alerts.sweep()
        health = svc_a.get("/api/v1/chains/chat/health").json()
        page = oncall.get("/alerts/").content.decode()

    assert sweep.raised == 0 and not Alert.objects.exists()
    assert health["held_alerts"] == [
        {
            "kind": "provider_failing",
            "subject": "vendor_a/large",
            "tokens": ["svc-a"],
            "why": f"provider_failing on vendor_a/large not raised: {NOT_ENOUGH}",
        },
        {
            "kind": "provider_credentials",
            "subject": "vendor_a",
            "tokens": ["svc-a"],
            "why": f"provider_credentials on vendor_a not raised: {NOT_ENOUGH}",
        },
    ]
    assert "Not raised: evidence from too few tokens" in page
    assert f"provider_failing on vendor_a/large not raised: {NOT_ENOUGH}" in page


@pytest.mark.usefixtures("thresholds")
def test_two_tokens_raise_it_and_it_names_them_and_counts_them() -> None:
    svc_a, svc_b = client_of(make_token("svc-a", "read")), client_of(make_token("svc-b", "read"))
    with time_machine.travel(T0, tick=False):
        failing_reports(svc_a, "a", 2)
        failing_reports(svc_b, "b", 2)
        assert provider_alerts.sweep().raised == 2
        health = svc_a.get("/api/v1/chains/chat/health").json()

    failing = Alert.objects.get(kind=AlertKind.PROVIDER_FAILING)
    assert (failing.details["tokens"], failing.details["token_count"]) == (["svc-a", "svc-b"], 2)
    assert failing.details["sole_evidence"] == []
    assert failing.message.endswith("(tokens svc-a, svc-b)")
    credentials = Alert.objects.get(kind=AlertKind.PROVIDER_CREDENTIALS)
    assert (credentials.details["tokens"], credentials.details["token_count"]) == (["svc-a", "svc-b"], 2)
    assert health["held_alerts"] == []


@pytest.mark.usefixtures("thresholds")
def test_one_token_marked_sole_evidence_raises_it_alone() -> None:
    only = client_of(make_token("svc-only", "read", sole_evidence=True))
    with time_machine.travel(T0, tick=False):
        failing_reports(only, "pod", 3)
        assert provider_alerts.sweep().raised == 2

    failing = Alert.objects.get(kind=AlertKind.PROVIDER_FAILING)
    assert (failing.details["tokens"], failing.details["sole_evidence"]) == (["svc-only"], ["svc-only"])


# --- guard restores need enough tokens ---------------------------------------------------------

OLD, NEW = ("vendor_a", "large"), ("vendor_b", "large")


@pytest.fixture
def clock() -> Iterator[Any]:
    with time_machine.travel(T0 - timedelta(minutes=10), tick=False) as traveller:
        yield traveller


def reports(instances: list[int], tokens: list[str], head: tuple[str, str], *, at: datetime, errors: int) -> None:
    """Each instance reports 10 attempts on ``head`` at ``at``, ``errors`` of them failed,
    with the tokens in turn."""
    histogram = tuple(10 if i == 2 else 0 for i in range(len(LATENCY_BOUNDS_MS) + 1))
    chain = Chain.objects.get(name="chat")
    for n, instance in enumerate(instances):
        record_health(
            chain=chain,
            instance=instance,
            token=tokens[n % len(tokens)],
            steps=[StepReport(head[0], head[1], {"served": 10 - errors, "server_error": errors}, histogram)],
            breaker_openings={},
            now=at,
        )


def guarded_pin_going_bad(clock: Any, tokens: list[str]) -> list[int]:
    """A guarded pin whose new head fails half its attempts for 8 minutes, by the reports of 4
    instances under ``tokens``, the beat weighing every 15 s; the guards that acted."""
    instances = fleet(4)
    for minutes in (8, 5, 2, 0):
        reports(instances, tokens, OLD, at=T0 - timedelta(minutes=minutes), errors=0)
    clock.move_to(T0)
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1", guard=True)
    acted: list[int] = []
    at = T0 + timedelta(seconds=15)
    while at <= T0 + timedelta(minutes=8):
        clock.move_to(at)
        reports(instances, tokens, NEW, at=at, errors=5)
        acted += weighing.check_guards(now=at).acted
        at += timedelta(seconds=15)
    return acted


def test_one_tokens_instances_cannot_move_a_guard_and_the_guard_says_why(
    clock: Any, settings: Any, reader: Client
) -> None:
    settings.EVIDENCE_MIN_TOKENS = 2
    make_token("svc-a", "read")
    assert guarded_pin_going_bad(clock, ["svc-a"]) == []
    assert Selection.objects.get(chain__name="chat").preset.name == "pin_secondary"
    guard = reader.get("/api/v1/chains/chat/guard").json()
    assert guard["state"] == "watching"
    assert guard["evidence"]["held"] == f"the guard does not act: {NOT_ENOUGH}"
    assert (guard["evidence"]["tokens"], guard["evidence"]["token_count"]) == (["svc-a"], 1)
    assert guard["summary"].endswith(f"; the guard does not act: {NOT_ENOUGH}")
    assert not Alert.objects.filter(kind=AlertKind.GUARD_RESTORED).exists()


@pytest.mark.parametrize(
    ("tokens", "sole"), [(["svc-a", "svc-b"], False), (["svc-only"], True)], ids=["two tokens", "one sole token"]
)
def test_two_tokens_or_one_marked_sole_evidence_move_it(
    clock: Any, settings: Any, reader: Client, tokens: list[str], sole: bool
) -> None:
    settings.EVIDENCE_MIN_TOKENS = 2
    for name in tokens:
        make_token(name, "read", sole_evidence=sole)
    (acted,) = guarded_pin_going_bad(clock, tokens)
    selection = Selection.objects.select_related("preset").get(chain__name="chat")
    assert (selection.preset.name, selection.updated_by) == ("normal", "system:guard")
    assert f"evidence from {len(tokens)} token" in selection.reason
    evidence = PinGuard.objects.get(pk=acted).evidence
    assert (evidence["tokens"], evidence["token_count"]) == (tokens, len(tokens))
    assert evidence["sole_evidence"] == (tokens if sole else [])
    assert "held" not in evidence
