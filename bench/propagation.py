"""Propagation: how long after a select every SDK instance has applied the new chain.

Creates a scratch PostgreSQL database, starts the production web process on it (granian,
ASGI, ``--web-workers`` processes, whose long polls wait on an asyncio event woken by
LISTEN/NOTIFY), then starts ``--clients`` real ``ChainClient`` instances spread over
``--processes`` client processes (each a distinct ``bench/client-N`` instance; one process
holding 1,000 of them would be bound by its own GIL). Once every client holds version 1 and
has re-issued its long poll, one select goes through the HTTP API with a write token, and
each client's ``on_change`` records ``time.time()`` when it applies the new version.

Times are relative to t0, the moment the change was committed as seen from here (the
document's ``updated_at`` has second precision, so it cannot serve). Everything runs on
this machine, so the clocks agree. The commit lies between the wall clock taken right
before the select's POST and the one taken when it returns; the return alone is a poor
t0 under load, because the web worker that ran the select sends its answer only after the
burst of long-poll answers it has just woken (the POST then "returns" after most clients
applied). So t0 is the earlier of the POST's return and the arrival of the change's
NOTIFY at a LISTEN connection of this script's own: both come after the commit, so t0 is
still at or after it, and the figures are if anything flattering by a few milliseconds.
The script also prints how the held long polls are spread over the web workers, and the
CPU the web workers and the client processes used from the POST until every client had
applied (on a 2-core machine that is what bounds the tail).

With ``--mode poll`` the clients poll every ``--poll-interval`` seconds instead, started
evenly over one interval so their polls are out of phase, as a real fleet's are.

With ``--client typescript`` the clients are the TypeScript client's (sdk-ts, built first with
``npm ci && npm run build`` there): ``--processes`` Node processes (default 2) each run
``bench/ts_clients.mjs``, a ChainClient per name on one event loop, answering the same commands
as the Python client processes, one JSON line each way.

    python bench/propagation.py [--clients 1000] [--mode longpoll|poll] [--processes K]
                                [--web-workers 2] [--poll-interval 2] [--client python|typescript]

Bars (DESIGN section 12): long polling, p99 <= 250 ms for 1,000 clients; plain polling,
every client within poll interval + 1 s. Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import queue
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_throughput import ROOT, cpu_seconds, free_port, granian, scratch_control_plane, start, stop, wait_until_up  # noqa: E402
from select_latency import percentile  # noqa: E402

try:
    import chainclient  # noqa: F401
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT / "sdk"))

from sdk_current import DEFAULT, REGISTRY, example_client  # noqa: E402

from chainclient import ChainDocument  # noqa: E402

CHANGE_CHANNEL = "chain_changed"  # read_path.notifications.CHANGE_CHANNEL


# --- the client processes ------------------------------------------------------------------


def run_clients(
    conn: Connection,
    base_url: str,
    token: str,
    names: list[str],
    mode: str,
    poll_interval: float,
    wait_s: float,
    offsets: list[float],
) -> None:
    """One client process: start a ChainClient per name (each ``offsets[i]`` seconds after
    the first), then answer the parent's commands."""
    applied: dict[str, dict[int, float]] = {name: {} for name in names}

    def on_change_for(name: str):  # type: ignore[no-untyped-def]
        times = applied[name]

        def on_change(document: ChainDocument) -> None:
            times[document.version] = time.time()

        return on_change

    clients = [
        example_client(
            base_url,
            token=token,
            state_dir=None,
            poll_interval=poll_interval,
            long_poll=mode == "longpoll",
            wait_s=wait_s,
            instance=name,
            on_change=on_change_for(name),
            report_usage=False,
            timeout=10.0,
            max_backoff=2.0,
        )
        for name in names
    ]
    began = time.monotonic()
    for client, offset in sorted(zip(clients, offsets, strict=True), key=lambda pair: pair[1]):
        time.sleep(max(0.0, began + offset - time.monotonic()))
        client.start()
    conn.send(("started", len(clients)))
    while True:
        command, argument = conn.recv()
        if command == "versions":
            conn.send(Counter(client.current().version for client in clients))
        elif command == "failures":
            conn.send(sum(client.health()["consecutive_failures"] > 0 for client in clients))
        elif command == "collect":
            version, deadline = argument
            while time.time() < deadline and any(client.current().version < version for client in clients):
                time.sleep(0.02)
            conn.send([applied[name].get(version) for name in names])
        elif command == "stop":
            break
    for client in clients:
        client.stop(timeout=0.01)
    conn.send(("stopped", len(clients)))


