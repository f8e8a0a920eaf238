"""Failover drills as a system: a live control plane, a real Celery worker with beat at the
configuration users run (``RUN_DRILLS_EVERY_SECONDS`` 5, ``DRILL_JUDGE_AFTER_SECONDS`` 15), and a
fleet of real clients whose vendors are fakes that count the requests they are called for.

- ``chat``, drilled for a minute (hop 1, ``server_error``, 10 %, the service ``fleet-a`` only),
  started through the API: Python instances (``Router.complete``, ``AsyncRouter.complete``,
  ``Router.stream``) and a TypeScript one, all ``fleet-a``, drill exactly 10 % of their requests
  (within 2 points each), vendor_a is never called for a drilled request, vendor_b serves every
  one, no request fails, breakers stay closed and every request not drilled is served by
  vendor_a first; the verdict is "passed" within 30 s of the end, and the report accounts for
  every instance: those that took part, an old client that polls the drill's document and
  reports nothing of it ("did not take part"); an instance of another service (``fleet-b``) on
  the same chain never drills. One ``fleet-a`` instance reaches the control plane through a
  proxy that goes silent 10 s into the drill: it stops injecting at the drill's end instant by
  itself.
- ``incident-summary``, drilled at the same time (hop 1, 25 %): its fallback (self_hosted) starts
  failing for real 15 s in; the drill is aborted within 15 s of that, ``drill_failed`` is
  raised, and its instances stop injecting within the usual propagation time. The two drills
  never touch each other's chain.

Slow by nature (about 90 s): a drill lasts at least a minute and is judged after its services'
last reports; both drills run at once to keep it to one minute.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.models import Alert, AlertKind
from chainclient import AsyncRouter, ChainClient, Provider, ProviderError, Registry, Router, RoutingError, Step
from chainclient.testing import FakeStream
from presets.models import Drill
from presets.registry import PROVIDERS
from tests.conftest import make_token
from tests.test_celery_worker import wait_for
from tests.test_database_faults import FreezableProxy
from tests.test_typescript_client import REGISTRY as TS_REGISTRY
from tests.test_typescript_client import Probe, built  # noqa: F401

pytestmark = pytest.mark.postgres

REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULTS = {
    "chat": [Step("vendor_a", "large", 20000), Step("vendor_b", "large", 20000), Step("self_hosted", "8b", 10000)],
    "incident-summary": [Step("vendor_a", "large", 30000), Step("self_hosted", "vision-11b", 30000)],
}
DRILL_TS = Path(__file__).parent / "ts_client" / "drill.mjs"
VERDICT_BOUND_S = 30.0  # the bar: the verdict within 30 s of the drill's end
ABORT_BOUND_S = 15.0  # the bar: a failing fallback aborts the drill within 15 s
PROPAGATION_S = 3.0  # an abort reaches every long-polling instance within this


class Fakes:
    """One instance's vendors: each records the requests it was called for; a failing one
    answers HTTP 503."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.called: dict[str, set[str]] = defaultdict(set)
        self.failing: set[str] = set()

    def _call(self, provider: str, request: str) -> str:
        with self._lock:
            self.called[provider].add(request)
        if provider in self.failing:
            raise ProviderError(503, True, f"{provider} overloaded")
        return f"{provider}:{request}"

    def complete(self, provider: str) -> Any:
        return lambda step, request, timeout_s: self._call(provider, request)

    def complete_async(self, provider: str) -> Any:
        async def call(step: Step, request: Any, timeout_s: float) -> str:
            return self._call(provider, request)

        return call

    def stream(self, provider: str) -> Any:
        def open_stream(step: Step, request: Any, timeout_s: float) -> FakeStream:
            answer = self._call(provider, request)
            return FakeStream([answer, " done"], clock=None)

        return open_stream


