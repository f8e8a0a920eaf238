"""Relays: a relay's read throughput beside the control plane's read front, a change
reaching 5,000 long polls held on a relay of a relay, and a fleet of 100,000 through relays.

On a scratch PostgreSQL database, starts the control plane's production web process with
exactly `make serve`'s granian command line (read from the Makefile, as bench/long_polls.py
does: WEB_WORKERS workers, 2 by default) and relay A (``python -m relay`` following it, as
many workers, its documents in a temporary directory, a read token of its own; not for 3.).
Then:

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
3. ``--only fleet``: a hundred thousand services through relays, one control plane, one box.
   The control plane's web process as above (signing unless ``--no-verify``) and ``--relays``
   relays, each following the control plane directly with ``--relay-workers`` workers (each
   relay worker holds one long poll upstream per chain: the control plane answers R x W
   followers, a few ms; a tier of relays between would add a hop to every change and a relay
   to fail, and save the control plane nothing it notices: the cost is in the relays that
   answer the clients, the same with or without a tier). ``--clients`` clients (the SDK's
   polls as in 2., re-polling after each change with its ETag and applied version) from
   ``--client-processes`` processes: process i opens all of its clients on relay i %
   relays, at ``--connect-rate`` in all. Defaults fit the machine's limits (20,000 open
   files per process, ~28,000 local ports per destination ip:port): one relay per 25,000
   clients, one relay worker per 12,500 of a relay's clients, one client process per
   12,500 clients (as many for each relay), so 100,000 = 4 relays x 2 workers and 8 client
   processes; 2,000 connections/s (500/s per relay, well inside its accept queue, capped at
   net.core.somaxconn). Waits until every connection is established on a relay (``ss``)
   and every client has sent its poll; then ``--changes`` changes on the control plane
   (select ``pin_secondary`` / revert on ``chat``), each timed to its answer to the caller,
   and each client's 200 with the new ETag timed from that answer; after each, waits until
   every client has it and has asked again with it. Lost: a client still connected that
   never had a change. Prints per relay clients connected and held (per worker), per
   change p50/p90/p99/max and how many had it, timeouts and errors, the CPU the relays
   (all their processes), the client processes and the control plane used from the POST
   until every client asked again, the resident memory of all the relays' processes (main
   and workers) idle, held and at the peak held again after the changes, as KB per held
   client ((peak - idle) / held), and the control plane's.

A relay has no per-worker gauge of its held polls (its /healthz answers for the worker that
took the request): "held" per worker is the established connections each relay worker has
on its port (``ss``), every one of them a long poll sent at connect.

    python bench/relay.py [--duration 4] [--rounds 5] [--connections 32]
                          [--clients 5000] [--rounds-long-polls 2] [--wait 55]
                          [--only reads|long-polls|in-process] [--no-verify]
                          [--admin-url postgres://...]
    python bench/relay.py --only fleet [--clients 100000] [--relays 4] [--relay-workers 2]
                          [--client-processes 8] [--connect-rate 2000] [--changes 3]
                          [--wait 55] [--no-verify]

The control plane signs (a key made and activated first) and both relays verify every document
with its keys (RELAY_TRUSTED_KEYS); ``--no-verify``: neither, as before. ``--only in-process``:
the relay's plain read alone (``Relay.__call__``, no server), best of 9 rounds of 20,000.

Bars (the relay's issue): the relay's read throughput >= 0.9x the control plane's read front
on the same box (the median of the rounds' pairs, 200s and 304s); <= 20 KB per held poll on
relay B; a change reaches all of the clients, p99 <= 1 s from its commit, no timeouts (every
round). The fleet's (``--only fleet``): every client connected and held; 0 lost, no timeouts or
errors, every change made; p99 <= 2 s from the change's answer (the worst change); its memory
per client stated, no bar. Everything runs on this machine's cores: the servers, the relays,
wrk and the clients (at 100,000 clients, the relays and the clients share the two cores).
Needs wrk (Debian package `wrk`; not for 2. or 3.) and ss (iproute2). Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_polls import (  # noqa: E402
    GRACE_S,
    POLLED_CHAIN,
    POLLED_PIN,
    ChangeTimes,
    ClientProcesses,
    Outcome,
    Round,
    Server,
    check_limits,
    connect_hints,
    interrupted,
    open_timeout,
    option,
    read_chain,
    request,
    run_round,
    runqueue_wait_ms,
    serve_command,
    worsen,
    write,
)
from propagation import NotifyListener, cpu_ms, raise_open_files_limit, somaxconn  # noqa: E402
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
    # A token checked just now for this chain (verdicts are per token and chain).
    relay._fresh[b"Bearer cpt_x", POLLED_CHAIN] = time.monotonic() + 1e6  # noqa: SLF001
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


# --- 3. a fleet through relays (--only fleet) ------------------------------------------------

# A client process and a relay worker hold at most this many connections by default, well under
# the hard open-files limit (20,000 on the bench machine): a relay's workers share its port's
# connections as the kernel hands them out, not evenly.
CLIENTS_PER_PROCESS = 12_500
# Clients per relay port by default: each connection to one ip:port takes a local port of its
# own (net.ipv4.ip_local_port_range, ~28,000 here).
CLIENTS_PER_PORT = 25_000
FLEET_P99_BAR_MS = 2000.0
FLEET_NAMES = "bench-relay-fleet/instance-{:06d}"


def fleet_layout(args: argparse.Namespace) -> None:
    """Fill in ``--relays``, ``--relay-workers`` and ``--client-processes`` for ``--clients``
    (at most ``CLIENTS_PER_PORT`` clients per relay, ``CLIENTS_PER_PROCESS`` per relay worker
    and per client process, as many client processes for each relay); raise the open-files
    limit; stop when the machine's limits cannot hold the layout."""
    clients = args.clients
    if args.relays is None:
        args.relays = max(1, math.ceil(clients / CLIENTS_PER_PORT))
    per_relay = math.ceil(clients / args.relays)
    if args.relay_workers is None:
        args.relay_workers = max(1, math.ceil(per_relay / CLIENTS_PER_PROCESS))
    if args.client_processes is None:
        wanted = max(args.relays, math.ceil(clients / CLIENTS_PER_PROCESS))
        args.client_processes = math.ceil(wanted / args.relays) * args.relays  # as many for each relay
    if args.client_processes < args.relays:
        raise SystemExit(f"--client-processes {args.client_processes}: at least one per relay ({args.relays})")
    per_process = math.ceil(clients / args.client_processes)
    per_port = max(fleet_assignment(clients, args.client_processes, args.relays))
    per_worker = math.ceil(per_port / args.relay_workers)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # The relays and the client processes inherit the limit; a relay worker may be handed more
    # than its share: as many descriptors as allowed.
    ceiling = hard if hard != resource.RLIM_INFINITY else 2 * max(per_process, per_worker) + 1024
    soft = raise_open_files_limit(ceiling)
    for what, count in (("client process", per_process), ("relay worker (an even share)", per_worker)):
        if count + 512 > soft:
            raise SystemExit(
                f"{count} connections per {what} need ~{count + 512} open files; the limit is {soft}: "
                "use more --client-processes / --relays / --relay-workers"
            )
        if count > CLIENTS_PER_PROCESS:
            print(f"  note: {count} connections per {what}, over {CLIENTS_PER_PROCESS:,} (open files limit {soft})")
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 0, 65535
    if per_port + 1000 > high - low + 1:
        raise SystemExit(
            f"{per_port} clients on one relay port: net.ipv4.ip_local_port_range {low}-{high} has "
            f"{high - low + 1} local ports per destination: use more --relays"
        )
    args.per_worker = per_worker