class NodeClients:
    """A Node process of TypeScript ChainClients (bench/ts_clients.mjs), spoken to as a client
    process's pipe is: ``send`` a command, ``poll`` for and ``recv`` its answer."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.process.pid
        self.lines: queue.Queue[Any] = queue.Queue()
        self.ready: list[Any] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def send(self, message: tuple[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(list(message)) + "\n")
        self.process.stdin.flush()

    def poll(self, timeout: float) -> bool:
        if not self.ready:
            try:
                self.ready.append(self.lines.get(timeout=timeout))
            except queue.Empty:
                return False
        return True

    def recv(self) -> Any:
        answer = self.ready.pop() if self.ready else self.lines.get()
        if isinstance(answer, dict):  # a version census: JSON keys are strings
            return Counter({int(version): count for version, count in answer.items()})
        return answer

    def join(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()


def start_node_clients(
    names: list[str], base_url: str, token: str, mode: str, poll_interval: float, wait_s: float
) -> NodeClients:
    # The registry and compiled-in default the Python clients use (bench/sdk_current.py).
    registry = {
        name: {"destination": p.destination, "models": {m: sorted(c) for m, c in p.models.items()}}
        for name in REGISTRY
        for p in [REGISTRY[name]]
    }
    default = [step.to_json() for step in DEFAULT]
    script = Path(__file__).resolve().parent / "ts_clients.mjs"
    return NodeClients(
        [
            *os.environ.get("BENCH_NODE", "node").split(),  # e.g. "node --cpu-prof" to profile
            str(script),
            base_url,
            token,
            json.dumps(names),
            mode,
            str(poll_interval),
            str(wait_s),
            json.dumps(registry),
            json.dumps(default),
        ]
    )


# --- the bench -----------------------------------------------------------------------------


def raise_open_files_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < needed:
        print(f"  warning: RLIMIT_NOFILE is {soft} (hard {hard}); {needed} descriptors wanted")
    return soft


def children_of(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far, in ms (10 ms resolution)."""
    return cpu_seconds(pids) * 1000