class Instance:
    """A Python service instance routing a request every few milliseconds in a thread of its
    own, keeping for each: its number, when it started, the drill its receipt names (or None),
    the provider that served it (None: it failed for the caller)."""

    def __init__(self, url: str, token: str, chain: str, name: str, kind: str) -> None:
        self.kind, self.name = kind, name
        self.client = ChainClient(
            url,
            chain=chain,
            token=token,
            registry=REGISTRY,
            default=DEFAULTS[chain],
            service=f"drill-{kind}",
            instance=name,
            # The test's live server answers a long poll at once: every instance polls twice
            # a second instead, as fast as a long poll brings a change.
            long_poll=False,
            poll_interval=0.5,
            timeout=5.0,
            max_backoff=1.0,
        )
        self.fakes = Fakes()
        providers = list(REGISTRY)
        if kind == "async":
            self.router: Any = AsyncRouter(self.client, transports={p: self.fakes.complete_async(p) for p in providers})
        elif kind == "stream":
            self.router = Router(
                self.client,
                transports={p: self.fakes.complete(p) for p in providers},
                stream_transports={p: self.fakes.stream(p) for p in providers},
            )
        else:
            self.router = Router(self.client, transports={p: self.fakes.complete(p) for p in providers})
        self.requests: list[tuple[str, float, int | None, str | None]] = []
        self._routing = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"instance-{name}")

    def start(self) -> None:
        self.client.start()
        self._routing.set()
        self._thread.start()

    def stop(self) -> None:
        self._routing.clear()
        self._thread.join(10)
        self.client.stop(timeout=1.0)

    def _run(self) -> None:
        if self.kind == "async":
            asyncio.run(self._route_async())
            return
        number = 0
        while self._routing.is_set():
            request, number = f"{self.name}-{number}", number + 1
            at = time.time()
            try:
                if self.kind == "stream":
                    with self.router.stream(request) as stream:
                        list(stream)
                    result = stream
                else:
                    result = self.router.complete(request)
                self._keep(request, at, result.receipt, result.provider)
            except RoutingError as error:
                self._keep(request, at, error.receipt, None)
            time.sleep(0.01)

    async def _route_async(self) -> None:
        number = 0
        while self._routing.is_set():
            request, number = f"{self.name}-{number}", number + 1
            at = time.time()
            try:
                result = await self.router.complete(request)
                self._keep(request, at, result.receipt, result.provider)
            except RoutingError as error:
                self._keep(request, at, error.receipt, None)
            await asyncio.sleep(0.01)

    def _keep(self, request: str, at: float, receipt: Any, provider: str | None) -> None:
        drill = next((a.drill for a in receipt.attempts if a.drill is not None), None)
        self.requests.append((request, at, drill, provider))

    def status(self) -> dict[str, Any]:
        document = self.client.current()
        return {
            "version": document.version,
            "drill": document.drill.id if document.drill is not None else None,
            "requests": list(self.requests),
            "called": {p: sorted(c) for p, c in self.fakes.called.items()},
        }


class TypeScriptInstance(Probe):
    """tests/ts_client/drill.mjs: a TypeScript service instance, driven line by line."""

    kind = "typescript"

    def __init__(self, url: str, token: str, name: str) -> None:
        self.name = name
        # Its compiled-in default is chat's order, as the Python instances': every request not
        # drilled is vendor_a's from the first one on.
        default = [step.to_json() for step in DEFAULTS["chat"]]
        self.start(["node", str(DRILL_TS), url, token, json.dumps(TS_REGISTRY), json.dumps(default), name])

    def status(self) -> dict[str, Any]:
        return self.ask("status")

    def fail(self, provider: str) -> None:
        self.ask(f"fail {provider}")


class OldClient:
    """A client from before drills: it polls its chain with the SDK's identity headers and
    never sends a usage report."""

    def __init__(self, url: str, token: str, name: str) -> None:
        self.url, self.token, self.name = f"{url}/api/v1/chains/chat", token, name
        self.version = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            request = urllib.request.Request(
                self.url,
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "X-Chain-Client": f"legacy/{self.name}",
                    "X-Chain-Applied-Version": str(self.version),
                },
            )
            with urllib.request.urlopen(request, timeout=5) as answer:
                self.version = json.loads(answer.read())["version"]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def in_window(requests: list[Any]) -> list[Any]:
    """The requests from the instance's first drilled one to its last."""
    drilled = [i for i, r in enumerate(requests) if r[2] is not None]
    return requests[drilled[0] : drilled[-1] + 1] if drilled else []


