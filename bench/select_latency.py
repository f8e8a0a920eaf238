"""Server time of a select (and the revert after it) on PostgreSQL, alone and with concurrent writers.

Creates a scratch database, starts the production web process (granian, 2 workers) on it,
and times select/revert pairs through the HTTP API over kept-alive loopback connections, in
three layouts measured in the same run:

- alone: one client, one change at a time, on ``chat``;
- K writers on one chain: K threads, each with its own connection, changing ``chat`` at
  once (they serialise on its selection row lock). Writer i selects a preset of its own
  (``bench_w<i>``), so its select never finds its preset already live; a revert that finds
  the default already live (another writer reverted first) is refused with a 400, which is
  counted apart (``revert_refused``), not as an error;
- K writers on K chains: writer i changes its own chain ``chat-w<i>`` (a copy of ``chat``).

No request sends ``expected_version``, so there are no 409 conflicts. The round trip over
loopback is an upper bound of the server time; the client threads share this machine's
cores with the server and PostgreSQL. Each layout also says what a change cost in CPU: the
web process (granian and its workers), the scratch database's PostgreSQL backends, and this
client. Meanwhile a probe commits every 20 ms on a connection of its own: the disk's stalls
over the same seconds (every change waits for a WAL flush, and a stall of the disk delays
every change committing then). Last, the database's floor at that moment: an INSERT and its
COMMIT, by one connection and by K at once. ``--synchronous-commit off`` (a diagnostic) lets
the scratch database's commits not wait for the disk: what is left is the changes' own cost.

    python bench/select_latency.py [--changes 800] [--writers 8] [--web-workers 2] [--synchronous-commit on]
                                   [--admin-url postgres://postgres@127.0.0.1:5432/postgres]

``--writers 0`` measures the alone layout only. Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import (  # noqa: E402
    ROOT,
    cpu_seconds,
    free_port,
    granian,
    python_reference_us,
    scratch_control_plane,
    start,
    stop,
    wait_until_up,
)

# A commit of the probe taking this long is the disk stalling, not the database being busy:
# alone, a commit takes about a millisecond here (bench/README.md, "Select latency").
STALL_MS = 50


class CpuMeter:
    """CPU per change of the web process (granian and its workers), the PostgreSQL backends
    of the scratch database, and this client, over one layout; and how many of the web
    process's statements were, on average, running in PostgreSQL and waiting there for a lock
    (sampled every 20 ms from pg_stat_activity)."""

    def __init__(self, web_group: int, database_url: str) -> None:
        self.web_group = web_group
        self.database_url = database_url
        self.waits: dict[str, float] = {}
        self.probe: list[float] = []
        self.probe_pid = 0

    def pids(self) -> dict[str, list[int]]:
        import psycopg

        web = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == self.web_group:  # the process group
                    web.append(int(entry.name))
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        return {"web": web, "postgres": [row[0] for row in rows if row[0] != self.probe_pid]}

    def sample(self) -> None:
        import psycopg

        samples = []
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self.done.wait(0.02):
                samples.append(
                    conn.execute(
                        "SELECT count(*) FILTER (WHERE state = 'active'), "
                        "count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'Lock') "
                        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    ).fetchone()
                )
        if samples:
            self.waits = {
                "in PostgreSQL": sum(row[0] for row in samples) / len(samples),
                "waiting for a lock": sum(row[1] for row in samples) / len(samples),
            }

    def commit_probe(self) -> None:
        """The disk's part, over the same seconds: an INSERT and its COMMIT every 20 ms on a
        connection of its own. Every change waits for a WAL flush, so a stall of the disk
        here is a stall of every change committing at that moment."""
        import psycopg

        self.probe = []
        with psycopg.connect(self.database_url) as conn:
            self.probe_pid = conn.info.backend_pid  # not a change's: its CPU is left out
            conn.execute("CREATE TABLE IF NOT EXISTS bench_probe (at timestamptz)")
            conn.commit()
            while not self.done.wait(0.02):
                started = time.perf_counter()
                conn.execute("INSERT INTO bench_probe VALUES (now())")
                conn.commit()
                self.probe.append((time.perf_counter() - started) * 1000)

    def __enter__(self) -> CpuMeter:
        self.before = {name: cpu_seconds(pids) for name, pids in self.pids().items()}
        self.client_before = time.process_time()
        self.done = threading.Event()
        self.sampler = threading.Thread(target=self.sample)
        self.prober = threading.Thread(target=self.commit_probe)
        self.sampler.start()
        self.prober.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.sampler.join()
        self.prober.join()
        pids = self.pids()
        self.used = {name: cpu_seconds(pids[name]) - self.before[name] for name in pids}
        self.used["client"] = time.process_time() - self.client_before


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def presets_file(writers: int) -> dict:
    """The example presets, with a pin per writer on ``chat`` and a copy of ``chat`` per writer."""
    example = json.loads((ROOT / "presets" / "presets.example.json").read_text())
    chat = example["chains"]["chat"]
    spread = {f"chat-w{i}": json.loads(json.dumps(chat)) for i in range(1, writers + 1)}
    for i in range(1, writers + 1):
        chat["presets"][f"bench_w{i}"] = {**chat["presets"]["pin_secondary"], "description": f"writer {i}'s pin"}
    example["chains"].update(spread)
    return example


@dataclass
class Layout:
    """What one layout's requests took and answered."""

    selects: list[float] = field(default_factory=list)
    reverts: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    revert_refused: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    probe: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, status: int, elapsed: float) -> None:
        with self.lock:
            (self.selects if kind == "select" else self.reverts).append(elapsed)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if kind == "revert" and status == 400:
                self.revert_refused += 1

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    @property
    def other_non_2xx(self) -> int:
        """Answers neither 2xx nor 5xx, less the expected refused reverts."""
        other = sum(n for status, n in self.statuses.items() if not 200 <= status < 300 and status < 500)
        return other - self.revert_refused

    def line(self, label: str) -> str:
        changes = len(self.selects) + len(self.reverts)
        return (
            f"{label:22} select p50 {statistics.median(self.selects):6.1f} ms  p99 "
            f"{percentile(self.selects, 0.99):6.1f} ms  max {max(self.selects):6.1f} ms | revert p50 "
            f"{statistics.median(self.reverts):6.1f} ms  p99 {percentile(self.reverts, 0.99):6.1f} ms | "
            f"{changes / self.seconds:5.0f} changes/s | 5xx {self.server_errors}, other non-2xx "
            f"{self.other_non_2xx}, refused reverts {self.revert_refused}\n{'':22} CPU per change: "
            + ", ".join(f"{name} {seconds / changes * 1000:.1f} ms" for name, seconds in self.cpu.items())
            + "; statements on average "
            + ", ".join(f"{name} {count:.1f}" for name, count in self.waits.items())
            + f"\n{'':22} the disk meanwhile (a commit every 20 ms): p50 {statistics.median(self.probe):.1f} ms, "
            f"p99 {percentile(self.probe, 0.99):.1f} ms, max {max(self.probe):.1f} ms, "
            f"{self.stalls} stalls of {STALL_MS} ms or more"
        )

    @property
    def stalls(self) -> int:
        return sum(1 for elapsed in self.probe if elapsed >= STALL_MS)

    def figures(self, prefix: str) -> dict[str, object]:
        return {
            f"{prefix}select_p50_ms": round(statistics.median(self.selects), 1),
            f"{prefix}select_p99_ms": round(percentile(self.selects, 0.99), 1),
            f"{prefix}select_max_ms": round(max(self.selects), 1),
            f"{prefix}revert_p50_ms": round(statistics.median(self.reverts), 1),
            f"{prefix}revert_p99_ms": round(percentile(self.reverts, 0.99), 1),
            f"{prefix}5xx": self.server_errors,
            f"{prefix}non_2xx": self.other_non_2xx,
            f"{prefix}changes_per_s": round((len(self.selects) + len(self.reverts)) / self.seconds),
            **{
                f"{prefix}{name}_cpu_ms": round(seconds / (len(self.selects) + len(self.reverts)) * 1000, 1)
                for name, seconds in self.cpu.items()
            },
            f"{prefix}lock_waiting_avg": round(self.waits.get("waiting for a lock", 0.0), 1),
            f"{prefix}disk_commit_p99_ms": round(percentile(self.probe, 0.99), 1),
            f"{prefix}disk_commit_max_ms": round(max(self.probe), 1),
            f"{prefix}disk_stalls": self.stalls,
        }