def connections_per_process(port: int) -> list[int]:
    """Established connections to ``port`` per server process (via ss), most first."""
    try:
        out = subprocess.run(
            ["ss", "-Htnp", "state", "established", f"( sport = :{port} )"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    owners = Counter(line.split("pid=")[1].split(",")[0] for line in out.splitlines() if "pid=" in line)
    return sorted(owners.values(), reverse=True)


def somaxconn() -> int:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return 4096


class NotifyListener(threading.Thread):
    """A LISTEN connection of our own: when did PostgreSQL deliver the change notification?"""

    def __init__(self, database_url: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.conn.execute(f"LISTEN {CHANGE_CHANNEL}")
        self.received: list[tuple[float, str]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for note in self.conn.notifies(timeout=0.2):
                self.received.append((time.time(), note.payload))

    def close(self) -> None:
        self.done.set()
        self.join(2)
        self.conn.close()


def command(pipes: list[Connection], name: str, argument: Any = None, timeout: float = 60.0) -> list[Any]:
    for pipe in pipes:
        pipe.send((name, argument))
    answers = []
    for pipe in pipes:
        if not pipe.poll(timeout):
            raise SystemExit(f"a client process did not answer {name!r} within {timeout:g}s")
        answers.append(pipe.recv())
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--mode", choices=("longpoll", "poll"), default="longpoll")
    parser.add_argument(
        "--processes", type=int, default=0, help="client processes (default: one per 250 clients, at least 2)"
    )
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument(
        "--client", choices=("python", "typescript"), default="python", help="which SDK's clients (default python)"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=2.0, help="plain polling interval in seconds (--mode poll)"
    )
    parser.add_argument("--wait", type=float, default=30.0, help="long poll wait (s)")
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds between every client holding v1 and the select"
    )
    parser.add_argument(
        "--backlog", type=int, default=0, help="granian --backlog (default: 2 x clients, within somaxconn)"
    )
    parser.add_argument(
        "--backpressure",
        type=int,
        default=0,
        help="granian --backpressure per worker (default: clients + 256; "
        "granian's own default, backlog/workers, caps held long polls)",
    )
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop databases",
    )
    args = parser.parse_args()

    clients = args.clients
    default_processes = 2 if args.client == "typescript" else max(2, math.ceil(clients / 250))
    processes = args.processes or default_processes
    processes = min(processes, clients)
    backlog = args.backlog or max(1024, min(somaxconn(), 2 * clients))
    backpressure = args.backpressure or clients + 256
    # Each client holds one socket, the server one per client, plus files and pipes.
    raise_open_files_limit(2 * clients + 512)

    with scratch_control_plane("bench_propagation", args.admin_url) as plane:
        server = None
        children: list[Any] = []  # multiprocessing processes of the fork context
        pipes: list[Connection] = []
        listener: NotifyListener | None = None
        try:
            read_token, write_token = plane.token("read"), plane.token("write")
            port = free_port()
            server_command = granian(
                "controlplane.asgi:application",
                port,
                workers=args.web_workers,
                extra=("--backlog", str(backlog), "--backpressure", str(backpressure)),
            )
            server = start(server_command, plane.env)
            base_url = f"http://127.0.0.1:{port}"
            wait_until_up(f"{base_url}/healthz")
            print(f"server: {' '.join(server_command[1:])}")

            # Fork before this process starts any thread; every child gets a slice of the names.
            context = multiprocessing.get_context("fork")
            names = [f"client-{i}" for i in range(clients)]
            # Plain pollers start spread over one interval, so their polls are evenly out of
            # phase as a real fleet's are (started together, they would poll in waves).
            spread = args.poll_interval if args.mode == "poll" else 0.0
            offsets = [spread * i / clients for i in range(clients)]
            started = time.monotonic()
            for index in range(processes):
                if args.client == "typescript":
                    node = start_node_clients(
                        names[index::processes],
                        base_url,
                        read_token,
                        args.mode,
                        args.poll_interval if args.mode == "poll" else 60.0,
                        args.wait,
                    )
                    children.append(node)
                    pipes.append(node)  # type: ignore[arg-type]
                    continue
                parent_end, child_end = context.Pipe()
                child = context.Process(
                    target=run_clients,
                    daemon=True,
                    args=(
                        child_end,
                        base_url,
                        read_token,
                        names[index::processes],
                        args.mode,
                        args.poll_interval if args.mode == "poll" else 60.0,
                        args.wait,
                        offsets[index::processes],
                    ),
                )
                child.start()
                children.append(child)
                pipes.append(parent_end)
            for pipe in pipes:
                if not pipe.poll(120 + spread):
                    raise SystemExit("a client process did not start its clients in time")
                pipe.recv()

            deadline = time.monotonic() + 120
            while True:
                versions: Counter[int] = sum(command(pipes, "versions"), Counter())
                if versions.get(1, 0) == clients:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"not every client reached version 1 in time: {dict(versions)}")
                time.sleep(0.2)
            print(
                f"{clients} clients in {processes} processes hold version 1 "
                f"({time.monotonic() - started:.1f} s after starting)"
            )
            # Each long poll is re-issued right after applying v1; this leaves time for all of
            # them to be parked on the server again, and for the web workers to finish what the
            # first reads set off (writing every new instance's fleet status).
            workers = children_of(server.pid)
            settling = cpu_ms(workers)
            time.sleep(args.settle)
            used = cpu_ms(workers) - settling
            print(f"web workers used {used:.0f} ms of CPU in the {args.settle:g} s before the select")
            failing = sum(command(pipes, "failures"))
            if failing:
                print(f"  warning: {failing} clients report failed polls before the select")
            if args.mode == "longpoll":
                print(f"held connections per web worker: {connections_per_process(port)}")
            client_pids = [child.pid for child in children if child.pid is not None]
            cpu_before = cpu_ms(workers), cpu_ms(client_pids)

            listener = NotifyListener(plane.database_url)
            listener.start()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            body = json.dumps({"preset": "pin_secondary", "reason": "bench: propagation"})
            headers = {"Authorization": f"Bearer {write_token}", "Content-Type": "application/json"}
            before = time.time()
            connection.request("POST", "/api/v1/chains/chat/select", body, headers)
            response = connection.getresponse()
            answer = response.read()
            returned = time.time()
            connection.close()
            if response.status != 200:
                raise SystemExit(f"select: HTTP {response.status}: {answer[:300]!r}")
            version = json.loads(answer)["version"]

            limit = 10.0 if args.mode == "longpoll" else args.poll_interval * 1.1 + 5.0
            applied_at = [
                t for times in command(pipes, "collect", (version, returned + limit), timeout=limit + 30) for t in times
            ]
            window_ms = (time.time() - before) * 1000
            cpu_web = cpu_ms(workers) - cpu_before[0]
            cpu_clients = cpu_ms(client_pids) - cpu_before[1]
            notified = [at for at, payload in listener.received if json.loads(payload).get("version") == version]
        finally:
            if pipes:
                try:
                    command(pipes, "stop", timeout=30)
                except (SystemExit, OSError, EOFError):
                    pass
            for child in children:
                child.join(5)
                if child.is_alive():
                    child.kill()
            if listener is not None:
                listener.close()
            if server is not None:
                stop(server)

    t0 = min([returned, *notified[:1]])
    delays = sorted((t - t0) * 1000 for t in applied_at if t is not None)
    missing = clients - len(delays)
    select_ms = (returned - before) * 1000
    notify = f"{(notified[0] - before) * 1000:.1f} ms" if notified else "never"
    print(
        f"select POST returned after {select_ms:.1f} ms, its NOTIFY arrived after {notify}; "
        f"t0 = {(t0 - before) * 1000:.1f} ms after the POST was sent"
    )
    print(
        f"CPU from the POST until every client applied ({window_ms:.0f} ms of wall time, "
        f"{os.cpu_count()} cores): web workers {cpu_web:.0f} ms, client processes "
        f"{cpu_clients:.0f} ms"
    )
    if not delays:
        print(f"mode={args.mode} clients={clients} applied=0")
        raise SystemExit(1)
    p50, p99, worst = statistics.median(delays), percentile(delays, 0.99), delays[-1]
    print(
        f"applied v{version}: {len(delays)} of {clients}; min {delays[0]:.1f} ms, "
        f"p50 {p50:.1f} ms, p90 {percentile(delays, 0.90):.1f} ms, p99 {p99:.1f} ms, "
        f"max {worst:.1f} ms" + (f"; {missing} never applied within {limit:g} s" if missing else "")
    )
    if args.mode == "longpoll":
        bar_ms = 250.0
        met = missing == 0 and p99 <= bar_ms
        print(f"bar: every client applied, p99 <= {bar_ms:.0f} ms: {'met' if met else 'NOT met'}")
    else:
        bar_ms = (args.poll_interval + 1.0) * 1000
        met = missing == 0 and worst <= bar_ms
        print(f"bar: every client within poll interval + 1 s = {bar_ms:.0f} ms: {'met' if met else 'NOT met'}")
    print(
        f"client={args.client} mode={args.mode} clients={clients} applied={len(delays)} p50_ms={p50:.0f} "
        f"p99_ms={p99:.0f} max_ms={worst:.0f} processes={processes} "
        f"web_workers={args.web_workers} select_ms={select_ms:.0f} bar_met={str(met).lower()}"
    )


if __name__ == "__main__":
    main()
