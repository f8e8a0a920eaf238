"""Server time of a select (and the revert after it) on PostgreSQL.

Creates a scratch database, starts the production web process (granian, 2 workers) on it,
and times N select/revert pairs through the HTTP API over a kept-alive loopback connection.
The round trip over loopback is an upper bound of the server time.

    python bench/select_latency.py [--changes 400] [--database-url postgres://postgres@127.0.0.1:5432/postgres]

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import free_port, granian, scratch_control_plane, start, stop, wait_until_up  # noqa: E402


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop databases",
    )
    args = parser.parse_args()

    with scratch_control_plane("bench_select", args.admin_url) as plane:
        token = plane.token("write")
        port = free_port()
        process = start(
            granian("controlplane.asgi:application", str(port)),
            plane.env,
        )
        try:
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
                selects.append(post("/api/v1/chains/chat/select", {"preset": "pin_secondary", "reason": f"bench {i}"}))
                reverts.append(post("/api/v1/chains/chat/revert", {"reason": f"bench {i}"}))
            conn.close()
        finally:
            stop(process)

    print(
        f"select: p50 {statistics.median(selects):.1f} ms, p99 {percentile(selects, 0.99):.1f} ms "
        f"over {len(selects)}; revert: p50 {statistics.median(reverts):.1f} ms, "
        f"p99 {percentile(reverts, 0.99):.1f} ms"
    )
    print(
        f"changes={len(selects) + len(reverts)} select_p50_ms={statistics.median(selects):.1f} "
        f"select_p99_ms={percentile(selects, 0.99):.1f} revert_p50_ms={statistics.median(reverts):.1f} "
        f"revert_p99_ms={percentile(reverts, 0.99):.1f}"
    )


if __name__ == "__main__":
    main()
