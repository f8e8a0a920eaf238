"""Relays: a relay's read throughput beside the control plane's read front, and a change
reaching 5,000 long polls held on a relay of a relay.

On a scratch PostgreSQL database, starts the control plane's production web process with
exactly `make serve`'s granian command line (read from the Makefile, as bench/long_polls.py
does: WEB_WORKERS workers, 2 by default) and relay A (``python -m relay`` following it, as
many workers, its documents in a temporary directory, a read token of its own). Then:

1. Reads. The same request (``GET /api/v1/chains/chat`` with a valid read token; 200s, then
   304s with ``If-None-Match``) to the web process and to relay A, loaded with wrk (one
   thread, ``--connections``) in ``--rounds`` rounds, each round the two back to back, the
   first in turn (bench/read_throughput.py's ``load_in_rounds``). Prints requests/s and p99 of
   each (medians of the rounds), the relay's ratio to the front (of the medians, and the
   median of the rounds' pairs), and each server's CPU per read over one more round of each.
2. Long polls through two relays: control plane -> relay A -> relay B (following relay A,
   as many workers). ``--clients`` light clients (bench/long_polls.py's client processes,
   as the SDK polls: ``If-None-Match``, ``?wait=``, an ``X-Chain-Client`` each) hold long
   polls on relay B. Its resident memory (VmRSS of all its processes: granian's main process
   and each worker) idle and while they are held gives KB per held poll; then one change to
   ``chat`` on the control plane, and each client's 200 is timed from the commit (the
   earlier of the change's answer and this script's LISTEN connection receiving its NOTIFY,
   bench/long_polls.py's ``run_round``); a timeout is a poll with no answer within
   ``--wait`` + 5 s. ``--rounds-long-polls`` rounds, each on fresh connections.

A relay has no per-worker gauge of its held polls (its /healthz answers for the worker that
took the request): "held" per worker is the established connections each relay worker has
on its port (``ss``), every one of them a long poll sent at connect.

    python bench/relay.py [--duration 4] [--rounds 5] [--connections 32]
                          [--clients 5000] [--rounds-long-polls 2] [--wait 55]
                          [--only reads|long-polls|in-process] [--no-verify]
                          [--admin-url postgres://...]

The control plane signs (a key made and activated first) and both relays verify every document
with its keys (RELAY_TRUSTED_KEYS); ``--no-verify``: neither, as before. ``--only in-process``:
the relay's plain read alone (``Relay.__call__``, no server), best of 9 rounds of 20,000.

Bars (the relay's issue): the relay's read throughput >= 0.9x the control plane's read front
on the same box (the median of the rounds' pairs, 200s and 304s); <= 20 KB per held poll on
relay B; a change reaches all of the clients, p99 <= 1 s from its commit, no timeouts (every
round). Everything runs on this machine's cores: the servers, the relays, wrk and the clients.
Needs wrk (Debian package `wrk`) and ss (iproute2). Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_polls import (  # noqa: E402
    POLLED_CHAIN,
    ClientProcesses,
    Round,
    Server,
    check_limits,
    interrupted,
    option,
    read_chain,
    request,
    run_round,
    serve_command,
)
from propagation import NotifyListener  # noqa: E402
from read_throughput import (  # noqa: E402
    ROOT,
    ScratchPlane,
    bench_env,
    cpu_seconds,
    create_token,
    free_port,
    load_in_rounds,
    median,
    python_reference_us,
    scratch_control_plane,
    wrk,
)
from select_latency import percentile  # noqa: E402

READ_BAR = 0.9  # the relay's read throughput against the front's
KB_PER_POLL_BAR = 20.0
ANSWER_P99_BAR_MS = 1000.0


@dataclass
class RelayServer(Server):
    """A relay (``python -m relay``) started as bench/long_polls.py starts the web process:
    its processes are granian's main process and its workers."""

    def held(self) -> dict[int, int]:
        """Each worker's established client connections on the relay's port (ss): each a
        long poll sent at connect, held unless answered at once."""
        out = subprocess.run(
            ["ss", "-Htnp", "state", "established", f"( sport = :{self.port} )"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        owners = Counter(int(line.split("pid=")[1].split(",")[0]) for line in out.splitlines() if "pid=" in line)
        return {pid: owners.get(pid, 0) for pid in self.workers}


def relay_command(port: int, workers: int) -> str:
    return f"{shlex.quote(sys.executable)} -m relay --host 127.0.0.1 --port {port} --workers {workers}"


def start_relay(
    name: str, upstream: str, token: str, workers: int, workdir: Path, trusted: dict[str, str] | None = None
) -> RelayServer:
    """Relay ``name`` following ``upstream`` with ``token``, serving ``chat`` from every worker;
    verifying every document with ``trusted`` (RELAY_TRUSTED_KEYS) when given."""
    port = free_port()
    directory = workdir / name
    directory.mkdir()
    env = bench_env(
        directory,
        RELAY_UPSTREAM=upstream,
        RELAY_TOKEN=token,
        RELAY_CACHE_DIR=str(directory / "cache"),
        RELAY_NAME=name,
        RELAY_LOG_LEVEL="WARNING",
        **({"RELAY_TRUSTED_KEYS": json.dumps(trusted)} if trusted else {}),
    )
    env.pop("DATABASE_URL", None)  # a relay has none
    relay = RelayServer(command=relay_command(port, workers), port=port, env=env, log=workdir / f"{name}.log")
    relay.start(workers)
    wait_fresh(relay, name, token)
    return relay


def wait_fresh(relay: RelayServer, name: str, token: str) -> None:
    """Wait until every worker of ``relay`` serves ``chat`` and holds every chain fresh.

    /healthz answers before a worker holds the documents (/readyz says when one does). And the
    workers share the cache directory: a worker started after another kept the documents there
    loads them from disk, stale until its first poll upstream (a held one, ``STALE_POLL_S``, 2 s)
    is answered; then every long poll held on it is answered at once with a 304 (the chain
    turned fresh), which the SDK and the clients here take as not held: they ask again only
    after their poll interval. So: at least 3 s after the start, and then 20 reads and 20
    /healthz in a row on fresh connections (spread over the workers) all 200 and fresh."""
    began = time.monotonic()
    deadline, good = began + 60, 0
    headers = {"Authorization": f"Bearer {token}"}
    while good < 20 or time.monotonic() - began < 3:
        status, body, _, _ = request(relay.base_url, "GET", f"/api/v1/chains/{POLLED_CHAIN}", headers=headers)
        _, health, _, _ = request(relay.base_url, "GET", "/healthz", headers={})
        try:
            fresh = status == 200 and json.loads(health)["status"] == "ok"
        except (ValueError, KeyError, TypeError):
            fresh = False
        good = good + 1 if fresh else 0
        if time.monotonic() > deadline:
            seen = f"HTTP {status} {body[:200]!r}; /healthz: {health[:300].decode(errors='replace')}"
            raise SystemExit(f"relay {name} does not serve {POLLED_CHAIN} fresh: {seen}")
        time.sleep(0.05 if fresh else 0.2)


def pids_of(server: Server) -> list[int]:
    assert server.process is not None
    return [server.process.pid, *server.workers]


def signing_key(env: dict[str, str]) -> dict[str, str]:
    """A signing key made and activated on the scratch control plane (before its web process
    starts: it signs with it from the first read); the public keys relays verify with."""
    manage = [sys.executable, "manage.py", "signing_keys"]
    subprocess.run([*manage, "create", "--activate"], cwd=ROOT, env=env, check=True, capture_output=True)
    public = subprocess.run(
        [*manage, "public", "--format", "json"], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return dict(json.loads(public.stdout))


# --- 1. reads ------------------------------------------------------------------------------


def in_process_reads(rounds: int = 9, reads: int = 20_000) -> dict[str, float]:
    """The relay's plain read alone: ``Relay.__call__`` with a fake ``send`` (no server, no
    socket), a held chain, a token checked within its cache time; 200s, then 304s with
    ``If-None-Match``; the best of ``rounds`` rounds of ``reads``, in microseconds a read. The
    machine's noise (other work on its cores) shows far less here than under wrk."""
    import asyncio

    sys.path.insert(0, str(ROOT))  # the relay package, not this script (bench/ is first on the path)
    from relay import disk
    from relay.app import Relay
    from relay.config import from_env

    cache = Path(tempfile.mkdtemp(prefix="bench-relay-"))
    relay = Relay(
        from_env({"RELAY_UPSTREAM": "http://127.0.0.1:9", "RELAY_TOKEN": "cpt_x", "RELAY_CACHE_DIR": str(cache)})
    )
    chain = [{"provider": "vendor_a", "model": "large", "timeout_ms": 20000}] * 3
    body = json.dumps({"name": POLLED_CHAIN, "epoch": 0, "version": 7, "expires_at": None, "chain": chain}).encode()
    relay.documents.put(disk.entry_of(body))
    relay._fresh[b"Bearer cpt_x"] = time.monotonic() + 1e6  # noqa: SLF001 - a token checked just now
    headers = [(b"host", b"relay"), (b"authorization", b"Bearer cpt_x"), (b"user-agent", b"wrk")]
    path = f"/api/v1/chains/{POLLED_CHAIN}"
    scopes = {
        "200": {"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": headers},
        "304": {
            "type": "http",
            "method": "GET",
            "path": path,
            "query_string": b"",
            "headers": [*headers, (b"if-none-match", b'"7"')],
        },
    }

    async def send(message: Any) -> None:
        pass

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def run(scope: dict[str, Any]) -> None:
        for _ in range(reads):
            await relay(scope, receive, send)

    loop = asyncio.new_event_loop()
    best = {kind: math.inf for kind in scopes}
    try:
        for _ in range(rounds):
            for kind, scope in scopes.items():
                began = time.perf_counter()
                loop.run_until_complete(run(scope))
                best[kind] = min(best[kind], (time.perf_counter() - began) / reads * 1e6)
    finally:
        loop.close()
        shutil.rmtree(cache, ignore_errors=True)
    print(
        f"relay plain read in-process ({rounds} rounds of {reads:,}, best): "
        f"200 {best['200']:.3f} us, 304 {best['304']:.3f} us"
    )
    return {"call200_us": round(best["200"], 3), "call304_us": round(best["304"], 3)}


def compare_reads(args: argparse.Namespace, front: Server, relay: Server, token: str, workers: int) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    path = f"/api/v1/chains/{POLLED_CHAIN}"
    etag, _ = read_chain(front.base_url, token, POLLED_CHAIN)
    relay_etag, _ = read_chain(relay.base_url, token, POLLED_CHAIN)
    if relay_etag != etag:
        raise SystemExit(f"the relay serves {relay_etag}, the control plane {etag}")
    targets = {"front": (front.base_url + path, auth), "relay": (relay.base_url + path, auth)}
    rps: dict[tuple[str, int, str], list[float]] = {}
    p99: dict[tuple[str, int, str], list[float]] = {}
    print(f"== reads: {args.rounds} rounds of {args.duration} s, wrk -t1 -c{args.connections}, {workers} workers each")
    load_in_rounds(args, targets, etag, workers, rps, p99)
    figures: dict[str, Any] = {}
    for kind in ("200", "304"):
        front_rps, relay_rps = median(rps[("front", workers, kind)]), median(rps[("relay", workers, kind)])
        front_p99, relay_p99 = median(p99[("front", workers, kind)]), median(p99[("relay", workers, kind)])
        pairs = [r / f for f, r in zip(rps[("front", workers, kind)], rps[("relay", workers, kind)], strict=True)]
        print(
            f"  {kind}: front {front_rps:>9,.0f} req/s p99 {front_p99:6.2f} ms   "
            f"relay {relay_rps:>9,.0f} req/s p99 {relay_p99:6.2f} ms   "
            f"relay/front x{relay_rps / front_rps:.2f} (rounds' pairs: median x{median(pairs):.2f}, "
            f"x{min(pairs):.2f}-{max(pairs):.2f}), p99 x{relay_p99 / front_p99:.2f}"
        )
        print(
            "       rounds, front / relay req/s: "
            + ", ".join(
                f"{f:,.0f} / {r:,.0f}"
                for f, r in zip(rps[("front", workers, kind)], rps[("relay", workers, kind)], strict=True)
            )
        )
        figures[f"r{kind}_front_rps"] = round(front_rps)
        figures[f"r{kind}_relay_rps"] = round(relay_rps)
        figures[f"r{kind}_front_p99_ms"] = round(front_p99, 2)
        figures[f"r{kind}_relay_p99_ms"] = round(relay_p99, 2)
        figures[f"r{kind}_ratio"] = round(relay_rps / front_rps, 2)
        figures[f"r{kind}_paired_ratio"] = round(median(pairs), 2)
    # Where the difference goes: each server's CPU (all its processes and threads) per read,
    # over one more round of each, alternating.
    cpu_per_read: dict[tuple[str, str], float] = {}
    for kind, extra in (("200", {}), ("304", {"If-None-Match": etag})):
        for name, server in (("front", front), ("relay", relay)):
            url, headers = targets[name]
            before = cpu_seconds(pids_of(server))
            load = wrk(url, {**headers, **extra}, args.duration, args.connections)
            used = cpu_seconds(pids_of(server)) - before
            cpu_per_read[(name, kind)] = used / (load.rps * args.duration) * 1e6
    for kind in ("200", "304"):
        front_us, relay_us = cpu_per_read[("front", kind)], cpu_per_read[("relay", kind)]
        print(f"  CPU per read ({kind}, all the server's processes): front {front_us:.1f} us, relay {relay_us:.1f} us")
        figures[f"r{kind}_front_cpu_us"] = round(front_us, 1)
        figures[f"r{kind}_relay_cpu_us"] = round(relay_us, 1)
    return figures


# --- 2. long polls on relay B --------------------------------------------------------------


def report_round(number: int, result: Round, clients: int) -> dict[str, float]:
    """Print one round's figures; return them."""
    held = sum(result.held.values())
    delays = result.delays_ms
    timeouts = result.failures.get("timeout", 0)
    errors = sum(n for why, n in result.failures.items() if why != "timeout")
    conn_failures = sum(result.connect_failures.values())
    print(
        f"  round {number}: {result.connected} of {clients} connected"
        + (f" ({dict(result.connect_failures)} failed)" if conn_failures else "")
        + f"; held on relay B {held} ({' + '.join(map(str, result.held.values()))} per worker) "
        f"{result.hold_s:.1f} s after the first connect"
    )
    print(f"    changes on {POLLED_CHAIN} (control plane): {result.change}; t0 = {result.t0_source}")
    if delays:
        print(
            f"    {len(delays)} 200s for {clients} clients x {len(result.changes)} changes: min {delays[0]:.0f} ms, "
            f"p50 {statistics.median(delays):.0f} ms, p90 {percentile(delays, 0.90):.0f} ms, "
            f"p99 {percentile(delays, 0.99):.0f} ms, max {delays[-1]:.0f} ms from each change's answer "
            f"({len(result.changes)} changes)"
        )
    else:
        print(f"    answered 0 of {clients} with a 200")
    print(
        f"    timeouts {timeouts}, 304s {result.held_304 + result.quick_304} ({result.held_304} after the wait, "
        f"{result.quick_304} at once: not held), errors {errors}"
        + (f" {dict((k, v) for k, v in result.failures.items() if k != 'timeout')}" if errors else "")
        + f", connection failures {conn_failures}"
    )
    print(
        f"    CPU over the {result.answer_window_ms:.0f} ms from the change POST until all answered: relay B's "
        f"workers {result.cpu_web_ms:.0f} ms (and {result.web_waited_ms:.0f} ms runnable, waiting for a CPU), "
        f"client processes {result.cpu_clients_ms:.0f} ms"
    )
    total = {
        "before": sum(result.rss_before.values()),
        "held": sum(result.rss_held.values()),
        "after": sum(result.rss_after.values()),
    }

    def described(kb: dict[int, int]) -> str:
        return " / ".join(f"{value / 1024:.1f}" for value in kb.values())

    print(
        f"    relay B RSS MB (main / workers): before {described(result.rss_before)}, held "
        f"{described(result.rss_held)}, after {described(result.rss_after)}; all its processes: "
        + ", ".join(f"{when} {kb / 1024:.1f}" for when, kb in total.items())
    )
    kb_per_poll = (total["held"] - total["before"]) / held if held else math.nan
    retained = (total["after"] - total["before"]) / held if held else math.nan
    per_worker = [
        (result.rss_held[pid] - result.rss_before[pid]) / count for pid, count in result.held.items() if count
    ]
    print(
        f"    KB per held poll, all of relay B's processes (held - before) / held: {kb_per_poll:.1f} "
        f"(per worker: {', '.join(f'{value:.1f}' for value in per_worker)}); still resident once answered "
        f"and closed (after - before) / held: {retained:.1f}"
        + (f"; {result.held_after_close} connections still open" if result.held_after_close else "")
    )
    nan = math.nan
    return {
        "held": held,
        "answered": min((len(change.from_answer_ms) for change in result.changes), default=0),
        "p50_ms": round(statistics.median(delays)) if delays else nan,
        "p99_ms": round(percentile(delays, 0.99)) if delays else nan,
        "max_ms": round(delays[-1]) if delays else nan,
        "timeouts": timeouts,
        "errors": errors + conn_failures,
        "kb_per_poll": round(kb_per_poll, 1),
        "change_ms": round(result.change_ms, 1),
        "cpu_relay_ms": round(result.cpu_web_ms),
    }


def long_polls_through_relays(
    args: argparse.Namespace,
    plane: ScratchPlane,
    control_plane: Server,
    relay_a: RelayServer,
    fleet: ClientProcesses,
    tokens: dict[str, str],
    workers: int,
    workdir: Path,
) -> dict[str, Any]:
    relay_b = start_relay("relay-b", relay_a.base_url, tokens["relay-b"], workers, workdir, args.trusted)
    listener = None
    try:
        print(
            f"== {args.clients} long polls on relay B ({workers} workers): control plane -> relay A -> relay B; "
            f"relay B: {relay_b.command}"
        )
        for _ in range(8):  # every worker's read path warm (and its token checked) before "idle"
            read_chain(relay_b.base_url, tokens["read"], POLLED_CHAIN)
        time.sleep(1.5)
        listener = NotifyListener(plane.database_url)
        listener.start()
        rounds: list[dict[str, float]] = []
        for number in range(1, args.rounds_long_polls + 1):
            result = run_round(number, control_plane, fleet, listener, tokens, args, args.clients, polled=relay_b)
            rounds.append(report_round(number, result, args.clients))
            for server, name in ((relay_b, "relay B"), (relay_a, "relay A"), (control_plane, "the control plane")):
                if server.respawned():
                    print(f"  warning: {name} respawned a worker in round {number}: {server.log}")
        for log in (relay_a.log, relay_b.log):
            lines = log.read_text(errors="replace").splitlines()
            warnings = [line for line in lines if "WARNING" in line or "ERROR" in line or "Traceback" in line]
            if warnings:
                print(f"  {log.name}: {len(warnings)} warning/error lines, last: {warnings[-1][:300]}")
    finally:
        if listener is not None:
            listener.close()
        relay_b.stop()
    # The worst round of each (a bar must hold in every round).
    figures: dict[str, Any] = {}
    for key in rounds[0]:
        values = [figures_of_round[key] for figures_of_round in rounds]
        if any(math.isnan(value) for value in values):
            figures[f"lp_{key}"] = math.nan
        else:
            figures[f"lp_{key}"] = min(values) if key in ("held", "answered") else max(values)
    return figures


# --- the bench -----------------------------------------------------------------------------


def bars(args: argparse.Namespace, figures: dict[str, Any]) -> list[tuple[str, bool]]:
    def number(key: str) -> float:
        return float(figures.get(key, math.nan))

    checks = []
    if args.only != "long-polls":
        for kind in ("200", "304"):
            checks.append(
                (
                    f"relay read throughput >= {READ_BAR}x the front's ({kind}s, median of the rounds' pairs)",
                    number(f"r{kind}_paired_ratio") >= READ_BAR,
                )
            )
    if args.only != "reads":
        kb_per_poll = number("lp_kb_per_poll")
        checks.append((f"<= {KB_PER_POLL_BAR:g} KB per held poll on relay B", kb_per_poll <= KB_PER_POLL_BAR))
        checks.append(
            (
                f"the change reached all {args.clients} clients, p99 <= 1 s from its commit, 0 timeouts",
                number("lp_answered") == args.clients
                and number("lp_timeouts") == 0
                and number("lp_p99_ms") <= ANSWER_P99_BAR_MS,
            )
        )
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=4, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating read rounds per server")
    parser.add_argument("--connections", type=int, default=32, help="wrk's connections")
    parser.add_argument("--clients", type=int, default=5000, help="long polls held on relay B")
    parser.add_argument("--rounds-long-polls", type=int, default=2, help="long-poll rounds, each on new connections")
    parser.add_argument("--wait", type=float, default=55.0, help="the long polls' ?wait= in seconds (at most 60)")
    parser.add_argument(
        "--changes", type=int, default=3, help="changes to the polled chain per long-poll round, each to every client"
    )
    parser.add_argument("--client-processes", type=int, default=2, help="processes the clients are spread over")
    parser.add_argument(
        "--client-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        help="the client processes' event loop",
    )
    parser.add_argument("--connect-rate", type=float, default=1000.0, help="new connections per second, in all")
    parser.add_argument(
        "--settle-timeout", type=float, default=15.0, help="seconds after the last connect to wait for all held"
    )
    parser.add_argument("--poll-interval", type=float, default=10.0, help="a 304 answered at once: asked again after")
    parser.add_argument(
        "--only",
        choices=["reads", "long-polls", "in-process"],
        help="measure one of the two (in-process: the relay's plain read, Relay.__call__ alone, no server)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="relays without RELAY_TRUSTED_KEYS (and a control plane that signs nothing), as before verification",
    )
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop the scratch database",
    )
    # bench/long_polls.py's run_round writes on another chain while the polls are held: not here.
    parser.set_defaults(selects=0, select_timeout=10.0)
    args = parser.parse_args()
    if args.only == "in-process":
        figures = in_process_reads()
        print(" ".join(f"{key}={value}" for key, value in figures.items()))
        return
    if args.only != "long-polls" and shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    if args.only != "reads":
        if shutil.which("ss") is None:
            raise SystemExit("ss is missing (relay B's held polls are counted with it): apt-get install iproute2")
        if not 0 < args.wait <= 60:
            raise SystemExit("--wait must be within 0..60 s (the server's most)")
        check_limits(args.clients, args.client_processes)
    signal.signal(signal.SIGTERM, interrupted)
    # How fast the machine is now (bench/README.md), before anything starts, and again at the end.
    reference_us = python_reference_us()
    load_before = os.getloadavg()[0]
    print(f"python_ref_us {reference_us} (lower is faster); machine load {load_before:.1f}")
    figures: dict[str, Any] = {}

    with scratch_control_plane("bench_relay", args.admin_url) as plane:
        env = {**plane.env, "METRICS_TOKEN": ""}
        env["PROMETHEUS_MULTIPROC_DIR"] = str(Path(env["VAR_DIR"]) / "prometheus")
        tokens = {"read": plane.token("read"), "write": plane.token("write")}
        for name in ("relay-a", "relay-b"):
            tokens[name] = create_token(env, f"bench-{name}", "relay")
        args.trusted = None if args.no_verify else signing_key(env)
        figures["verified"] = str(args.trusted is not None).lower()
        # Forked before any thread (the LISTEN connection's) starts.
        fleet = None
        if args.only != "reads":
            fleet = ClientProcesses(args.client_processes, args.poll_interval, args.client_loop)
        workdir = Path(tempfile.mkdtemp(prefix="bench-relay-"))
        port = free_port()
        command = serve_command(env, port)
        workers = option(command, "--workers")
        control_plane = Server(command=command, port=port, env=env, log=workdir / "granian.log")
        relay_a = None
        try:
            print(f"control plane: {command}")
            control_plane.start(workers)
            relay_a = start_relay("relay-a", control_plane.base_url, tokens["relay-a"], workers, workdir, args.trusted)
            print(f"relay A: {relay_a.command}")
            figures["workers"] = workers
            if args.only != "long-polls":
                figures.update(compare_reads(args, control_plane, relay_a, tokens["read"], workers))
            if fleet is not None:
                figures["lp_clients"] = args.clients
                figures.update(
                    long_polls_through_relays(args, plane, control_plane, relay_a, fleet, tokens, workers, workdir)
                )
        finally:
            if relay_a is not None:
                relay_a.stop()
            control_plane.stop()
            if fleet is not None:
                fleet.stop()
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"(machine load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores)")
    met = True
    for name, ok in bars(args, figures):
        print(f"bar: {name}: {'met' if ok else 'NOT met'}")
        met = met and ok
    figures["bars_met"] = str(met).lower()
    figures["python_ref_us"] = reference_us
    figures["python_ref_us_end"] = python_reference_us()
    print(" ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: the servers and the client processes were stopped, the scratch database dropped")
        sys.exit(130)
