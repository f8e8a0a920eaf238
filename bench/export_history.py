"""The audit export with 100,000 history rows: rows a second and memory, through the API
(GET /api/v1/history, the production web process: granian ASGI, one worker) and through the
command (manage.py export_history), each for the newest 10,000 rows and for all of them.

Memory that does not grow with the export is the point: for the web worker, its peak RSS
while streaming (the kernel's high-water mark, reset before each export); for the command,
its process's peak RSS. The ratio of the whole export's figure to the 10,000-row one is about
1.0 when memory is constant, about 10 when it holds the export.

    python bench/export_history.py [--rows 100000] [--admin-url postgres://postgres@127.0.0.1:5432/postgres]

A scratch database (dropped at exit), filled by bench/history_pages.py's ``fill`` (COPY, a
few seconds). Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import ROOT, free_port, granian, scratch_control_plane, start, stop, wait_until_up  # noqa: E402

SUBSET = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop databases",
    )
    args = parser.parse_args()
    # Every row counted exactly (the export otherwise ends at the changes of 5 s ago).
    key = os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50)
    extra = {"HISTORY_EXPORT_SETTLE_SECONDS": "0", "SECRET_KEY": key}
    with scratch_control_plane("bench_export", args.admin_url, **extra) as plane:
        total, subset_after, warm_after = fill(plane.env, args.rows)
        token = plane.token("read")
        web = through_the_api(plane.env, token, total, subset_after, warm_after)
        command = through_the_command(plane.env, total, subset_after)

    print()
    print(f"{'export':31} {'rows':>6} {'seconds':>7} {'rows/s':>6} peak RSS MiB growth MiB 1st byte ms")
    for label, run in {**web, **command}.items():
        growth = f"{run.growth_kib / 1024:10.1f}" if run.growth_kib is not None else " " * 10
        first = f"{run.first_byte_ms:11.1f}" if run.first_byte_ms is not None else ""
        peak = run.peak_kib / 1024
        print(f"{label:31} {run.rows:6} {run.seconds:7.2f} {run.rate:6.0f} {peak:12.1f} {growth} {first}")
    api_10k, api_all = web["api: newest 10,000"], web["api: all"]
    cmd_10k, cmd_all = command["command ndjson: newest 10,000"], command["command ndjson: all"]
    print(
        f"rows={total} api_rows_per_s={api_all.rate:.0f} api_peak_rss_ratio={api_all.peak_kib / api_10k.peak_kib:.2f} "
        f"api_growth_10k_mib={api_10k.growth_kib / 1024:.1f} api_growth_all_mib={api_all.growth_kib / 1024:.1f} "
        f"command_rows_per_s={cmd_all.rate:.0f} command_peak_rss_ratio={cmd_all.peak_kib / cmd_10k.peak_kib:.2f} "
        f"command_peak_rss_mib={cmd_all.peak_kib / 1024:.1f}"
    )


@dataclass(frozen=True)
class Run:
    """One export: its rows and seconds; the process's peak RSS during it (KiB) and, for the web
    worker, that peak's growth over its RSS before the export; when the first byte came."""

    rows: int
    seconds: float
    peak_kib: int
    growth_kib: int | None = None
    first_byte_ms: float | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def fill(env: dict[str, str], rows: int) -> tuple[int, str, str]:
    """``rows`` history rows (bench/history_pages.py's ``fill``); the export's total, and the
    places (``chain:version``) that the newest ``SUBSET`` rows and the newest 100 come after."""
    os.environ.update(env, DJANGO_SETTINGS_MODULE="controlplane.settings", LOG_LEVEL="ERROR")
    import django

    django.setup()
    from django.db import connections

    from bench.history_pages import fill as fill_history
    from presets.models import Selection

    started = time.perf_counter()
    fill_history(rows)
    print(f"filled {rows:,} history rows in {time.perf_counter() - started:.1f} s")
    ordered = Selection.history.order_by("history_date", "history_id")
    total = ordered.count()
    places = [f"{chain}:{version}" for chain, version in ordered.values_list("chain__name", "version")]
    connections.close_all()
    return total, places[total - SUBSET - 1], places[total - 101]


# --- the API: the production web process ------------------------------------------------------


def through_the_api(env: dict[str, str], token: str, total: int, subset_after: str, warm_after: str) -> dict[str, Run]:
    """Each export streamed by a fresh granian worker, warmed up with a short export first."""
    results = {}
    for label, query, expected in [
        ("api: newest 10,000", {"after": subset_after}, SUBSET),
        ("api: all", {}, total),
    ]:
        port = free_port()
        process = start(granian("controlplane.asgi:application", port, workers=1), env)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            worker = only_worker(process.pid)
            for _ in range(3):  # imports, the connection pool, PostgreSQL's caches
                stream(port, token, {"after": warm_after})
            before = kib(worker, "VmRSS")
            Path(f"/proc/{worker}/clear_refs").write_text("5")  # the peak (VmHWM) starts from now
            rows, seconds, first = stream(port, token, query)
            assert rows == expected, f"{label}: {rows} rows, expected {expected}"
            peak = kib(worker, "VmHWM")
            results[label] = Run(rows, seconds, peak, growth_kib=peak - before, first_byte_ms=first)
        finally:
            stop(process)
    return results


def only_worker(pid: int) -> int:
    """granian's one worker process (the main process only supervises)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, f"granian {pid} has workers {children}"
    return int(children[0])


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def stream(port: int, token: str, query: dict[str, str]) -> tuple[int, float, float]:
    """GET /api/v1/history, read as it arrives: (lines, seconds, ms to the first byte)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    connection.request("GET", "/api/v1/history?" + urlencode(query), headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    if response.status != 200:
        raise SystemExit(f"/api/v1/history: HTTP {response.status}: {response.read()[:300]!r}")
    first = None
    lines = 0
    while chunk := response.read1(1 << 16):
        if first is None:
            first = (time.perf_counter() - started) * 1000
        lines += chunk.count(b"\n")
    seconds = time.perf_counter() - started
    connection.close()
    return lines, seconds, first or 0.0


# --- the command --------------------------------------------------------------------------------


def through_the_command(env: dict[str, str], total: int, subset_after: str) -> dict[str, Run]:
    """Each export written to a file by its own process (its seconds include its start)."""
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for label, options, expected in [
            ("command ndjson: newest 10,000", ["--after", subset_after], SUBSET),
            ("command ndjson: all", [], total),
            ("command csv: all", ["--format", "csv"], total + 1),  # and its header row
        ]:
            output = Path(scratch) / "history"
            command = [sys.executable, "manage.py", "export_history", "--output", str(output), *options]
            done = subprocess.run(
                [sys.executable, "-c", PEAK_RSS, *command], cwd=ROOT, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, f"{label}: {done.stdout}{done.stderr}"
            peak_kib, seconds = done.stdout.split()
            rows = sum(1 for _ in output.open("rb"))  # a line an entry: the filled reasons have no newline
            assert rows == expected, f"{label}: {rows} lines, expected {expected}"
            results[label] = Run(rows, float(seconds), int(peak_kib))
    return results


# Runs a command and prints its peak RSS (KiB) and seconds. From a small process of its own:
# a child's peak RSS counts what it inherited at fork, and this script is large after the fill.
PEAK_RSS = """
import os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
if os.waitstatus_to_exitcode(status):
    sys.exit(f"exit {os.waitstatus_to_exitcode(status)}")
print(usage.ru_maxrss, time.perf_counter() - started)
"""


if __name__ == "__main__":
    main()
