"""What provider health costs the control plane: usage reports with a ``health`` section from
a simulated fleet, posted to the production web process (granian, 2 workers) on a scratch
PostgreSQL database.

Each report is what one chainclient 0.3.0 instance sends: served counts for 3 providers and
the health of 3 steps (attempts by class, a latency histogram). Reports cycle through
``--instances`` client names, as a fleet reporting every ``--interval`` seconds would; each
instance first reads the chain, as SDK instances do (health counts only from an instance fleet
status knows), and the usage-report limits are raised out of the way (this measures the cost
of reports the control plane takes, not its refusals).
Three kinds of the same report are measured in the same run: usage only (no ``health``),
with health, and with health whose steps also say their tokens (``input_tokens``,
``output_tokens``, ``served_with_tokens``: presets.wire.TOKEN_FIELDS). Each kind's
``--reports`` are sent in ``--rounds`` rounds that alternate the kinds (A B C, then C B A,
...), so that the drift of a shared, noisy machine falls on every kind alike; a kind's CPU per
report is the median of its rounds.
Measured: the body's size, the round trip per report over kept-alive loopback connections
(``--connections`` at once), the server's CPU per report (the web processes' and PostgreSQL's,
from /proc), and the rows the health tables hold afterwards; from those, the CPU share and the
rows per hour a fleet of that size costs, and what token counts add (bytes, CPU ratio).

    python bench/provider_health_ingest.py [--reports 3000] [--rounds 6] [--instances 1000] [--interval 10]

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import ROOT, free_port, granian, scratch_control_plane, start, stop, wait_until_up  # noqa: E402

BOUNDS = [100, 250, 500, 1000, 2500, 5000, 10000, 30000]


# A step's tokens when its attempts say them: 20 served attempts of ~1,200 tokens in, ~300 out.
TOKENS = {"input_tokens": 20 * 1200, "output_tokens": 20 * 300, "served_with_tokens": 20}

# The kinds of report measured, as (health section, token counts in its steps).
KINDS = {"usage only": (False, False), "with health": (True, False), "with tokens": (True, True)}


def report(instance: int, *, health: bool = True, tokens: bool = False) -> bytes:
    """One instance's report, encoded as chainclient sends it (``json.dumps``, default
    separators); ``tokens``: each step also says its tokens, after its latency as the SDK puts
    them (chainclient.health.StepHealth.report)."""

    def step(provider: str, model: str, errors: int) -> dict:
        outcomes = {"served": 20, "server_error": errors, "timeout": 1}
        entry = {"provider": provider, "model": model, "outcomes": outcomes, "latency_ms": [0, 2, 12, 5, 1, 0, 0, 0, 0]}
        if tokens:
            entry.update(TOKENS)
        return entry

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


def postgres_processes(database: str) -> list[int]:
    """The local PostgreSQL server's processes that work for ``database``: its backends (and
    autovacuum workers) and the server-wide ones (postmaster, WAL writer, checkpointer, ...),
    not the backends of other databases (other work on a shared machine opens and closes
    those during a round)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() not in {"postgres", "postmaster"}:
                continue
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        backend = BACKEND_TITLE.search(title)
        if backend is not None:
            if backend["database"] != database:
                continue
        elif "autovacuum worker" in title and not title.endswith(f" {database}"):
            continue
        pids.append(int(proc.name))
    return pids


# A backend's process title: "postgres: [cluster: ]user database host(port) state".
BACKEND_TITLE = re.compile(r"\S+ (?P<database>\S+) (?:\[local\]|\S+\(\d+\)) ")


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """User and system CPU ticks each of these processes (and its threads) has used so far,
    from /proc (the ones still running)."""
    ticks = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):
            continue  # the process has ended
    return ticks