@pytest.fixture
def fleet(live_server: Any, synced: None, built: Path) -> Iterator[dict[str, Any]]:  # noqa: F811
    url = live_server.url
    fleet_a, fleet_b = make_token("fleet-a", "read"), make_token("fleet-b", "read")
    proxy = FreezableProxy(int(url.rsplit(":", 1)[1]))
    chat = [
        Instance(url, fleet_a, "chat", "sync-1", "sync"),
        Instance(url, fleet_a, "chat", "sync-2", "sync"),
        Instance(url, fleet_a, "chat", "async-1", "async"),
        Instance(url, fleet_a, "chat", "stream-1", "stream"),
    ]
    proxied = Instance(f"http://127.0.0.1:{proxy.port}", fleet_a, "chat", "proxied-1", "sync")
    other_service = Instance(url, fleet_b, "chat", "other-1", "sync")
    summary = [Instance(url, fleet_a, "incident-summary", f"summary-{n}", "sync") for n in (1, 2)]
    python = [*chat, proxied, other_service, *summary]
    for instance in python:
        instance.start()
    typescript = TypeScriptInstance(url, fleet_a, "ts-1")
    old = OldClient(url, fleet_a, "old-1")
    group = {
        "chat": chat,
        "proxied": proxied,
        "other_service": other_service,
        "summary": summary,
        "typescript": typescript,
        "old": old,
        "proxy": proxy,
        "write": make_token("drill-writer", "write"),
        "url": url,
    }
    try:
        assert wait_for(lambda: all(i.client.current().version == 1 for i in python) and old.version == 1, 15)
        yield group
    finally:
        proxy.thaw()
        old.stop()
        typescript.stop()
        for instance in python:
            instance.stop()
        proxy.close()


