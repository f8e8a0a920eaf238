"""What provider health costs the control plane: usage reports with a ``health`` section from
a simulated fleet, posted to the production web process (granian, 2 workers) on a scratch
PostgreSQL database.

Each report is what one chainclient 0.3.0 instance sends: served counts for 3 providers and
the health of 3 steps (attempts by class, a latency histogram). Reports cycle through
``--instances`` client names, as a fleet reporting every ``--interval`` seconds would; each
instance first reads the chain, as SDK instances do (health counts only from an instance fleet
status knows), and the usage-report limits are raised out of the way (this measures the cost
of reports the control plane takes, not its refusals).
Measured: the round trip per report over kept-alive loopback connections (``--connections``
at once), the server's CPU per report (the web processes' and PostgreSQL's, from /proc), and
the rows the health tables hold afterwards; from those, the CPU share and the rows per hour
a fleet of that size costs.

    python bench/provider_health_ingest.py [--reports 3000] [--instances 1000] [--interval 10]

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import cpu_seconds, free_port, granian, scratch_control_plane, start, stop, wait_until_up  # noqa: E402

BOUNDS = [100, 250, 500, 1000, 2500, 5000, 10000, 30000]


def report(instance: int, *, health: bool = True) -> bytes:
    def step(provider: str, model: str, errors: int) -> dict:
        outcomes = {"served": 20, "server_error": errors, "timeout": 1}
        return {"provider": provider, "model": model, "outcomes": outcomes, "latency_ms": [0, 2, 12, 5, 1, 0, 0, 0, 0]}

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {
        "client": client_of(instance),
        "applied_version": 1,
        "providers": {
            name: {"requests": 20, "last_served_at": now} for name in ("vendor_a", "vendor_b", "self_hosted")
        },
        "rejected": [],
    }
    if health:
        body["health"] = {
            "latency_bounds_ms": BOUNDS,
            "steps": [step("vendor_a", "large", 10), step("vendor_b", "large", 1), step("self_hosted", "8b", 0)],
            "breaker_openings": {},
        }
    return json.dumps(body).encode()


def tree(root: int) -> list[int]:
    """``root`` and its descendants (the granian workers)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in Path(f"/proc/{pid}/task").glob("*"):
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            todo.extend(int(child) for child in children)
    return found


def postgres_backends() -> list[int]:
    """Every process of the local PostgreSQL server (its backends do the queries)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() in {"postgres", "postmaster"}:
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between one instance's reports")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    # The whole run's reports fall in a minute or two: no limit of a real fleet's size applies.
    limits = {
        f"USAGE_REPORTS_PER_{per}_PER_MINUTE": str(most)
        for per, most in (("INSTANCE", 600), ("TOKEN", 10**6), ("CHAIN", 10**6))
    }
    with scratch_control_plane("bench_health", args.admin_url, **limits) as plane:
        token = plane.token("read")
        port = free_port()
        process = start(granian("controlplane.asgi:application", str(port)), plane.env)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            servers = tree(process.pid)
            poll_as_instances(port, token, args.instances, plane.database_url)
            runs = {}
            # The same reports without and with their health section, one after the other.
            for label, health in (("usage only", False), ("with health", True)):
                bodies = [report(n % args.instances, health=health) for n in range(args.reports)]
                runs[label] = measure(port, headers, bodies, servers, args.connections)
        finally:
            stop(process)

        import psycopg

        with psycopg.connect(plane.database_url) as db:
            buckets, minutes = db.execute(
                "SELECT count(*), count(DISTINCT minute) FROM audit_providerhealthminute"
            ).fetchone()
            reporters = db.execute("SELECT count(*) FROM audit_providerreporter").fetchone()[0]

    fleet_rate = args.instances / args.interval  # reports per second from the whole fleet
    for label, run in runs.items():
        print(
            f"{label:12} {run.reports} reports in {run.wall:.1f} s; p50 {run.p50:.1f} ms, p99 {run.p99:.1f} ms; "
            f"CPU {run.cpu_ms:.2f} ms/report (web {run.web_ms:.2f}, PostgreSQL {run.db_ms:.2f}); "
            f"{args.instances} instances every {args.interval:g} s: {fleet_rate * run.cpu_ms / 1000:.2f} cores"
        )
    plain, health = runs["usage only"], runs["with health"]
    print(f"rows: {buckets} minute buckets in {minutes} minute(s) (one per step and minute), {reporters} reporters")
    print(
        f"reports={health.reports} cpu_ms={health.cpu_ms:.2f} usage_only_cpu_ms={plain.cpu_ms:.2f} "
        f"health_ratio={health.cpu_ms / plain.cpu_ms:.2f} p50_ms={health.p50:.1f} "
        f"fleet_cores={fleet_rate * health.cpu_ms / 1000:.2f} buckets_per_hour={buckets / max(minutes, 1) * 60:.0f} "
        f"reporter_rows={reporters}"
    )


def poll_as_instances(port: int, token: str, instances: int, database_url: str) -> None:
    """Read the chain once as each instance, as an SDK instance does before it reports, and
    wait until fleet status knows them all (the web processes write reads once a second)."""
    import psycopg

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for instance in range(instances):
        identity = {"X-Chain-Client": client_of(instance), "X-Chain-Applied-Version": "1"}
        conn.request("GET", "/api/v1/chains/chat", headers={"Authorization": f"Bearer {token}", **identity})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"reading the chain as {client_of(instance)}: HTTP {response.status}")
    conn.close()
    deadline = time.monotonic() + 30
    with psycopg.connect(database_url) as db:
        while db.execute("SELECT count(*) FROM audit_fleetinstance").fetchone()[0] < instances:
            if time.monotonic() > deadline:
                raise SystemExit("fleet status did not record every instance's read within 30 s")
            time.sleep(0.2)


def client_of(instance: int) -> str:
    return f"bench/instance-{instance:04d}"


@dataclass
class Run:
    reports: int
    wall: float
    p50: float
    p99: float
    web_ms: float
    db_ms: float

    @property
    def cpu_ms(self) -> float:
        return self.web_ms + self.db_ms


def measure(port: int, headers: dict[str, str], bodies: list[bytes], servers: list[int], connections: int) -> Run:
    """Post ``bodies`` over ``connections`` kept-alive connections; time and CPU per report."""
    timings: list[float] = []
    failures: list[int] = []
    lock = threading.Lock()

    def send(share: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for body in share:
            started = time.perf_counter()
            conn.request("POST", "/api/v1/chains/chat/usage", body, headers)
            response = conn.getresponse()
            response.read()
            with lock:
                timings.append((time.perf_counter() - started) * 1000)
                if response.status != 202:
                    failures.append(response.status)

    send(bodies[:50])  # warm up the workers' connections and caches
    timings.clear()
    database = postgres_backends()
    web_before, db_before = cpu_seconds(servers), cpu_seconds(database)
    started = time.perf_counter()
    threads = [threading.Thread(target=send, args=(bodies[i::connections],)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    web_cpu = cpu_seconds(servers) - web_before
    db_cpu = cpu_seconds(postgres_backends()) - db_before
    if failures:
        raise SystemExit(f"{len(failures)} reports failed: {sorted(set(failures))}")
    count = len(timings)
    ordered = sorted(timings)
    return Run(
        reports=count,
        wall=wall,
        p50=statistics.median(ordered),
        p99=ordered[int(0.99 * count)],
        web_ms=web_cpu / count * 1000,
        db_ms=db_cpu / count * 1000,
    )


if __name__ == "__main__":
    main()
