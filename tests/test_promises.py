"""The product's promises as systems: real processes, time passing, many clients at once.

Each test runs the production web process (granian ASGI, two workers) on a disposable
PostgreSQL cluster (``max_connections=100``) and drives it with real ``chainclient`` SDK
instances or plain HTTP clients. No Celery worker runs: expiry must hold without one.

- A pin's expiry reaches every long-polling service within 1 s of ``expires_at``, also with
  the control plane killed before it (the SDK switches to the document's default itself).
- Fleet status shows N of N instances on a new version within 2 s of the change.
- 64 concurrent clients mixing history reads, changes and page loads for 60 s get no 5xx,
  and PostgreSQL never holds more connections than processes x (pool + 1).
- A database restore: services report being ahead of the server until the epoch is raised,
  then follow the next change.

Figures are printed (pytest -s) and recorded in bench/README.md.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from chainclient import ChainClient, Provider, Registry, Router, Step
from chainclient.testing import FakeProviders
from presets.registry import PROVIDERS
from tests.servers import Stack, get, request, require_tools, running_stack, select, wait_for

REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
COMPILED_DEFAULT = [Step("self_hosted", "8b", 10000)]
POOL = 8
WORKERS = 2
# The bar is 1 s (DESIGN §13); the measured figures are printed and recorded.
EXPIRY_BOUND_S = 1.0
FLEET_BOUND_S = 2.0


@pytest.fixture(scope="module", autouse=True)
def _needs_the_tools() -> None:
    require_tools("system tests")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack("promises", workers=WORKERS, env={"DATABASE_POOL_MAX_SIZE": str(POOL)}) as stack:
        yield stack


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def live_document(stack: Stack, chain: str = "chat") -> dict:
    status, _, body = get(stack, f"/api/v1/chains/{chain}", token=stack.read_token)
    assert status == 200, body
    return json.loads(body)


def revert(stack: Stack, chain: str = "chat") -> None:
    status, _, body = request(
        stack, "POST", f"/api/v1/chains/{chain}/revert", token=stack.write_token, body={"reason": "system test: back"}
    )
    assert status in (200, 400), body  # 400: the default is live already


class Fleet:
    """``count`` real SDK instances of one service, long polling the stack."""

    def __init__(self, stack: Stack, service: str, count: int, **options: object) -> None:
        options = {"long_poll": True, "poll_interval": 1.0, "report_usage": False, "timeout": 5.0, **options}
        self.clients = [
            ChainClient(
                stack.url,
                chain="chat",
                token=stack.read_token,
                registry=REGISTRY,
                default=COMPILED_DEFAULT,
                service=service,
                instance=f"i{i:03d}",
                **options,
            )  # type: ignore[arg-type]
            for i in range(count)
        ]

    def __enter__(self) -> Fleet:
        for client in self.clients:
            client.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients:
            client.stop(timeout=0.1)

    def all_on(self, version: int, timeout: float = 20) -> bool:
        return wait_for(lambda: all(c.current().version == version for c in self.clients), timeout)

    def route_heads(self) -> Counter[str]:
        """The provider each instance's Router sends a request to now."""
        heads: Counter[str] = Counter()
        for client in self.clients:
            fakes = FakeProviders()
            fakes.configure({name: "ok" for name in PROVIDERS})
            router = Router(client, transports=fakes.transports, registry=REGISTRY)
            heads[router.complete("hello").provider] += 1
        return heads


# --- fleet convergence ------------------------------------------------------------------


def test_fleet_status_shows_every_long_polling_instance_on_a_change_within_2_s(stack: Stack) -> None:
    count = 40
    with Fleet(stack, "fleet", count) as fleet:
        version = live_document(stack)["version"]
        assert fleet.all_on(version)

        def on_version(expected: int) -> bool:
            status, _, body = get(stack, "/api/v1/fleet", token=stack.read_token)
            chat = next(c for c in json.loads(body)["chains"] if c["name"] == "chat")
            return status == 200 and chat["version"] == expected and chat["on_version"] == count

        assert wait_for(lambda: on_version(version), 10)
        status, _, body = select(stack, "chat", "pin_secondary")
        assert status == 200, body
        changed_at = time.monotonic()
        new_version = json.loads(body)["version"]
        assert wait_for(lambda: on_version(new_version), 10, every=0.05)
        took = time.monotonic() - changed_at
        print(f"\nfigures: fleet_instances={count} fleet_all_on_version_s={took:.2f}")
        assert took <= FLEET_BOUND_S
        revert(stack)


# --- expiry reaches every service ----------------------------------------------------------


