"""Soak: reads at a fixed rate plus one change a second, against PostgreSQL and Redis.

Starts the production stack on this machine (granian web with 2 workers, a Celery worker
with beat on Redis) over a scratch PostgreSQL database, then for --duration seconds sends
authenticated chain reads at --rate per second (half of them conditional: 200 or 304) and
one change a second (select, extend or revert). Checks: zero errors, no lost history row
(history rows == 1 + changes made + automatic expiries), and memory flat (the web and worker
processes' resident memory in the last minute versus the first).

    python bench/soak.py [--duration 600] [--rate 200]

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
from collections import Counter
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import (  # noqa: E402
    ScratchPlane,
    free_port,
    granian,
    scratch_control_plane,
    start,
    stop,
    wait_until_up,
)

READERS = 8


def rss_mb(root_pid: int) -> float:
    """Resident memory of a process and all its descendants, in MiB."""
    total = 0
    pids = [root_pid]
    while pids:
        pid = pids.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            with open(f"/proc/{pid}/task/{pid}/children") as children:
                pids += [int(c) for c in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=600)
    parser.add_argument("--rate", type=int, default=200, help="reads per second")
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args()

    with scratch_control_plane("bench_soak", args.admin_url, CELERY_BROKER_URL=args.redis_url) as plane:
        run(args, plane)


def run(args: argparse.Namespace, plane: ScratchPlane) -> None:
    env = plane.env
    read_token, write_token = plane.token("read"), plane.token("write")
    web = worker = None
    try:
        port = free_port()
        web = start(
            granian("controlplane.asgi:application", str(port)),
            env,
        )
        worker = start(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                "--beat",
                "--loglevel=warning",
                "--concurrency=1",
            ],
            env,
        )
        wait_until_up(f"http://127.0.0.1:{port}/healthz")

        stop_at = time.monotonic() + args.duration
        statuses: Counter[str] = Counter()
        lock = threading.Lock()
        latest = {"version": 1}

        def reader(index: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            interval = READERS / args.rate
            next_at = time.monotonic() + index * interval / READERS
            n = 0
            while time.monotonic() < stop_at:
                headers = {
                    "Authorization": f"Bearer {read_token}",
                    "X-Chain-Client": f"soak/reader-{index}",
                    "X-Chain-Applied-Version": str(latest["version"]),
                }
                if n % 2:
                    headers["If-None-Match"] = f'"{latest["version"]}"'
                try:
                    conn.request("GET", "/api/v1/chains/chat", headers=headers)
                    response = conn.getresponse()
                    body = response.read()
                    status = str(response.status)
                    if response.status == 200:
                        latest["version"] = max(latest["version"], json.loads(body)["version"])
                except (OSError, http.client.HTTPException) as exc:
                    status = type(exc).__name__
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                with lock:
                    statuses[status] += 1
                n += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
            conn.close()

        changes: Counter[str] = Counter()

        def changer() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            headers = {"Authorization": f"Bearer {write_token}", "Content-Type": "application/json"}
            plan = [
                ("select", {"preset": "pin_secondary", "duration_minutes": 1}),
                ("extend", {"duration_minutes": 2}),
                ("revert", {}),
                ("select", {"preset": "local_only", "duration_minutes": 1}),
                ("revert", {}),
            ]
            i = 0
            next_at = time.monotonic()
            while time.monotonic() < stop_at:
                action, body = plan[i % len(plan)]
                payload = json.dumps({**body, "reason": f"soak change {i}"})
                try:
                    conn.request("POST", f"/api/v1/chains/chat/{action}", payload, headers)
                    response = conn.getresponse()
                    response.read()
                    changes["ok" if response.status == 200 else f"{action}:{response.status}"] += 1
                except (OSError, http.client.HTTPException) as exc:
                    changes[type(exc).__name__] += 1
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                i += 1
                next_at += 1.0
                time.sleep(max(0.0, next_at - time.monotonic()))
            conn.close()

        samples: list[tuple[float, float]] = []

        def sampler() -> None:
            began = time.monotonic()
            while time.monotonic() < stop_at:
                samples.append((time.monotonic() - began, rss_mb(web.pid) + rss_mb(worker.pid)))
                time.sleep(5)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
        threads += [threading.Thread(target=changer), threading.Thread(target=sampler)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(1)

        with psycopg.connect(plane.database_url, autocommit=True) as conn:
            rows = dict(
                conn.execute(
                    "SELECT action, count(*) FROM presets_historicalselection h "
                    "JOIN presets_chain c ON c.id = h.chain_id WHERE c.name = 'chat' GROUP BY action"
                ).fetchall()
            )
            versions = [
                v
                for (v,) in conn.execute(
                    "SELECT h.version FROM presets_historicalselection h JOIN presets_chain c "
                    "ON c.id = h.chain_id WHERE c.name = 'chat' ORDER BY h.version"
                ).fetchall()
            ]
    finally:
        for process in (web, worker):
            if process is not None:
                stop(process)

    reads = sum(statuses.values())
    read_errors = sum(n for status, n in statuses.items() if status not in ("200", "304"))
    made = changes["ok"]
    change_errors = sum(n for key, n in changes.items() if key != "ok")
    expected_rows = 1 + made + rows.get("expire", 0)
    history_rows = sum(rows.values())
    gapless = versions == list(range(1, len(versions) + 1))
    first = [mb for t, mb in samples if t <= 60]
    last = [mb for t, mb in samples if t >= samples[-1][0] - 60]
    rss_start, rss_end = statistics.mean(first), statistics.mean(last)
    print(f"reads: {dict(statuses)}; changes: {dict(changes)}; history by action: {rows}")
    print(
        f"duration_s={args.duration} reads={reads} read_rps={reads / args.duration:.0f} "
        f"read_errors={read_errors} changes={made} change_errors={change_errors} "
        f"history_rows={history_rows} expected_rows={expected_rows} "
        f"lost_rows={expected_rows - history_rows} versions_gapless={gapless} "
        f"rss_start_mb={rss_start:.0f} rss_end_mb={rss_end:.0f} "
        f"rss_growth_pct={100 * (rss_end - rss_start) / rss_start:.1f}"
    )


if __name__ == "__main__":
    main()