def fleet_assignment(clients: int, processes: int, relays: int) -> list[int]:
    """Clients per relay: client process ``i`` takes names ``i::processes`` and opens them all
    on relay ``i % relays``."""
    per_relay = [0] * relays
    for index in range(processes):
        per_relay[index % relays] += len(range(index, clients, processes))
    return per_relay


@dataclass
class FleetChange(ChangeTimes):
    """One change on the control plane while the fleet holds its polls through the relays
    (``missing``: lost)."""

    all_had_ms: float = math.nan  # POST until every client still connected had it
    asking_again_ms: float = math.nan  # POST until every client had asked again with it
    cpu_relays_ms: float = 0.0
    relays_waited_ms: float = 0.0
    cpu_clients_ms: float = 0.0
    cpu_plane_ms: float = 0.0
    held: list[dict[int, int]] = field(default_factory=list)  # per relay, held again afterwards
    rss_relays: dict[int, int] = field(default_factory=dict)
    rss_plane: dict[int, int] = field(default_factory=dict)


def fleet_change(
    index: int,
    plane: Server,
    relays: list[RelayServer],
    fleet: ClientProcesses,
    write_token: str,
    target: str,
    default: str,
    args: argparse.Namespace,
) -> FleetChange:
    """bench/long_polls.py's ``make_change`` over several relays: select (or revert to)
    ``target`` on the polled chain through the control plane; wait until every client still
    connected has the new document and has asked again with it (``asking``); then the relays'
    held connections and the memory."""
    change = FleetChange()
    relay_pids = [pid for relay in relays for pid in pids_of(relay)]
    answer: dict[str, Any] = {}

    def post() -> None:
        reason = f"bench: relay fleet, change {index + 1}"
        answer["status"], answer["body"], answer["ms"] = write(
            plane.base_url, write_token, POLLED_CHAIN, target, default, reason, args.wait
        )
        answer["returned"] = time.time()

    cpu = (cpu_ms(relay_pids), cpu_ms(fleet.pids), cpu_ms(pids_of(plane)), runqueue_wait_ms(relay_pids))
    began = time.monotonic()
    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    poster.join(args.wait + GRACE_S)
    if answer.get("status") != 200:
        status = answer.get("status") or "no answer"
        change.label = f"{target}: HTTP {status}" + (f" after {answer['ms']:.0f} ms" if "ms" in answer else "")
        return change
    document = json.loads(answer["body"])
    version, epoch = document["version"], document.get("epoch", 0)
    change.etag = f'"{version}"' if not epoch else f'"{epoch}.{version}"'
    change.ms, change.answered_at = answer["ms"], answer["returned"]
    change.label = f"{target} v{version} answered in {change.ms:.0f} ms"
    deadline = time.monotonic() + args.wait + GRACE_S
    while time.monotonic() < deadline and fleet.count("holding", change.etag) < fleet.alive():
        time.sleep(0.1)
    change.all_had_ms = (time.monotonic() - began) * 1000
    deadline = time.monotonic() + args.settle_timeout
    while time.monotonic() < deadline and fleet.count("asking", change.etag) < fleet.alive():
        time.sleep(0.1)
    change.asking_again_ms = (time.monotonic() - began) * 1000
    change.cpu_relays_ms = cpu_ms(relay_pids) - cpu[0]
    change.cpu_clients_ms = cpu_ms(fleet.pids) - cpu[1]
    change.cpu_plane_ms = cpu_ms(pids_of(plane)) - cpu[2]
    change.relays_waited_ms = runqueue_wait_ms(relay_pids) - cpu[3]
    time.sleep(1.2)  # the last polls taken in, the memory settled
    change.held = [relay.held() for relay in relays]
    change.rss_relays = rss_of(relays)
    change.rss_plane = plane.rss_kb()
    return change