def start_over_the_api(url: str, token: str, chain: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/api/v1/chains/{chain}/drills",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201
        return json.loads(answer.read())


def test_a_drill_proves_the_order_on_live_traffic_and_a_failing_fallback_aborts_another(
    fleet: dict[str, Any], start_worker: Any
) -> None:
    log = start_worker()
    assert wait_for(lambda: "beat: Starting" in log.read_text() and "ready" in log.read_text(), 60), log.read_text()

    chat = start_over_the_api(
        fleet["url"],
        fleet["write"],
        "chat",
        {"hop": 1, "fault": "server_error", "share": 10, "services": ["fleet-a"], "minutes": 1, "reason": "system"},
    )
    summary = start_over_the_api(
        fleet["url"],
        fleet["write"],
        "incident-summary",
        {"hop": 1, "fault": "server_error", "share": 25, "minutes": 1, "reason": "system: its fallback will fail"},
    )
    drilled_chat, drilled_summary = Drill.objects.get(pk=chat["id"]), Drill.objects.get(pk=summary["id"])
    ends_at = drilled_chat.ends_at.timestamp()
    everyone = [*fleet["chat"], fleet["proxied"], *fleet["summary"]]
    assert wait_for(lambda: all(i.client.current().drill is not None for i in everyone), 5)
    # Held too (it polls on its own schedule), but not its service's drill.
    assert wait_for(lambda: fleet["other_service"].client.current().drill is not None, 5)

    # 10 s in, one instance's path to the control plane goes silent.
    time.sleep(max(0.0, drilled_chat.starts_at.timestamp() + 10 - time.time()))
    fleet["proxy"].freeze()

    # 15 s in, incident-summary's fallback fails for real: the drill is aborted within 15 s.
    time.sleep(max(0.0, drilled_chat.starts_at.timestamp() + 15 - time.time()))
    failing_since = time.time()
    for instance in fleet["summary"]:
        instance.fakes.failing.add("self_hosted")
    aborted = wait_for(lambda: Drill.objects.get(pk=summary["id"]).verdict == "aborted", ABORT_BOUND_S + 5)
    aborted_after = time.time() - failing_since
    print(f"\nfigures: drill_aborted_after_fallback_failed_s={aborted_after:.1f} (bar {ABORT_BOUND_S:.0f} s)")
    assert aborted and aborted_after <= ABORT_BOUND_S, Drill.objects.get(pk=summary["id"]).reasons
    drilled_summary.refresh_from_db()
    assert "failed for the caller" in drilled_summary.reasons[0]
    assert Alert.objects.filter(kind=AlertKind.DRILL_FAILED, subject=f"drill {summary['id']}").exists()
    assert wait_for(lambda: all(i.client.current().drill is None for i in fleet["summary"]), PROPAGATION_S)
    stopped_at = time.time()
    for instance in fleet["summary"]:
        late = [r for r in instance.requests if r[1] > stopped_at and r[2] is not None]
        assert not late, f"{instance.name} still drilled after the abort reached it"
        assert all(r[2] in (None, summary["id"]) for r in instance.requests)

    # chat's drill runs to its end and is judged "passed" within 30 s of it.
    judged = wait_for(lambda: Drill.objects.get(pk=chat["id"]).verdict != "running", ends_at - time.time() + 45)
    judged_after = time.time() - ends_at
    drilled_chat.refresh_from_db()
    print(f"figures: drill_verdict_after_its_end_s={judged_after:.1f} (bar {VERDICT_BOUND_S:.0f} s)")
    assert judged and drilled_chat.verdict == "passed", drilled_chat.reasons
    assert judged_after <= VERDICT_BOUND_S

    statuses = {i.name: (i.kind, i.status()) for i in fleet["chat"]}
    statuses["ts-1"] = ("typescript", fleet["typescript"].status())
    for name, (kind, status) in statuses.items():
        window = in_window(status["requests"])
        drilled = [r for r in window if r[2] is not None]
        share = 100 * len(drilled) / len(window)
        assert 8 <= share <= 12, f"{name} ({kind}) drilled {share:.1f} % of {len(window)} requests"
        assert all(r[2] == chat["id"] for r in drilled)
        assert not set(status["called"].get("vendor_a", ())) & {r[0] for r in drilled}, f"{name}: vendor_a called"
        assert all(r[3] == "vendor_b" for r in drilled), f"{name}: a drilled request not served by vendor_b"
        others = Counter(r[3] for r in status["requests"] if r[2] is None)
        assert set(others) == {"vendor_a"}, f"{name}: order changed: {others}"
        assert all(r[3] is not None for r in status["requests"]), f"{name}: a request failed for the caller"
    for instance in fleet["chat"]:
        assert set(instance.router.health()["breakers"].values()) == {"closed"}
    other = fleet["other_service"]
    assert other.requests and all(r[2] is None and r[3] == "vendor_a" for r in other.requests)
    proxied = fleet["proxied"]
    assert any(r[2] is not None for r in proxied.requests)
    assert not [r for r in proxied.requests if r[2] is not None and r[1] >= ends_at], "drilled past the end"
    assert any(r[1] >= ends_at for r in proxied.requests), "the proxied instance stopped routing"

    report = fleet_report(fleet["url"], fleet["write"], chat["id"])
    taking = {row["client"] for row in report["instances"]}
    assert taking == {f"drill-{i.kind}/{i.name}" for i in [*fleet["chat"], proxied]} | {"drill-ts/ts-1"}
    assert {m["client"] for m in report["not_taking_part"]} == {"legacy/old-1"}
    assert "drill-sync/other-1" not in taking | {m["client"] for m in report["not_polled"]}
    assert report["totals"]["failed"] == 0 and report["totals"]["ended_on"] == {"2": report["totals"]["drilled"]}
    assert report["verdict"] == "passed"


def fleet_report(url: str, token: str, drill: int) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/api/v1/drills/{drill}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())
