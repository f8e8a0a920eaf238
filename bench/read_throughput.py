"""Read throughput and latency of the authenticated chain endpoint (200 and 304) against a raw
ASGI callable, a bare Django view, and across worker counts.

For 1 and then 2 workers, starts side by side under granian (`make serve`'s server): the
control plane's production web process (the read front and Django) on a scratch PostgreSQL
database, and a raw ASGI callable sending the same bytes (bench/raw_asgi.py: no token check,
no snapshot, no metrics: the ceiling). Both get the same requests, token included. Loads them
in rounds with wrk (one thread, 32 connections, as a fleet of SDK instances would: many
connections, each a request at a time), each round the two back to back, the first in turn,
and prints requests/s and p99 latency of each, the front's ratio to the raw callable (of the
medians, and the median of the rounds' pairs), and how each scales from 1 to 2 workers. Then
a bare Django view returning a constant (granian WSGI, 2 workers), the figure the front was
first measured against.

    python bench/read_throughput.py [--duration 5] [--rounds 3] [--connections 32] [--admin-url postgres://...]
    python bench/read_throughput.py --cpu-per-worker 0.35
    python bench/read_throughput.py --client   # reads that name their SDK instance, as SDKs' do

``--cpu-per-worker``: each server runs in a CPU cgroup of its own allowed that many cores per
worker (1 worker 0.35 cores, 2 workers 0.7), so the server, not the machine, is what limits
throughput, and the rise from 1 to 2 workers shows whether the server scales with the CPU it
is given; without it, on a small machine wrk and one worker already fill the cores. Needs
root and the cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max).

Needs wrk (Debian package `wrk`). Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.2)
    raise SystemExit(f"server at {url} did not come up")


CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_PERIOD_US = 20_000


def _v2_has_cpu() -> bool:
    controllers = CGROUP_V2 / "cgroup.controllers"
    return controllers.exists() and "cpu" in controllers.read_text().split()


@contextmanager
def cpu_budget(name: str, cores: float | None) -> Iterator[list[str]]:
    """A command prefix that runs a process (and the workers it forks) in a new CPU cgroup
    allowed ``cores`` cores; no prefix when ``cores`` is None. The cgroup is removed after."""
    if cores is None:
        yield []
        return
    if (CGROUP_V1 / "cpu.cfs_quota_us").exists():
        group = CGROUP_V1 / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(CGROUP_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(round(cores * CGROUP_PERIOD_US)))
    elif _v2_has_cpu():
        group = CGROUP_V2 / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{round(cores * CGROUP_PERIOD_US)} {CGROUP_PERIOD_US}")
    else:
        raise SystemExit("--cpu-per-worker needs the cgroup cpu controller (/sys/fs/cgroup/cpu or cpu.max)")
    try:
        yield ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh"]
    finally:
        for _ in range(50):  # its processes have been stopped; the kernel lets go of them shortly
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# granian's allocator as `make serve` and the relay set it (Makefile, WEB_MALLOC_CONF), for
# every server a bench starts here: the front and the raw callable alike.
MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"


def start(command: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.Popen:
    """``command`` in its own session, in ``cwd`` (a checkout: this one unless another is compared)."""
    return subprocess.Popen(
        command,
        cwd=cwd,
        env={"_RJEM_MALLOC_CONF": MALLOC_CONF, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def granian(
    app: str, port: int | str, *, interface: str = "asgi", workers: int = 2, extra: tuple[str, ...] = ()
) -> list[str]:
    """The granian command line every benchmark serves ``app`` with."""
    options = ["--interface", interface, "--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
    return [str(BIN / "granian"), *options, "--log-level", "warning", "--http", "1", "--no-ws", *extra, app]


def set_up(env: dict[str, str], cwd: Path = ROOT) -> None:
    """Migrate the database ``env`` names and sync the example presets into it (with the
    checkout in ``cwd``)."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=cwd, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "sync_presets"], cwd=cwd, env=env, check=True, capture_output=True)


def create_token(env: dict[str, str], name: str, purpose: str, *extra: str, cwd: Path = ROOT) -> str:
    """A new service token's secret; ``purpose``: read, write or relay; ``extra``: more options."""
    command = [sys.executable, "manage.py", "create_token", name, "--purpose", purpose, *extra]
    return subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU these processes (and their threads) have used so far, from /proc
    (the ones still running)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):
            continue  # the process has ended
    return total / os.sysconf("SC_CLK_TCK")


def python_reference_us() -> float:
    """How fast this machine runs Python now, to read absolute figures measured on other days
    against: the best of 5 timings of a fixed loop (``sum(range(1000))``), in microseconds per
    loop (lower is faster). Printed by the benchmarks with a bar in milliseconds."""
    import timeit

    return round(min(timeit.repeat("sum(range(1000))", repeat=5, number=2000)) / 2000 * 1e6, 1)


