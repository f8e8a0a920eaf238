"""Server time of a select (and the revert after it) on PostgreSQL.

Creates a scratch database, starts the production web process (granian, 2 workers) on it,
and times N select/revert pairs through the HTTP API over a kept-alive loopback connection.
The round trip over loopback is the upper bound of server time; the script also reads the
share spent in the database from the `pg_stat_statements`-free way: nothing but wall time.

    python bench/select_latency.py [--changes 400] [--database-url postgres://postgres@127.0.0.1:5432/postgres]

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import BIN, ROOT, free_port, start, stop, wait_until_up  # noqa: E402


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres",
                        help="a PostgreSQL URL allowed to create and drop databases")
    args = parser.parse_args()

    name = f"bench_select_{os.getpid()}"
    base = args.admin_url.rsplit("/", 1)[0]
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    workdir = Path(tempfile.mkdtemp(prefix="bench-select-"))
    env = {**os.environ, "DATABASE_URL": f"{base}/{name}", "VAR_DIR": str(workdir),
           "DEBUG": "false", "LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    process = None
    try:
        manage = [sys.executable, "manage.py"]
        subprocess.run(manage + ["migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run(manage + ["sync_presets"], cwd=ROOT, env=env, check=True, capture_output=True)
        token = subprocess.run(manage + ["create_token", "bench", "--scope", "write"], cwd=ROOT,
                               env=env, check=True, capture_output=True, text=True).stdout.strip()
        port = free_port()
        process = start([str(BIN / "granian"), "--interface", "asgi", "--workers", "2", "--host",
                         "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-ws",
                         "controlplane.asgi:application"], env)
        wait_until_up(f"http://127.0.0.1:{port}/healthz")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        def post(path: str, body: dict) -> float:
            started = time.perf_counter()
            conn.request("POST", path, json.dumps(body), headers)
            response = conn.getresponse()
            response.read()
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200:
                raise SystemExit(f"{path}: HTTP {response.status}")
            return elapsed

        for _ in range(20):  # warm up connections and code paths
            post("/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": "warm"})
            post("/api/v1/chains/chat/revert", {"reason": "warm"})
        selects, reverts = [], []
        for i in range(args.changes // 2):
            selects.append(post("/api/v1/chains/chat/select",
                                {"preset": "pin_secondary", "reason": f"bench {i}"}))
            reverts.append(post("/api/v1/chains/chat/revert", {"reason": f"bench {i}"}))
        conn.close()
    finally:
        if process is not None:
            stop(process)
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    print(f"select: p50 {statistics.median(selects):.1f} ms, p99 {percentile(selects, 0.99):.1f} ms "
          f"over {len(selects)}; revert: p50 {statistics.median(reverts):.1f} ms, "
          f"p99 {percentile(reverts, 0.99):.1f} ms")
    print(f"changes={len(selects) + len(reverts)} select_p50_ms={statistics.median(selects):.1f} "
          f"select_p99_ms={percentile(selects, 0.99):.1f} revert_p50_ms={statistics.median(reverts):.1f} "
          f"revert_p99_ms={percentile(reverts, 0.99):.1f}")


if __name__ == "__main__":
    main()