def rss_of(relays: list[RelayServer]) -> dict[int, int]:
    """VmRSS in KB of every process of every relay (main and workers)."""
    return {pid: kb for relay in relays for pid, kb in relay.rss_kb().items()}


def mb(kb: dict[int, int]) -> float:
    return sum(kb.values()) / 1024


def run_fleet(args: argparse.Namespace) -> dict[str, Any]:
    """The control plane, ``--relays`` relays following it, ``--clients`` clients spread over
    the relays' ports; ``--changes`` changes, each timed to every client."""
    figures: dict[str, Any] = {
        "fleet_clients": args.clients,
        "fleet_relays": args.relays,
        "fleet_relay_workers": args.relay_workers,
        "fleet_client_processes": args.client_processes,
    }
    with scratch_control_plane("bench_relay_fleet", args.admin_url) as scratch:
        env = {**scratch.env, "METRICS_TOKEN": ""}
        env["PROMETHEUS_MULTIPROC_DIR"] = str(Path(env["VAR_DIR"]) / "prometheus")
        tokens = {"read": scratch.token("read"), "write": scratch.token("write")}
        names = [f"relay-{number}" for number in range(1, args.relays + 1)]
        for name in names:
            tokens[name] = create_token(env, f"bench-{name}", "relay")
        args.trusted = None if args.no_verify else signing_key(env)
        figures["verified"] = str(args.trusted is not None).lower()
        fleet = ClientProcesses(args.client_processes, args.poll_interval, args.client_loop)  # before any thread
        workdir = Path(tempfile.mkdtemp(prefix="bench-relay-fleet-"))
        port = free_port()
        command = serve_command(env, port)
        plane = Server(command=command, port=port, env=env, log=workdir / "granian.log")
        relays: list[RelayServer] = []
        try:
            print(f"control plane: {command}")
            plane.start(option(command, "--workers"))
            for name in names:
                relays.append(
                    start_relay(name, plane.base_url, tokens[name], args.relay_workers, workdir, args.trusted)
                )
            print(
                f"{args.relays} relays, each following the control plane: {relays[0].command} "
                f"(ports {', '.join(str(relay.port) for relay in relays)}; backlog capped at net.core.somaxconn "
                f"{somaxconn()})"
            )
            figures.update(drive_fleet(args, plane, relays, fleet, tokens))
            for relay in relays:
                lines = relay.log.read_text(errors="replace").splitlines()
                warnings = [line for line in lines if "WARNING" in line or "ERROR" in line or "Traceback" in line]
                if warnings:
                    print(f"  {relay.log.name}: {len(warnings)} warning/error lines, last: {warnings[-1][:300]}")
        finally:
            for relay in relays:
                relay.stop()
            plane.stop()
            fleet.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    return figures