def pin_expiring_in(stack: Stack, seconds: float) -> dict:
    expires_at = datetime.now(UTC) + timedelta(seconds=seconds)
    status, _, body = select(stack, "chat", "pin_secondary", expires_at=expires_at.isoformat())
    assert status == 200, body
    return json.loads(body)


def watch(fleet: Fleet, pin_version: int, *, until: float, revert: bool = True) -> tuple[list[float], list[float]]:
    """Sample every instance every 10 ms until ``until`` (Unix time): when each first served
    the default preset and, with ``revert``, when the server's revert (a later version)
    reached it. Each time is taken after the read, so it is never earlier than the event."""
    switched: list[float | None] = [None] * len(fleet.clients)
    reverted: list[float | None] = [None] * len(fleet.clients)
    while time.time() < until:
        for i, client in enumerate(fleet.clients):
            document = client.current()
            seen_by = time.time()
            if switched[i] is None and document.preset == "normal":
                switched[i] = seen_by
            if reverted[i] is None and document.version > pin_version:
                reverted[i] = seen_by
        time.sleep(0.01)
    assert None not in switched, "an instance never served the default"
    assert not revert or None not in reverted, "the server's revert never reached an instance"
    return ([at for at in switched if at is not None], [at for at in reverted if at is not None])


def test_a_pin_expiring_reaches_100_long_polling_services_within_1_s_without_a_worker(
    stack: Stack,
) -> None:
    with Fleet(stack, "expiry", 100) as fleet:
        assert fleet.all_on(live_document(stack)["version"])
        pin = pin_expiring_in(stack, 5)
        expires_at = parse_time(pin["expires_at"])
        assert fleet.all_on(pin["version"])
        assert fleet.route_heads() == Counter({"vendor_b": 100})  # the pin's head

        switched, revert_arrived = watch(fleet, pin["version"], until=expires_at + 3.0)

        assert min(switched) >= expires_at, "an instance left the pin before its expiry"
        late = max(switched) - expires_at
        served = max(revert_arrived) - expires_at
        print(
            f"\nfigures: expiry_instances=100 expiry_to_default_max_ms={late * 1000:.0f} "
            f"expiry_revert_served_max_ms={served * 1000:.0f}"
        )
        assert late <= EXPIRY_BOUND_S
        # The held long polls answer at the expiry with the revert (whoever writes it); a
        # noisy machine gets a second of slack on top of the bar.
        assert served <= EXPIRY_BOUND_S + 1.0
        assert fleet.route_heads() == Counter({"vendor_a": 100})  # the default's head
        assert all(c.current().source == "live" and c.health()["expired_pin"] is None for c in fleet.clients)
        document = live_document(stack)
        assert (document["version"], document["preset"]) == (pin["version"] + 1, "normal")


def test_a_pin_expiring_reaches_every_service_with_the_control_plane_killed_2_s_before(
    stack: Stack,
) -> None:
    try:
        with Fleet(stack, "expiry-down", 100) as fleet:
            assert fleet.all_on(live_document(stack)["version"])
            pin = pin_expiring_in(stack, 5)
            expires_at = parse_time(pin["expires_at"])
            assert fleet.all_on(pin["version"])
            while time.time() < expires_at - 2.0:
                time.sleep(0.01)
            stack.kill_web(signal.SIGKILL)

            switched, _ = watch(fleet, pin["version"], until=expires_at + 1.5, revert=False)
            assert min(switched) >= expires_at, "an instance left the pin before its expiry"
            late = max(switched) - expires_at
            print(f"\nfigures: expiry_down_to_default_max_ms={late * 1000:.0f}")
            assert late <= EXPIRY_BOUND_S
            assert fleet.route_heads() == Counter({"vendor_a": 100})
            health = fleet.clients[0].health()
            assert health["expired_pin"]["version"] == pin["version"]
            assert health["consecutive_failures"] >= 1  # it really could not reach the server
    finally:
        stack.start_web()


# --- bounded connections under a mixed load ------------------------------------------------

LOAD_CLIENTS = 64
LOAD_SECONDS = 60