class Writer:
    """One client with its own kept-alive connection."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict) -> tuple[int, float]:
        started = time.perf_counter()
        self.conn.request("POST", path, json.dumps(body), self.headers)
        response = self.conn.getresponse()
        response.read()
        return response.status, (time.perf_counter() - started) * 1000

    def pairs(self, chain: str, preset: str, count: int, layout: Layout | None, tag: str) -> None:
        for i in range(count):
            for kind, body in (("select", {"preset": preset}), ("revert", {})):
                status, elapsed = self.post(f"/api/v1/chains/{chain}/{kind}", {**body, "reason": f"{tag} {i}"})
                if layout is not None:
                    layout.record(kind, status, elapsed)

    def close(self) -> None:
        self.conn.close()


def bare_commits(database_url: str, clients: int, each: int) -> list[float]:
    """The database's floor on this machine now: milliseconds of an INSERT and its COMMIT
    (a WAL flush, as every change pays), by ``clients`` connections at once."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (at timestamptz)")
    times: list[float] = []
    lock = threading.Lock()

    def commit(count: int) -> None:
        with psycopg.connect(database_url) as conn:
            for _ in range(count):
                started = time.perf_counter()
                conn.execute("INSERT INTO bench_commit VALUES (now())")
                conn.commit()
                with lock:
                    times.append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=commit, args=(each,)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def run_writers(port: int, token: str, jobs: list[tuple[str, str]], pairs_each: int, meter: CpuMeter) -> Layout:
    """One thread per (chain, preset) job, all starting together; each warms up first."""
    layout = Layout()
    writers = [Writer(port, token) for _ in jobs]
    ready = threading.Barrier(len(jobs) + 1)

    def work(writer: Writer, chain: str, preset: str) -> None:
        writer.pairs(chain, preset, 5, None, "warm")
        ready.wait()
        writer.pairs(chain, preset, pairs_each, layout, "bench")

    threads = [threading.Thread(target=work, args=(w, *job)) for w, job in zip(writers, jobs, strict=True)]
    for thread in threads:
        thread.start()
    ready.wait()
    with meter:
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        layout.seconds = time.perf_counter() - started
    layout.cpu, layout.waits, layout.probe = meter.used, meter.waits, meter.probe
    for writer in writers:
        writer.close()
    return layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=800, help="changes (selects + reverts) per layout")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writers (0: alone only)")
    parser.add_argument("--web-workers", type=int, default=2, help="granian workers (make serve's WEB_WORKERS)")
    parser.add_argument(
        "--synchronous-commit",
        choices=["on", "off"],
        default="on",
        help="off: the scratch database's commits do not wait for the disk (a diagnostic: what the "
        "changes cost without the disk's stalls; production keeps it on)",
    )
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop databases",
    )
    args = parser.parse_args()
    k = args.writers

    workdir = Path(tempfile.mkdtemp(prefix="bench-select-"))
    presets = workdir / "presets.json"
    presets.write_text(json.dumps(presets_file(k)))
    layouts: dict[str, Layout] = {}
    commits: dict[int, list[float]] = {}
    with scratch_control_plane("bench_select", args.admin_url, PRESETS_FILE=str(presets)) as plane:
        token = plane.token("write")
        if args.synchronous_commit == "off":
            import psycopg

            with psycopg.connect(args.admin_url, autocommit=True) as admin:
                name = plane.database_url.rsplit("/", 1)[1]
                admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        port = free_port()
        process = start(granian("controlplane.asgi:application", str(port), workers=args.web_workers), plane.env)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            alone = Writer(port, token)
            alone.pairs("chat", "pin_secondary", 20, None, "warm")  # warm connections and code paths
            meter = CpuMeter(process.pid, plane.database_url)
            layout = Layout()
            with meter:
                started = time.perf_counter()
                alone.pairs("chat", "pin_secondary", args.changes // 2, layout, "bench")
                layout.seconds = time.perf_counter() - started
            layout.cpu, layout.waits, layout.probe = meter.used, meter.waits, meter.probe
            alone.close()
            layouts["alone"] = layout
            if k:
                pairs_each = max(1, args.changes // (2 * k))
                jobs = [("chat", f"bench_w{i}") for i in range(1, k + 1)]
                layouts["one_chain"] = run_writers(port, token, jobs, pairs_each, meter)
                jobs = [(f"chat-w{i}", "pin_secondary") for i in range(1, k + 1)]
                layouts["spread"] = run_writers(port, token, jobs, pairs_each, meter)
            for clients in sorted({1, k or 1}):
                commits[clients] = bare_commits(plane.database_url, clients, max(1, args.changes // (2 * clients)))
        finally:
            stop(process)
            shutil.rmtree(workdir, ignore_errors=True)

    labels = {"alone": "alone", "one_chain": f"{k} writers, one chain", "spread": f"{k} writers, {k} chains"}
    for name, layout in layouts.items():
        print(layout.line(labels[name]))
    for clients, times in commits.items():
        print(
            f"{f'bare commit x{clients}':22} p50 {statistics.median(times):6.1f} ms  p99 "
            f"{percentile(times, 0.99):6.1f} ms  max {max(times):6.1f} ms  (the database's floor on this machine now)"
        )
    figures: dict[str, object] = {
        "changes": args.changes,
        "writers": k,
        "web_workers": args.web_workers,
        "synchronous_commit": args.synchronous_commit,
    }
    for name, layout in layouts.items():
        figures.update(layout.figures("" if name == "alone" else f"{name}_"))
    for clients, times in commits.items():
        figures[f"commit_x{clients}_p99_ms"] = round(percentile(times, 0.99), 1)
    figures["load_1m"] = round(os.getloadavg()[0], 1)
    figures["python_ref_us"] = python_reference_us()
    print(" ".join(f"{name}={value}" for name, value in figures.items()))


if __name__ == "__main__":
    main()