def drive_fleet(
    args: argparse.Namespace,
    plane: Server,
    relays: list[RelayServer],
    fleet: ClientProcesses,
    tokens: dict[str, str],
) -> dict[str, Any]:
    clients, processes = args.clients, len(fleet.pipes)
    for relay in relays:
        for _ in range(4 * args.relay_workers):  # every worker's read path warm (its token checked) before "idle"
            read_chain(relay.base_url, tokens["read"], POLLED_CHAIN)
    etag, document = read_chain(plane.base_url, tokens["read"], POLLED_CHAIN)
    for relay in relays:
        served, _ = read_chain(relay.base_url, tokens["read"], POLLED_CHAIN)
        if served != etag:
            raise SystemExit(f"relay on port {relay.port} serves {served}, the control plane {etag}")
    time.sleep(1.5)
    rss_idle, plane_idle = rss_of(relays), plane.rss_kb()

    # 1. Connect: client process i opens its names on relay i % relays.
    per_relay = fleet_assignment(clients, processes, len(relays))
    print(
        f"== {clients:,} clients on {len(relays)} relay(s) x {args.relay_workers} worker(s) ("
        + ", ".join(f"{count:,}" for count in per_relay)
        + f" per relay, ~{args.per_worker:,} per worker), from {processes} client processes "
        f"(~{math.ceil(clients / processes):,} each, {args.client_loop}) at {args.connect_rate:g} connections/s"
    )
    names = [FLEET_NAMES.format(index) for index in range(clients)]
    specs = [
        {
            "port": relays[index % len(relays)].port,
            "names": names[index::processes],
            "path": f"/api/v1/chains/{POLLED_CHAIN}",
            "token": tokens["read"],
            "etag": etag,
            "version": document["version"],
            "rate": args.connect_rate / processes,
            "wait": args.wait,
            "identity": True,
        }
        for index in range(processes)
    ]
    opened_at = time.monotonic()
    opened = fleet.ask("open", specs, timeout=open_timeout(clients, args.connect_rate))
    connected = [0] * len(relays)
    connect_failures: Counter[str] = Counter()
    retries = 0
    for index, (_, result) in enumerate(opened):
        connected[index % len(relays)] += result["connected"]
        connect_failures.update(result["failures"])
        retries += result["retries"]
    connected_s = time.monotonic() - opened_at
    deadline = time.monotonic() + args.settle_timeout
    while True:
        alive = fleet.alive()
        held = [relay.held() for relay in relays]
        if sum(sum(counts.values()) for counts in held) >= alive and fleet.count("asking", etag) >= alive:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    hold_s = time.monotonic() - opened_at
    time.sleep(1.2)
    held = [relay.held() for relay in relays]
    rss_held, plane_held = rss_of(relays), plane.rss_kb()
    total_held = sum(sum(counts.values()) for counts in held)
    print(
        f"  connected {sum(connected):,} of {clients:,} in {connected_s:.1f} s"
        + (f" ({dict(connect_failures)} failed)" if connect_failures else "")
        + (f" ({retries:,} connects tried again, as the SDK would)" if retries else "")
        + f"; held {total_held:,} ({hold_s:.1f} s after the first connect)"
    )
    for number, (relay, count, counts) in enumerate(zip(relays, connected, held, strict=True), 1):
        print(
            f"    relay {number} (port {relay.port}): connected {count:,}, held {sum(counts.values()):,} "
            f"({' + '.join(f'{value:,}' for value in counts.values())} per worker)"
        )
    for hint in connect_hints(connect_failures):
        print(f"    {hint}")

    # 2. The changes.
    default, live = document["default"]["preset"], document["preset"]
    changes: list[FleetChange] = []
    for index in range(args.changes):
        target = POLLED_PIN if live == default else default
        change = fleet_change(index, plane, relays, fleet, tokens["write"], target, default, args)
        changes.append(change)
        if not change.etag:
            break  # the next would start from an unknown state
        live = target
    outcomes: list[Outcome] = [outcome for answers in fleet.ask("collect", timeout=300) for outcome in answers]
    fleet.ask("close", timeout=120)
    failures = Counter(outcome.failure for outcome in outcomes if outcome.failure)
    for change in changes:
        for outcome in outcomes:
            at = next((when for when, tag in outcome.answers if tag == change.etag), None)  # its first 200 of it
            if at is None:
                change.missing += 0 if outcome.failure else 1
            else:
                change.from_answer_ms.append((at - change.answered_at) * 1000)
        change.from_answer_ms.sort()

    # 3. Figures.
    worst: dict[str, float] = {"p50": math.nan, "p90": math.nan, "p99": math.nan, "max": math.nan}
    for number, change in enumerate(changes, 1):
        print(f"  change {number} on {POLLED_CHAIN} (control plane): {change.label}")
        delays = change.from_answer_ms
        if not change.etag:
            continue
        if delays:
            worsen(worst, delays)
            print(
                f"    {len(delays):,} of {clients:,} had it: from its answer p50 {percentile(delays, 0.5):.0f}, "
                f"p90 {percentile(delays, 0.9):.0f}, p99 {percentile(delays, 0.99):.0f}, max {delays[-1]:.0f} ms "
                f"(first {delays[0]:.0f}); lost (still connected, never had it) {change.missing}; all had it "
                f"{change.all_had_ms:.0f} ms after the POST, all asked again {change.asking_again_ms:.0f} ms after"
            )
        else:
            print(f"    none of {clients:,} had it; lost {change.missing}")
        print(
            f"    CPU from the POST until all asked again: relays {change.cpu_relays_ms:.0f} ms (and "
            f"{change.relays_waited_ms:.0f} ms runnable, waiting for a CPU), client processes "
            f"{change.cpu_clients_ms:.0f} ms, control plane {change.cpu_plane_ms:.0f} ms; held again "
            + ", ".join(f"{sum(counts.values()):,}" for counts in change.held)
            + f" per relay; RSS relays {mb(change.rss_relays):.1f} MB, control plane {mb(change.rss_plane):.1f} MB"
        )
    made = [change for change in changes if change.etag]
    lost = sum(change.missing for change in made)
    timeouts = failures.get("timeout", 0)
    errors = sum(count for why, count in failures.items() if why != "timeout")
    held_304 = sum(outcome.held_304 for outcome in outcomes)
    quick_304 = sum(outcome.quick_304 for outcome in outcomes)
    print(
        f"  lost {lost}; timeouts {timeouts}; errors {errors}"
        + (f" {dict((why, n) for why, n in failures.items() if why != 'timeout')}" if errors else "")
        + f"; connection failures {sum(connect_failures.values())}; 304s {held_304 + quick_304} "
        f"({held_304} after the wait, {quick_304} at once: not held)"
    )
    for number, relay in enumerate(relays, 1):
        if relay.respawned():
            print(f"  warning: relay {number} respawned a worker: {relay.log}")
    peak = dict(rss_held)
    plane_peak = dict(plane_held)
    for change in made:
        for pid, kb in change.rss_relays.items():
            peak[pid] = max(peak.get(pid, 0), kb)
        for pid, kb in change.rss_plane.items():
            plane_peak[pid] = max(plane_peak.get(pid, 0), kb)
    kb_held = (mb(rss_held) - mb(rss_idle)) * 1024 / total_held if total_held else math.nan
    kb_peak = (mb(peak) - mb(rss_idle)) * 1024 / total_held if total_held else math.nan
    print(
        f"  memory, all {len(relays) * (args.relay_workers + 1)} relay processes (main + workers): idle "
        f"{mb(rss_idle):.1f} MB, held {mb(rss_held):.1f} MB, peak held again after the changes {mb(peak):.1f} MB: "
        f"{kb_held:.1f} KB per held client (held - idle), {kb_peak:.1f} KB at the peak; control plane "
        f"(main + workers): idle {mb(plane_idle):.1f}, held {mb(plane_held):.1f}, peak {mb(plane_peak):.1f} MB"
    )
    nan = math.nan
    return {
        "fleet_connected": sum(connected),
        "fleet_held": total_held,
        "fleet_held_per_relay": "/".join(str(sum(counts.values())) for counts in held),
        "fleet_max_per_worker": max((count for counts in held for count in counts.values()), default=0),
        "fleet_changes_made": len(made),
        "fleet_answered": min((len(change.from_answer_ms) for change in made), default=0),
        "fleet_lost": lost,
        "fleet_timeouts": timeouts,
        "fleet_errors": errors + sum(connect_failures.values()),
        "fleet_quick_304s": quick_304,
        **{f"fleet_{name}_ms": round(value) if not math.isnan(value) else nan for name, value in worst.items()},
        "fleet_change_ms": round(max(change.ms for change in made), 1) if made else nan,
        "fleet_all_had_ms": round(max(change.all_had_ms for change in made)) if made else nan,
        "fleet_cpu_relays_ms": round(max(change.cpu_relays_ms for change in made)) if made else nan,
        "fleet_cpu_clients_ms": round(max(change.cpu_clients_ms for change in made)) if made else nan,
        "fleet_cpu_plane_ms": round(max(change.cpu_plane_ms for change in made)) if made else nan,
        "fleet_relays_rss_idle_mb": round(mb(rss_idle), 1),
        "fleet_relays_rss_peak_mb": round(mb(peak), 1),
        "fleet_kb_per_client": round(kb_peak, 1),
        "fleet_plane_rss_peak_mb": round(mb(plane_peak), 1),
    }