def test_64_mixed_clients_for_60_s_get_no_5xx_and_connections_stay_bounded(stack: Stack) -> None:
    bound = WORKERS * (POOL + 1)  # docs/deploy.md: processes x (pool + 1 listener)
    stop = threading.Event()
    statuses: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    lock = threading.Lock()
    peak = [0]
    slowest: dict[str, float] = {}
    failed: list[tuple[str, str, int]] = []

    def count_connections() -> int:
        return int(
            stack.postgres.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            )
        )

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], count_connections())
            stop.wait(0.2)

    def client(i: int) -> None:
        chain = ("chat", "incident-summary")[i % 2]
        presets = {"chat": ("pin_secondary", "normal"), "incident-summary": ("local_only", "normal")}[chain]
        n = 0
        while not stop.is_set():
            n += 1
            kind = ("history", "page", "change")[i % 3]
            sent = time.monotonic()
            if kind == "history":
                path = f"/api/v1/chains/{chain}/history?limit=1"
                answer = request(stack, "GET", path, token=stack.read_token, timeout=30)
            elif kind == "page":
                path = "/" if n % 2 else f"/chains/{chain}/history/"
                answer = request(stack, "GET", path, session=True, timeout=30)
            else:
                path = f"/api/v1/chains/{chain}/select"
                answer = select(stack, chain, presets[n % 2])
            took = time.monotonic() - sent
            with lock:
                slowest[kind] = max(slowest.get(kind, 0.0), took)
                if answer[0] >= 500 or answer[0] == 0:
                    failed.append((kind, path, answer[0]))
                statuses[answer[0]] += 1
                kinds[kind] += 1

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(LOAD_CLIENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(LOAD_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(60)
    sampler.join(10)
    elapsed = time.monotonic() - started
    total = sum(statuses.values())
    print(
        f"\nfigures: load_clients={LOAD_CLIENTS} load_s={elapsed:.0f} load_requests={total} "
        f"load_rps={total / elapsed:.0f} load_5xx={sum(n for s, n in statuses.items() if s >= 500)} "
        f"load_4xx={sum(n for s, n in statuses.items() if 400 <= s < 500)} "
        f"peak_connections={peak[0]} connection_bound={bound}"
    )
    print(f"load detail: statuses={dict(statuses)} kinds={dict(kinds)}")
    print("load slowest_ms: " + " ".join(f"{kind}={took * 1000:.0f}" for kind, took in sorted(slowest.items())))
    assert total > LOAD_CLIENTS
    # On a failure, what the web process said of each (which wait ran out, and where).
    said = [line for line in (stack.root / "web.log").read_text(errors="replace").splitlines() if "unavailable" in line]
    assert not failed, f"{statuses}; failed requests {failed[:20]}; the web process: {said[-20:]}"
    assert peak[0] <= bound
    for chain in ("chat", "incident-summary"):
        revert(stack, chain)


# --- a database restore ------------------------------------------------------------------


def test_after_a_restore_services_report_being_ahead_then_follow_once_the_epoch_is_raised(
    stack: Stack,
) -> None:
    dump = stack.postgres.root / "snapshot.dump"
    count = 20
    with Fleet(
        stack,
        "restore",
        count,
        poll_interval=0.5,
        ahead_after_s=1.0,
        max_backoff=1.0,
        report_usage=True,
        usage_interval=1.0,
    ) as fleet:
        before = live_document(stack)
        assert fleet.all_on(before["version"])
        stack.postgres.run("pg_dump", "-Fc", "-f", dump, "postgres")
        for preset in ("pin_secondary", "drop_vendor_b", "local_only"):
            status, _, body = select(stack, "chat", preset)
            assert status == 200, body
        ahead_version = before["version"] + 3
        assert fleet.all_on(ahead_version)

        # The restore: the web process stops, the backup comes back, the web process starts.
        stack.kill_web()
        stack.postgres.run("pg_restore", "--clean", "--if-exists", "-d", "postgres", dump)
        stack.start_web()
        assert live_document(stack)["version"] == before["version"]

        # Before the epoch is raised: every instance keeps its version and says it is ahead.
        assert wait_for(lambda: all(c.health()["ahead_of_server"] for c in fleet.clients), 15)
        assert all(c.current().version == ahead_version for c in fleet.clients)
        ahead = fleet.clients[0].health()["ahead_of_server"]
        assert (ahead["server_version"], ahead["server_epoch"]) == (before["version"], 0)

        def fleet_says_ahead() -> bool:
            status, _, body = get(stack, "/api/v1/fleet", token=stack.read_token)
            chat = next(c for c in json.loads(body)["chains"] if c["name"] == "chat")
            return chat["ahead"] >= count and "ahead of the server" in chat["summary"]

        assert wait_for(fleet_says_ahead, 10)

        output = stack.manage("raise_epoch", "--reason", "restored from the nightly backup")
        assert "epoch raised from 0 to" in output
        epoch = live_document(stack)["epoch"]
        assert epoch > 0
        assert wait_for(
            lambda: all((c.current().epoch, c.current().version) == (epoch, before["version"]) for c in fleet.clients),
            15,
        )
        assert all(c.health()["ahead_of_server"] is None for c in fleet.clients)

        # And they follow the next change.
        status, _, body = select(stack, "chat", "pin_secondary")
        assert status == 200, body
        assert fleet.all_on(before["version"] + 1)
        assert {c.current().preset for c in fleet.clients} == {"pin_secondary"}
    revert(stack)