def cpu_used(before: dict[int, int], after: dict[int, int]) -> float:
    """Seconds of CPU between two readings: each process's growth, a process started in
    between counted whole; one that ended in between is left out (not counted as negative)."""
    return sum(used - before.get(pid, 0) for pid, used in after.items()) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=3000, help="reports of each kind, over all rounds")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each kind, alternating the kinds")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between one instance's reports")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    per_round = max(args.reports // args.rounds, 1)

    # The whole run's reports fall in a few minutes: no limit of a real fleet's size applies.
    limits = {
        f"USAGE_REPORTS_PER_{per}_PER_MINUTE": str(most)
        for per, most in (("INSTANCE", 600), ("TOKEN", 10**6), ("CHAIN", 10**6))
    }
    examples = {label: report(0, health=health, tokens=tokens) for label, (health, tokens) in KINDS.items()}
    sizes = {label: len(body) for label, body in examples.items()}
    rounds: dict[str, list[Run]] = {label: [] for label in KINDS}
    sent_with_tokens = 0  # reports with token counts, warm-ups included
    with scratch_control_plane("bench_health", args.admin_url, **limits) as plane:
        token = plane.token("read")
        port = free_port()
        process = start(granian("controlplane.asgi:application", str(port)), plane.env)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            servers = tree(process.pid)
            database = plane.database_url.rsplit("/", 1)[1]
            poll_as_instances(port, token, args.instances, plane.database_url)
            # The same reports of each kind in each round; the kinds' order turns round by
            # round (A B C, C B A, A B C, ...), so a drift over the run weighs on them alike.
            for number in range(args.rounds):
                order = list(KINDS) if number % 2 == 0 else list(reversed(KINDS))
                first = number * per_round
                for label in order:
                    health, tokens = KINDS[label]
                    bodies = [
                        report((first + n) % args.instances, health=health, tokens=tokens) for n in range(per_round)
                    ]
                    warm = 50 if number == 0 else 10
                    run = measure(port, headers, bodies, servers, database, args.connections, warm=warm)
                    rounds[label].append(run)
                    if tokens:
                        sent_with_tokens += min(warm, per_round) + per_round
        finally:
            stop(process)

        parsing = parse_cost(plane.env, examples)

        import psycopg

        with psycopg.connect(plane.database_url) as db:
            buckets, minutes = db.execute(
                "SELECT count(*), count(DISTINCT minute) FROM audit_providerhealthminute"
            ).fetchone()
            reporters = db.execute("SELECT count(*) FROM audit_providerreporter").fetchone()[0]
            counted = "SELECT coalesce(sum(input_tokens), 0) FROM audit_providerhealthminute"
            tokens_in = db.execute(counted).fetchone()[0]

    runs = {label: Summary.of(kind_rounds) for label, kind_rounds in rounds.items()}
    fleet_rate = args.instances / args.interval  # reports per second from the whole fleet
    print(f"{args.rounds} rounds of {per_round} reports of each kind, the kinds alternating; medians over rounds")
    for label, run in runs.items():
        print(
            f"{label:12} {sizes[label]:5} bytes; {run.reports} reports in {run.wall:.1f} s; "
            f"p50 {run.p50:.1f} ms, p99 {run.p99:.1f} ms; "
            f"CPU {run.cpu_ms:.2f} ms/report (web {run.web_ms:.2f}, PostgreSQL {run.db_ms:.2f}; "
            f"rounds {min(run.per_round):.2f} to {max(run.per_round):.2f}); "
            f"{args.instances} instances every {args.interval:g} s: {fleet_rate * run.cpu_ms / 1000:.2f} cores"
        )
    for label, run in runs.items():
        print(f"  {label:12} CPU ms/report round by round: {' '.join(f'{cpu:.2f}' for cpu in run.per_round)}")
    plain, health, tokens = runs["usage only"], runs["with health"], runs["with tokens"]
    extra = sizes["with tokens"] - sizes["with health"]
    ratio = tokens.cpu_ms / health.cpu_ms
    paired = sorted(t / h for t, h in zip(tokens.per_round, health.per_round, strict=True))
    print(
        f"tokens: +{extra} bytes a report ({'within' if extra <= 1024 else 'OVER'} the 1 KB bar); "
        f"CPU {tokens.cpu_ms:.2f} / {health.cpu_ms:.2f} ms = {ratio:.3f} "
        f"({'within' if ratio <= 1.1 else 'OVER'} the 1.1x bar); "
        f"round by round {paired[0]:.3f} to {paired[-1]:.3f} (median {statistics.median(paired):.3f})"
    )
    print(
        "parsing and validating a body in one process (best of 10 blocks of 500): "
        + ", ".join(f"{label} {ms:.3f} ms" for label, ms in parsing.items())
        + f"; tokens add {parsing['with tokens'] - parsing['with health']:.3f} ms"
    )
    expected = TOKENS["input_tokens"] * 3 * sent_with_tokens
    print(
        f"rows: {buckets} minute buckets in {minutes} minute(s) (one per step and minute), {reporters} reporters; "
        f"input tokens counted {tokens_in:,} (sent {expected:,})"
    )
    print(
        f"reports={health.reports} rounds={args.rounds} cpu_ms={health.cpu_ms:.2f} "
        f"usage_only_cpu_ms={plain.cpu_ms:.2f} health_ratio={health.cpu_ms / plain.cpu_ms:.2f} "
        f"p50_ms={health.p50:.1f} fleet_cores={fleet_rate * health.cpu_ms / 1000:.2f} "
        f"buckets_per_hour={buckets / max(minutes, 1) * 60:.0f} reporter_rows={reporters} "
        f"health_bytes={sizes['with health']} tokens_bytes={sizes['with tokens']} tokens_bytes_extra={extra} "
        f"tokens_cpu_ms={tokens.cpu_ms:.2f} tokens_cpu_ratio={ratio:.3f} "
        f"tokens_cpu_ratio_rounds={paired[0]:.3f}..{paired[-1]:.3f} tokens_p50_ms={tokens.p50:.1f} "
        f"tokens_parse_ms_extra={parsing['with tokens'] - parsing['with health']:.3f}"
    )


# Run in a process of its own with the scratch plane's settings: the web side's parsing of one
# body as UsageView does it (JSON, the serializer, the report it hands to audit.usage), in CPU
# seconds; the kinds alternate block by block and each keeps its best block.
PARSE = """
import json, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
import django
django.setup()
from http_api.fleet import UsageView, _usage_report
bodies, count, blocks = json.loads(sys.stdin.read())
best = {}
for block in range(blocks):
    for label, body in (bodies.items() if block % 2 == 0 else reversed(bodies.items())):
        body = body.encode()
        started = time.process_time()
        for _ in range(count):
            serializer = UsageView.InputSerializer(data=json.loads(body))
            serializer.is_valid(raise_exception=True)
            _usage_report(serializer.validated_data)
        used = (time.process_time() - started) / count * 1000
        best[label] = min(best.get(label, used), used)
print(json.dumps(best))
"""


def parse_cost(env: dict[str, str], bodies: dict[str, bytes], count: int = 500, blocks: int = 10) -> dict[str, float]:
    """CPU ms the web process spends parsing and validating each body (best of ``blocks``)."""
    sent = json.dumps([{label: body.decode() for label, body in bodies.items()}, count, blocks])
    done = subprocess.run(
        [sys.executable, "-c", PARSE], input=sent, env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    timings: list[float]
    web_ms: float
    db_ms: float

    @property
    def cpu_ms(self) -> float:
        return self.web_ms + self.db_ms


@dataclass
class Summary:
    """A kind's rounds: CPU per report as the median over rounds, round trips pooled."""

    reports: int
    wall: float
    p50: float
    p99: float
    web_ms: float
    db_ms: float
    per_round: list[float]  # each round's CPU ms per report, in round order

    @property
    def cpu_ms(self) -> float:
        return self.web_ms + self.db_ms

    @classmethod
    def of(cls, runs: list[Run]) -> Summary:
        timings = sorted(t for run in runs for t in run.timings)
        # The median CPU, split between web and PostgreSQL by the median web share (so the two add up to it).
        cpu = statistics.median(run.cpu_ms for run in runs)
        share = statistics.median(run.web_ms / run.cpu_ms for run in runs) if cpu else 0.0
        return cls(
            reports=sum(run.reports for run in runs),
            wall=sum(run.wall for run in runs),
            p50=statistics.median(timings),
            p99=timings[int(0.99 * len(timings))],
            web_ms=cpu * share,
            db_ms=cpu * (1 - share),
            per_round=[run.cpu_ms for run in runs],
        )


def measure(
    port: int,
    headers: dict[str, str],
    bodies: list[bytes],
    servers: list[int],
    database: str,
    connections: int,
    *,
    warm: int = 50,
) -> Run:
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

    send(bodies[:warm])  # warm up the workers' connections and caches
    timings.clear()
    web_before, db_before = cpu_ticks(servers), cpu_ticks(postgres_processes(database))
    started = time.perf_counter()
    threads = [threading.Thread(target=send, args=(bodies[i::connections],)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    web_cpu = cpu_used(web_before, cpu_ticks(servers))
    db_cpu = cpu_used(db_before, cpu_ticks(postgres_processes(database)))
    if failures:
        raise SystemExit(f"{len(failures)} reports failed: {sorted(set(failures))}")
    count = len(timings)
    return Run(
        reports=count,
        wall=wall,
        timings=list(timings),
        web_ms=web_cpu / count * 1000,
        db_ms=db_cpu / count * 1000,
    )


if __name__ == "__main__":
    main()