# --- the bench -----------------------------------------------------------------------------


def bars(args: argparse.Namespace, figures: dict[str, Any]) -> list[tuple[str, bool]]:
    def number(key: str) -> float:
        return float(figures.get(key, math.nan))

    checks = []
    if args.only == "fleet":
        return [
            (
                f"all {args.clients} clients connected and held",
                number("fleet_connected") == args.clients and number("fleet_held") == args.clients,
            ),
            (
                f"0 lost: every client still connected had each of the {args.changes} changes; 0 timeouts, 0 errors",
                number("fleet_changes_made") == args.changes
                and number("fleet_lost") == 0
                and number("fleet_timeouts") == 0
                and number("fleet_errors") == 0,
            ),
            (
                f"p99 <= {FLEET_P99_BAR_MS / 1000:g} s from the change's answer (the worst change)",
                number("fleet_p99_ms") <= FLEET_P99_BAR_MS,
            ),
        ]
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


def relays_a_and_b(args: argparse.Namespace) -> dict[str, Any]:
    """Parts 1 and 2: the control plane, relay A following it (reads), relay B following relay A
    (long polls)."""
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
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=4, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating read rounds per server")
    parser.add_argument("--connections", type=int, default=32, help="wrk's connections")
    parser.add_argument(
        "--clients", type=int, help="long polls held on relay B (default 5000); --only fleet: in all (default 100000)"
    )
    parser.add_argument("--rounds-long-polls", type=int, default=2, help="long-poll rounds, each on new connections")
    parser.add_argument("--wait", type=float, default=55.0, help="the long polls' ?wait= in seconds (at most 60)")
    parser.add_argument(
        "--changes", type=int, default=3, help="changes to the polled chain per long-poll round, each to every client"
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        help="processes the clients are spread over (default 2; --only fleet: one per 12,500 clients, "
        "as many for each relay)",
    )
    parser.add_argument(
        "--relays", type=int, help="--only fleet: relays following the control plane (default: one per 25,000 clients)"
    )
    parser.add_argument(
        "--relay-workers",
        type=int,
        help="--only fleet: workers per relay (default: one per 12,500 of its clients)",
    )
    parser.add_argument(
        "--client-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        help="the client processes' event loop",
    )
    parser.add_argument(
        "--connect-rate", type=float, help="new connections per second, in all (default 1000; --only fleet: 2000)"
    )
    parser.add_argument(
        "--settle-timeout", type=float, default=15.0, help="seconds after the last connect to wait for all held"
    )
    parser.add_argument("--poll-interval", type=float, default=10.0, help="a 304 answered at once: asked again after")
    parser.add_argument(
        "--only",
        choices=["reads", "long-polls", "in-process", "fleet"],
        help="measure one of the two (in-process: the relay's plain read, Relay.__call__ alone, no server); "
        "fleet: --clients through --relays relays",
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
    fleet_mode = args.only == "fleet"
    if args.clients is None:
        args.clients = 100_000 if fleet_mode else 5000
    if args.connect_rate is None:
        args.connect_rate = 2000.0 if fleet_mode else 1000.0
    if not fleet_mode:
        if args.relays is not None or args.relay_workers is not None:
            raise SystemExit("--relays and --relay-workers are for --only fleet")
        if args.client_processes is None:
            args.client_processes = 2
    if args.only not in ("long-polls", "fleet") and shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    if args.only != "reads":
        if shutil.which("ss") is None:
            raise SystemExit("ss is missing (a relay's held polls are counted with it): apt-get install iproute2")
        if not 0 < args.wait <= 60:
            raise SystemExit("--wait must be within 0..60 s (the server's most)")
        if fleet_mode:
            fleet_layout(args)
        else:
            check_limits(args.clients, args.client_processes)
    signal.signal(signal.SIGTERM, interrupted)
    # How fast the machine is now (bench/README.md), before anything starts, and again at the end.
    reference_us = python_reference_us()
    load_before = os.getloadavg()[0]
    print(f"python_ref_us {reference_us} (lower is faster); machine load {load_before:.1f}")
    figures = run_fleet(args) if fleet_mode else relays_a_and_b(args)

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