def bench_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The environment every benchmarked process runs with: production settings (DEBUG off,
    so a SECRET_KEY: SECRET_KEY's own if set, else one made for this run), quiet logs, its
    files under ``workdir``."""
    return {
        **os.environ,
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "VAR_DIR": str(workdir),
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


@contextmanager
def scratch_control_plane(prefix: str, admin_url: str, *, cwd: Path = ROOT, **extra_env: str) -> Iterator[ScratchPlane]:
    """A migrated control plane with the example presets on a scratch PostgreSQL database
    (``admin_url`` may create and drop databases), of the checkout in ``cwd``; the database is
    dropped at exit."""
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    base = admin_url.rsplit("/", 1)[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    env = {**bench_env(workdir, DATABASE_URL=f"{base}/{name}", **extra_env), "PYTHONPATH": str(cwd)}
    try:
        set_up(env, cwd)
        yield ScratchPlane(
            env=env,
            database_url=env["DATABASE_URL"],
            token=lambda scope: create_token(env, f"{prefix}-{scope}", scope, cwd=cwd),
        )
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class ScratchPlane:
    env: dict[str, str]
    database_url: str
    token: Callable[[str], str]


@dataclass(frozen=True)
class Load:
    rps: float
    p99_ms: float


def wrk(url: str, headers: dict[str, str], duration: int, connections: int, threads: int = 1) -> Load:
    """Requests per second and p99 latency of ``url`` under wrk (every answer 2xx or 304)."""
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency"]
    for key, value in headers.items():
        command += ["-H", f"{key}: {value}"]
    out = subprocess.run(command + [url], capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"{errors.group(1)} error responses from {url}:\n{out}")
    if "Socket errors" in out:
        print(f"  warning: {url}: " + out.split("Socket errors")[1].splitlines()[0].strip())
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    if p99 is None:
        raise SystemExit(f"no latency distribution in wrk's output:\n{out}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return Load(rps=rps, p99_ms=float(p99.group(1)) * scale)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def measure(
    args: argparse.Namespace,
    env: dict[str, str],
    workers: int,
    front_port: int,
    raw_port: int,
    front_prefix: list[str],
    raw_prefix: list[str],
    auth: dict[str, str],
    rps: dict[tuple[str, int, str], list[float]],
    p99: dict[tuple[str, int, str], list[float]],
) -> None:
    """Start the front and the raw callable with ``workers`` workers each (each command after
    its prefix) and load them in alternating rounds, adding each round's figures to ``rps``
    and ``p99``."""
    workdir = Path(env["VAR_DIR"])
    front = start(front_prefix + granian("controlplane.asgi:application", front_port, workers=workers), env)
    raw = None
    try:
        url = f"http://127.0.0.1:{front_port}/api/v1/chains/chat"
        wait_until_up(f"http://127.0.0.1:{front_port}/healthz")
        answer = urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=5)
        (workdir / "document.json").write_bytes(answer.read())
        etag = answer.headers["ETag"]
        raw_env = {**env, "RAW_ASGI_DOCUMENT": str(workdir / "document.json"), "RAW_ASGI_ETAG": etag}
        raw = start(raw_prefix + granian("bench.raw_asgi:application", raw_port, workers=workers), raw_env)
        raw_url = f"http://127.0.0.1:{raw_port}/api/v1/chains/chat"
        wait_until_up(raw_url)
        # The same request to both (the raw callable ignores the token, but the server reads it).
        targets = {"front": (url, auth), "raw": (raw_url, auth)}
        load_in_rounds(args, targets, etag, workers, rps, p99)
    finally:
        stop(front)
        if raw is not None:
            stop(raw)


def load_in_rounds(
    args: argparse.Namespace,
    targets: dict[str, tuple[str, dict[str, str]]],
    etag: str,
    workers: int,
    rps: dict[tuple[str, int, str], list[float]],
    p99: dict[tuple[str, int, str], list[float]],
) -> None:
    """Load the two ``targets`` (name: URL and headers) with wrk, 200s and then 304s (with
    If-None-Match ``etag``), in ``args.rounds`` rounds, adding each round's figures to ``rps``
    and ``p99`` under (name, ``workers``, "200" or "304")."""
    for target, headers in targets.values():
        wrk(target, headers, 2, args.connections)  # warm every worker
    first, second = targets
    for round_ in range(args.rounds):
        for kind, extra in (("200", {}), ("304", {"If-None-Match": etag})):
            # The two back to back, the first one in turn: each round is a pair measured
            # on the same machine moment, whichever way the machine drifts.
            for name in (first, second) if round_ % 2 == 0 else (second, first):
                target, headers = targets[name]
                load = wrk(target, {**headers, **extra}, args.duration, args.connections)
                rps.setdefault((name, workers, kind), []).append(load.rps)
                p99.setdefault((name, workers, kind), []).append(load.p99_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server and worker count")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument(
        "--cpu-per-worker",
        type=float,
        default=None,
        help="run each server in a CPU cgroup allowed this many cores per worker (needs root)",
    )
    parser.add_argument(
        "--client",
        action="store_true",
        help="send an SDK instance's X-Chain-Client and X-Chain-Applied-Version (fleet status notes it)",
    )
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop the scratch database",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")

    with scratch_control_plane("bench_read", args.admin_url) as plane:
        run(args, plane)


def run(args: argparse.Namespace, plane: ScratchPlane) -> None:
    env = plane.env
    auth = {"Authorization": f"Bearer {plane.token('read')}"}
    if args.client:
        # As every SDK instance reads: the read front notes who read what for fleet status.
        auth.update({"X-Chain-Client": "bench/instance-1", "X-Chain-Applied-Version": "1"})
    figures: dict[str, float | int | str] = {}
    rps: dict[tuple[str, int, str], list[float]] = {}
    p99: dict[tuple[str, int, str], list[float]] = {}
    for workers in [int(n) for n in args.workers.split(",")]:
        front_port, raw_port = free_port(), free_port()
        cores = None if args.cpu_per_worker is None else args.cpu_per_worker * workers
        with (
            cpu_budget(f"bench_read_{os.getpid()}_front_{workers}", cores) as front_prefix,
            cpu_budget(f"bench_read_{os.getpid()}_raw_{workers}", cores) as raw_prefix,
        ):
            measure(args, env, workers, front_port, raw_port, front_prefix, raw_prefix, auth, rps, p99)
        for kind in ("200", "304"):
            front_rps, raw_rps = median(rps[("front", workers, kind)]), median(rps[("raw", workers, kind)])
            front_p99, raw_p99 = median(p99[("front", workers, kind)]), median(p99[("raw", workers, kind)])
            pairs = [f / r for f, r in zip(rps[("front", workers, kind)], rps[("raw", workers, kind)], strict=True)]
            print(
                f"{workers} worker(s), {kind}: front {front_rps:>9,.0f} req/s p99 {front_p99:6.2f} ms   "
                f"raw ASGI {raw_rps:>9,.0f} req/s p99 {raw_p99:6.2f} ms   "
                f"throughput x{front_rps / raw_rps:.2f} (rounds' pairs: median x{median(pairs):.2f}, "
                f"x{min(pairs):.2f}-{max(pairs):.2f}), p99 x{front_p99 / raw_p99:.2f}"
            )
            prefix = f"w{workers}_{kind}"
            figures[f"{prefix}_front_rps"] = round(front_rps)
            figures[f"{prefix}_raw_rps"] = round(raw_rps)
            figures[f"{prefix}_front_p99_ms"] = round(front_p99, 2)
            figures[f"{prefix}_raw_p99_ms"] = round(raw_p99, 2)
            figures[f"{prefix}_throughput_ratio"] = round(front_rps / raw_rps, 2)
            figures[f"{prefix}_paired_ratio"] = round(median(pairs), 2)
            figures[f"{prefix}_p99_ratio"] = round(front_p99 / raw_p99, 2)
    counts = sorted({workers for _, workers, _ in rps})
    if len(counts) > 1:
        few, many = counts[0], counts[-1]
        for name in ("front", "raw"):
            for kind in ("200", "304"):
                scaling = median(rps[(name, many, kind)]) / median(rps[(name, few, kind)])
                figures[f"{name}_{kind}_scaling_w{few}_to_w{many}"] = round(scaling, 2)
            print(
                f"{name}: {few} -> {many} workers x{figures[f'{name}_200_scaling_w{few}_to_w{many}']} (200), "
                f"x{figures[f'{name}_304_scaling_w{few}_to_w{many}']} (304)"
            )

    port = free_port()
    process = start(granian("bench.bare_django:application", str(port), interface="wsgi"), env)
    try:
        url = f"http://127.0.0.1:{port}/api/v1/chains/chat"
        wait_until_up(url)
        wrk(url, {}, 2, args.connections)
        bare = wrk(url, {}, args.duration, args.connections).rps
    finally:
        stop(process)
    print(f"bare Django view, granian WSGI x2: {bare:>9,.0f} req/s")
    if ("front", 2, "200") in rps:
        figures["bare_django_rps"] = round(bare)
        figures["front_vs_bare_django_200"] = round(median(rps[("front", 2, "200")]) / bare, 2)
    figures["python_ref_us"] = python_reference_us()
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
