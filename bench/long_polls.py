"""Long polls: ten thousand services long-polling one small box under `make serve`'s defaults.

Starts the production web process with exactly `make serve`'s granian command line (read
from the Makefile with ``make -n serve``, so workers, backlog and backpressure are the
Makefile's defaults, or WEB_WORKERS / WEB_MAX_REQUESTS from the environment as `make serve`
takes them) on a scratch PostgreSQL database; a fresh server for each ``--clients`` size.
Then, ``--rounds`` times per size:

1. holds N long polls on ``chat``: light clients (asyncio protocols over raw sockets, one
   connection each, hand-written HTTP/1.1, parsing only the status line, Content-Length and
   ETag) that send exactly what the Python SDK sends (``sdk_poll_request``: chainclient's
   own ``poll_headers``, each its own ``X-Chain-Client`` and its ``X-Chain-Applied-Version``,
   after http.client's ``Host`` and ``Accept-Encoding``), with ``?wait=``. They behave as
   the SDK does: a 304 after the wait ran out is asked again at once; a 304 answered at once
   (not held) is asked again after ``--poll-interval``; a 200 (a change) is asked again
   after a random pause of up to ``REPOLL_SPREAD_S`` (0.25 s) with its ETag and its version,
   so after each change the server holds the whole fleet again, as it does in production.
   (``--without-identity``: no identity headers, to see what fleet status costs; until
   2026-12-07 the clients sent them but closed at their 200, and were timed from the
   commit.) They connect at ``--connect-rate`` per second (1,000: 10,000 in 10 s), so
   the accept queue is not what is measured, from ``--client-processes`` processes: 2 by
   default, because taking in 10,000 answers costs the clients ~0.3 s of CPU, as much as
   half of what the two web workers spend sending them; in one event loop that is a serial
   0.3 s added to the tail, split over two it overlaps on both cores. Their event loop is
   uvloop where it is installed (``--client-loop``: it is the server's too): the clients
   share the server's cores here, and on asyncio's loop they took 35-40 % more CPU for the
   same answers. Waits until every outstanding poll is held: the
   ``controlplane_long_poll_waiters`` gauge of each web worker (read from the worker's
   prometheus multiprocess file, the figure /metrics sums: /metrics is itself a request,
   which waits behind held polls when a worker is at its backpressure; whether it answered
   while the polls were held is reported too);
2. while they are held, makes ``--selects`` writes on ``incident-summary`` (select
   local_only and revert, alternately; a new connection each, as an operator's curl or
   runbook would) with a write token, and times them;
3. makes ``--changes`` changes to ``chat`` (select or revert through the API, one after the
   other), times each one's answer to its caller (``change_ms``), and times, per client,
   from that answer until the client's 200 (as a service would see it: the operator's
   change done, how long until every instance runs it; negative when the instance had it
   first) and from the commit (the earlier of the answer and the moment the script's own
   LISTEN connection received the change's NOTIFY, bench/propagation.py). After each change,
   waits until every client holds its next poll again, and reads the memory then. A timeout
   is a client, still connected, that never had a change, or a request with no answer
   within ``--wait`` + 5 s;
4. reads the resident memory (VmRSS) of granian's main process and each worker: idle before
   the first round, while the polls are held before the changes, held again after each
   change (its peak), and after they were answered and closed.

Everything runs on this machine: the clients share its cores with the server (in production
they run elsewhere), so the latencies err high; the CPU the web workers and the clients used
while each change was answered is printed, to tell the two apart.

    python bench/long_polls.py [--clients 1000,5000,10000] [--rounds 2] [--changes 5]
                               [--wait 55] [--client-processes 2]
                               [--client-loop uvloop|asyncio] [--connect-rate 1000]
                               [--without-identity]
                               [--admin-url postgres://postgres@127.0.0.1:5432/postgres]

Bars at 10,000 held polls on `make serve` defaults (the fleet issue): 0 timeouts and every
client had every change, p99 <= 1 s from the change's answer (the worst change); the changes
themselves answered p99 <= 100 ms; selects meanwhile p99 <= 100 ms, none failing; at most
20 KB per held poll at the peak after changes; no growth: after a second round, RSS per
worker (after, and at its peak) within 10 % of the first round's. Ends with one line of
key=value figures.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import http.client
import importlib.util
import json
import math
import multiprocessing
import os
import random
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from chainclient.poller import REPOLL_SPREAD_S
from chainclient.transport import Endpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from propagation import NotifyListener, children_of, cpu_ms, raise_open_files_limit, somaxconn  # noqa: E402
from read_throughput import (  # noqa: E402
    BIN,
    ROOT,
    free_port,
    python_reference_us,
    scratch_control_plane,
    stop,
    wait_until_up,
)
from select_latency import percentile  # noqa: E402

POLLED_CHAIN = "chat"
POLLED_PIN = "pin_secondary"  # the change selects it, or reverts it when it is live
WRITTEN_CHAIN = "incident-summary"
WRITTEN_PIN = "local_only"
WAITERS_METRIC = "controlplane_long_poll_waiters"
# A request unanswered this long after its wait ran out is a timeout.
GRACE_S = 5.0
CONNECT_TIMEOUT_S = 10.0
# A failed connect is tried again, as the SDK does (ClientFleet.connect), this many times in all.
CONNECT_ATTEMPTS = 4
MAX_BACKOFF_S = 60.0  # ChainClient's max_backoff default
# The SDK's rule (chainclient.poller._HELD_AT_LEAST_S): a 304 sooner than this was not held.
HELD_AT_LEAST_S = 1.0


# --- the client processes ------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """What one client saw in a round."""

    answers: list[tuple[float, str]] = field(default_factory=list)  # time.time() and ETag of each 200
    held_304: int = 0  # 304s after the wait ran out (asked again at once)
    quick_304: int = 0  # 304s answered at once: not held (asked again after the poll interval)
    failure: str = ""  # "timeout", "HTTP 503", "closed by server", "connect: ECONNREFUSED", ...

    @property
    def answered_at(self) -> float | None:
        """When its first 200 came (None: none came)."""
        return self.answers[0][0] if self.answers else None

    @property
    def etag(self) -> str:
        """The ETag of its latest 200."""
        return self.answers[-1][1] if self.answers else ""


def sdk_poll_request(
    *, port: int, path: str, wait: float, token: str, client: str, etag: str, version: int, identity: bool = True
) -> bytes:
    """The long poll exactly as the Python SDK sends it: ``chainclient``'s own headers
    (``Endpoint.poll_headers``: the bearer token, ``If-None-Match``, ``X-Chain-Client``,
    ``X-Chain-Applied-Version``, its ``User-Agent`` and ``Accept``), after the two that
    ``http.client`` puts first (``Host``, ``Accept-Encoding``). Without ``identity``: no
    ``X-Chain-Client`` or ``X-Chain-Applied-Version`` (nothing for fleet status to record)."""
    endpoint = Endpoint.of(f"http://127.0.0.1:{port}", chain=POLLED_CHAIN, token=token, client_id=client, timeout=10)
    headers = {"Host": f"127.0.0.1:{port}", "Accept-Encoding": "identity"}
    headers |= endpoint.poll_headers(if_none_match=etag, applied_version=version)
    if not identity:
        del headers["X-Chain-Client"], headers["X-Chain-Applied-Version"]
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"GET {path}?wait={wait:g} HTTP/1.1\r\n{lines}\r\n".encode("latin-1")


def version_of(etag: str) -> int:
    """The document version an ETag names (``"12"``, or ``"3.12"`` once an epoch is raised)."""
    return int(etag.strip('"').rpartition(".")[2])


class LongPoll(asyncio.Protocol):
    """One service instance's long poll on its own connection: asks, parses the answer's
    status line, Content-Length and ETag, and asks again as the SDK would: a held 304 at
    once, a 304 not held after the poll interval, a 200 (a change) after a random pause of
    up to ``REPOLL_SPREAD_S`` with the new ETag in ``If-None-Match`` and the new version in
    ``X-Chain-Applied-Version``, as the SDK does once it has applied it."""

    def __init__(self, fleet: ClientFleet, name: str, etag: str, version: int) -> None:
        self.fleet = fleet
        self.name = name
        self.request = fleet.request_for(name, etag, version)
        self.outcome = Outcome()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.sent_at = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.done = False
        self.current = etag

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass
        self.send()

    def send(self) -> None:
        if self.done or self.transport is None or self.transport.is_closing():
            return
        loop = self.fleet.loop
        self.sent_at = loop.time()
        if self.timer is not None:
            self.timer.cancel()
        self.timer = loop.call_at(self.sent_at + self.fleet.wait + GRACE_S, self.timed_out)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.done:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            lines = self.buffer[:head_end].split(b"\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get(b"content-length", b"0"))
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            status = int(lines[0].split(b" ", 2)[1])
            self.answered(status, headers.get(b"etag", b"").decode("latin-1"))

    def answered(self, status: int, etag: str) -> None:
        loop = self.fleet.loop
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if status == 200:
            self.outcome.answers.append((time.time(), etag))
            if etag != self.current:
                self.current = etag
                self.request = self.fleet.request_for(self.name, etag, version_of(etag))
            loop.call_later(self.fleet.random.uniform(0.0, REPOLL_SPREAD_S), self.send)
        elif status == 304:
            if loop.time() - self.sent_at >= min(HELD_AT_LEAST_S, self.fleet.wait / 2):
                self.outcome.held_304 += 1
                self.send()
            else:
                self.outcome.quick_304 += 1
                loop.call_later(self.fleet.poll_interval, self.send)
        else:
            self.finish(f"HTTP {status}")

    def timed_out(self) -> None:
        self.finish("timeout")

    def finish(self, failure: str) -> None:
        if self.done:
            return
        self.done = True
        self.outcome.failure = failure
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.close()
        self.fleet.pending -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish("closed by server" + (f" ({exc.__class__.__name__})" if exc else ""))


class ClientFleet:
    """The long polls of one client process, driven by the parent's commands over a pipe."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.loop = loop
        self.polls: list[LongPoll] = []
        self.connect_failures: list[Outcome] = []
        self.pending = 0
        self.connect_retries = 0
        self.wait = 55.0
        self.poll_interval = 10.0
        self.random = random.Random()
        self.spec: dict[str, Any] = {}
        # ETag -> the request before and after the client's name (built once per change).
        self._templates: dict[str, tuple[bytes, bytes]] = {}
        self.stopped = loop.create_future()

    def request_for(self, name: str, etag: str, version: int) -> bytes:
        """The poll client ``name`` sends holding the document tagged ``etag``."""
        template = self._templates.get(etag)
        if template is None:
            marker = "\x00client\x00"
            spec = self.spec
            whole = sdk_poll_request(
                port=spec["port"],
                path=spec["path"],
                wait=spec["wait"],
                token=spec["token"],
                client=marker,
                etag=etag,
                version=version,
                identity=spec["identity"],
            )
            before, _, after = whole.partition(marker.encode())
            template = self._templates[etag] = (before, after)
        return template[0] + name.encode() + template[1] if template[1] else template[0]

    def on_command(self) -> None:
        try:
            name, argument = self.conn.recv()
        except (EOFError, OSError):  # the parent is gone
            name, argument = "exit", None
        if name == "open":
            self.loop.create_task(self.open(**argument))
        elif name == "status":
            self.conn.send({"pending": self.pending, "polls": len(self.polls)})
        elif name == "holding":  # how many polls hold the document tagged ``argument`` now
            self.conn.send(sum(1 for poll in self.polls if poll.current == argument and not poll.done))
        elif name == "asking":  # ... and have sent their next poll, unanswered yet: held again
            self.conn.send(
                sum(1 for poll in self.polls if poll.current == argument and poll.timer is not None and not poll.done)
            )
        elif name == "collect":
            self.conn.send([poll.outcome for poll in self.polls] + self.connect_failures)
        elif name == "close":
            closed = len(self.polls)
            self.close()
            self.conn.send(("closed", closed))
        elif name == "exit":
            self.close()
            if not self.stopped.done():
                self.stopped.set_result(None)

    def close(self) -> None:
        for poll in self.polls:
            poll.done = True
            if poll.timer is not None:
                poll.timer.cancel()
            if poll.transport is not None:
                poll.transport.close()
        self.polls, self.connect_failures, self.pending, self.connect_retries = [], [], 0, 0
        self._templates.clear()

    async def open(
        self,
        *,
        port: int,
        names: list[str],
        path: str,
        token: str,
        etag: str,
        version: int,
        rate: float,
        wait: float,
        identity: bool = True,
    ) -> None:
        """Open one connection per name at ``rate`` a second; each sends its poll at once."""
        self.wait = wait
        self.spec = {"port": port, "path": path, "token": token, "wait": wait, "identity": identity}
        began = self.loop.time()
        tasks = []
        for index, name in enumerate(names):
            delay = began + index / rate - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            poll = LongPoll(self, name, etag, version)
            self.pending += 1
            tasks.append(self.loop.create_task(self.connect(port, poll)))
        await asyncio.gather(*tasks)
        failures = Counter(outcome.failure for outcome in self.connect_failures)
        self.conn.send(
            ("opened", {"connected": len(self.polls), "failures": dict(failures), "retries": self.connect_retries})
        )

    async def connect(self, port: int, poll: LongPoll) -> None:
        """Connect ``poll``; a failed connect is tried again after the SDK's backoff (its
        ``Poller._backoff``: full jitter, doubling from the poll interval up to
        ``MAX_BACKOFF_S``), ``CONNECT_ATTEMPTS`` times in all, as an instance would keep trying
        a control plane (or relay) too busy to take it at once."""
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                await asyncio.wait_for(self.loop.create_connection(lambda: poll, "127.0.0.1", port), CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as exc:
                if attempt < CONNECT_ATTEMPTS:
                    self.connect_retries += 1
                    interval = self.poll_interval
                    cap = min(max(MAX_BACKOFF_S, interval), interval * 2**attempt)
                    await asyncio.sleep(max(min(interval, 0.5), self.random.uniform(0, cap)))
                    continue
                code = errno.errorcode.get(exc.errno or 0, "") if isinstance(exc, OSError) else ""
                self.connect_failures.append(Outcome(failure=f"connect: {code or exc.__class__.__name__}"))
                self.pending -= 1
                return
            self.polls.append(poll)
            return


def open_timeout(clients: int, rate: float) -> float:
    """How long opening ``clients`` connections at ``rate`` a second may take, retries included."""
    return clients / rate + CONNECT_ATTEMPTS * CONNECT_TIMEOUT_S + (CONNECT_ATTEMPTS - 1) * MAX_BACKOFF_S + 30


def run_client_process(conn: Connection, poll_interval: float, event_loop: str) -> None:
    """A client process: an event loop that holds long polls and answers the parent's commands."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the clients stop
    loop = new_event_loop(event_loop)
    fleet = ClientFleet(conn, loop)
    fleet.poll_interval = poll_interval
    loop.add_reader(conn.fileno(), fleet.on_command)
    os.set_blocking(conn.fileno(), True)  # uvloop's add_reader made it non-blocking: a long answer must not fail
    loop.run_until_complete(fleet.stopped)
    loop.close()


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """An event loop of ``kind``: "uvloop" (the server's too, requirements.txt) or "asyncio"."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class ClientProcesses:
    """The client processes, forked once (before this process starts any thread)."""

    def __init__(self, count: int, poll_interval: float, event_loop: str = "asyncio") -> None:
        context = multiprocessing.get_context("fork")
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for _ in range(count):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=run_client_process, args=(child_end, poll_interval, event_loop), daemon=True
            )
            process.start()
            child_end.close()
            self.pipes.append(parent_end)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.pid is not None]

    def count(self, command: str, etag: str) -> int:
        """The clients, in all processes, that ``holding`` or ``asking`` counts for ``etag``."""
        return sum(self.ask(command, [etag] * len(self.pipes)))

    def alive(self) -> int:
        """The clients still connected, in all processes."""
        return sum(answer["pending"] for answer in self.ask("status"))

    def ask(self, name: str, arguments: list[Any] | None = None, timeout: float = 60.0) -> list[Any]:
        for index, pipe in enumerate(self.pipes):
            pipe.send((name, arguments[index] if arguments is not None else None))
        answers = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise SystemExit(f"a client process did not answer {name!r} within {timeout:g} s")
            answers.append(pipe.recv())
        return answers

    def stop(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(("exit", None))
            except OSError:
                pass
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(1)


# --- the server ----------------------------------------------------------------------------


def serve_command(env: dict[str, str], port: int) -> str:
    """`make serve`'s granian command line, as make prints it (a shell line: it expands
    ${VAR_DIR:-var} itself), with this checkout's virtualenv and ``port``."""
    if shutil.which("make") is None:
        raise SystemExit("make is missing: the server's command line is read from the Makefile (apt-get install make)")
    command = ["make", "-s", "-n", "--no-print-directory", "serve", f"PORT={port}", f"VENV={BIN.parent}"]
    # Not a parent make's flags (under `make bench`): this make only prints.
    env = {key: value for key, value in env.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.replace("\\\n", " ").splitlines() if "/granian " in line]
    if len(lines) != 1:
        raise SystemExit(f"no granian command line in `make -n serve`:\n{out}")
    return " ".join(lines[0].split())


def option(command: str, name: str) -> int:
    words = shlex.split(command)
    return int(words[words.index(name) + 1])


@dataclass
class Server:
    """The production web process, started as `make serve` starts it."""

    command: str
    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    workers: list[int] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, expected_workers: int) -> None:
        (Path(self.env["VAR_DIR"]) / "static").mkdir(parents=True, exist_ok=True)  # --static-path-mount
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", f"exec {self.command}"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_until_up(f"{self.base_url}/healthz", timeout=60)
        except SystemExit:
            tail = self.log.read_text(errors="replace").splitlines()[-15:]
            raise SystemExit(
                f"the server did not come up on port {self.port} (a port taken meanwhile, or a crash); "
                f"its log, {self.log}:\n" + "\n".join(tail)
            ) from None
        deadline = time.monotonic() + 30
        while len(children_of(self.process.pid)) < expected_workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"granian started {children_of(self.process.pid)} of {expected_workers} workers")
            time.sleep(0.2)
        self.workers = children_of(self.process.pid)

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def rss_kb(self) -> dict[int, int]:
        """VmRSS in KB of granian's main process and of each worker."""
        assert self.process is not None
        figures = {}
        for pid in [self.process.pid, *self.workers]:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        figures[pid] = int(line.split()[1])
            except OSError:
                figures[pid] = 0
        return figures

    def respawned(self) -> bool:
        return self.process is not None and set(children_of(self.process.pid)) != set(self.workers)

    def held(self) -> dict[int, int]:
        """Each worker's long polls held now (its waiters gauge, written once a second)."""
        from prometheus_client.mmap_dict import MmapedDict

        directory = Path(self.env["PROMETHEUS_MULTIPROC_DIR"])
        figures = {}
        for pid in self.workers:
            figures[pid] = 0
            try:
                values = MmapedDict.read_all_values_from_file(str(directory / f"gauge_livesum_{pid}.db"))
                for key, value, _, _ in values:
                    if json.loads(key)[1] == WAITERS_METRIC:
                        figures[pid] = int(value)
            except (OSError, ValueError, RuntimeError):
                pass
        return figures


def runqueue_wait_ms(pids: list[int]) -> float:
    """Time the processes' threads have spent runnable but waiting for a CPU so far (Linux
    schedstat): how much other work on the machine held them back."""
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return total / 1e6


def request(
    base_url: str, method: str, path: str, *, headers: dict[str, str], body: Any = None, timeout: float = 10.0
) -> tuple[int, bytes, dict[str, str], float]:
    """One request on a new connection: status (0 and the error when there was no answer),
    body, headers and milliseconds taken."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    data = json.dumps(body) if body is not None else None
    started = time.perf_counter()
    try:
        connection.request(method, path, data, {**headers, **({"Content-Type": "application/json"} if data else {})})
        response = connection.getresponse()
        answer = response.read()
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, answer, answer_headers, (time.perf_counter() - started) * 1000
    except (OSError, http.client.HTTPException) as exc:
        return 0, (str(exc) or exc.__class__.__name__).encode(), {}, (time.perf_counter() - started) * 1000
    finally:
        connection.close()


def read_chain(base_url: str, token: str, name: str) -> tuple[str, dict[str, Any]]:
    status, body, headers, _ = request(
        base_url, "GET", f"/api/v1/chains/{name}", headers={"Authorization": f"Bearer {token}"}
    )
    if status != 200:
        raise SystemExit(f"GET /api/v1/chains/{name}: HTTP {status}: {body[:300]!r}")
    return headers["etag"], json.loads(body)


def write(
    base_url: str, token: str, chain: str, preset: str, default: str, reason: str, timeout: float
) -> tuple[int, bytes, float]:
    """Select ``preset`` on ``chain`` (a revert when it is the default): status, body, ms."""
    headers = {"Authorization": f"Bearer {token}"}
    if preset == default:
        path, body = f"/api/v1/chains/{chain}/revert", {"reason": reason}
    else:
        path, body = f"/api/v1/chains/{chain}/select", {"preset": preset, "reason": reason}
    status, answer, _, ms = request(base_url, "POST", path, headers=headers, body=body, timeout=timeout)
    return status, answer, ms


# --- one round -----------------------------------------------------------------------------


@dataclass
class Round:
    clients: int
    connected: int = 0
    connect_failures: Counter[str] = field(default_factory=Counter)
    connect_retries: int = 0  # connects tried again after a failure (as the SDK would)
    held: dict[int, int] = field(default_factory=dict)  # worker -> polls held
    hold_s: float = 0.0  # from the first connection until all were held (or the settle timeout)
    metrics_while_held: str = ""
    select_ms: list[float] = field(default_factory=list)
    select_failures: list[str] = field(default_factory=list)
    selects_skipped: int = 0
    change: str = ""
    change_ms: float = math.nan  # the change to the polled chain, POST to its answer
    t0_source: str = ""
    delays_ms: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    held_304: int = 0
    quick_304: int = 0
    rss_before: dict[int, int] = field(default_factory=dict)
    rss_held: dict[int, int] = field(default_factory=dict)
    rss_after: dict[int, int] = field(default_factory=dict)
    held_after_close: int = 0  # polls the server still held once every client had closed
    ghosts_before: tuple[int, float] | None = None  # such polls of the round before, and seconds to drain
    cpu_web_ms: float = 0.0
    cpu_clients_ms: float = 0.0
    web_waited_ms: float = 0.0
    answer_window_ms: float = 0.0
    changes: list[Change] = field(default_factory=list)


def run_round(
    number: int,
    server: Server,
    fleet: ClientProcesses,
    listener: NotifyListener,
    tokens: dict[str, str],
    args: argparse.Namespace,
    clients: int,
    polled: Server | None = None,
) -> Round:
    """One round: ``clients`` long polls held on ``polled`` (default: ``server``, which may be
    another server following it, such as a relay: bench/relay.py), the writes and the change
    made on ``server``."""
    result = Round(clients=clients)
    base = server.base_url
    polled = polled or server
    # Polls of an earlier round whose clients closed are held until their wait ends (the
    # server does not notice a client leave): let them go before counting this round's.
    ghosts, began = sum(polled.held().values()), time.monotonic()
    while sum(polled.held().values()) and time.monotonic() - began < args.wait + GRACE_S:
        time.sleep(0.5)
    if ghosts:
        result.ghosts_before = (ghosts, time.monotonic() - began)
    read_token, write_token = tokens["read"], tokens["write"]
    etag, document = read_chain(polled.base_url, read_token, POLLED_CHAIN)
    _, other = read_chain(base, read_token, WRITTEN_CHAIN)
    result.rss_before = polled.rss_kb()

    # 1. Hold the polls.
    names = [f"bench-long-polls/instance-{i:05d}" for i in range(clients)]
    processes = len(fleet.pipes)
    spec = {
        "port": polled.port,
        "path": f"/api/v1/chains/{POLLED_CHAIN}",
        "token": read_token,
        "etag": etag,
        "version": document["version"],
        "rate": args.connect_rate / processes,
        "wait": args.wait,
        "identity": not getattr(args, "without_identity", False),
    }
    opened_at = time.monotonic()
    opened = fleet.ask(
        "open",
        [{**spec, "names": names[index::processes]} for index in range(processes)],
        timeout=open_timeout(clients, args.connect_rate),
    )
    for _, figures in opened:
        result.connected += figures["connected"]
        result.connect_failures.update(figures["failures"])
        result.connect_retries += figures["retries"]
    deadline = time.monotonic() + args.settle_timeout
    while True:
        held = polled.held()
        outstanding = sum(answer["pending"] for answer in fleet.ask("status"))
        if sum(held.values()) >= outstanding or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    result.hold_s = time.monotonic() - opened_at
    time.sleep(1.2)  # the gauge is written once a second: let it and the memory settle
    result.held = polled.held()
    result.rss_held = polled.rss_kb()
    status, body, _, ms = request(base, "GET", "/metrics", headers={}, timeout=5)
    gauge = [line for line in body.decode(errors="replace").splitlines() if line.startswith(WAITERS_METRIC + " ")]
    if status == 200:
        result.metrics_while_held = f"answered in {ms:.0f} ms ({gauge[0] if gauge else 'no gauge'})"
    else:
        result.metrics_while_held = f"no answer within 5 s ({body[:80].decode(errors='replace')})"

    # 2. Writes on another chain while the polls are held.
    live = other["preset"]
    for index in range(args.selects):
        target = WRITTEN_PIN if live == other["default"]["preset"] else other["default"]["preset"]
        status, answer, ms = write(
            base,
            write_token,
            WRITTEN_CHAIN,
            target,
            other["default"]["preset"],
            f"bench: long polls, round {number}, write {index}",
            args.select_timeout,
        )
        result.select_ms.append(ms)
        if status == 0:
            result.select_failures.append(f"no answer in {args.select_timeout:g} s")
            # The next would wait as long: the server is not taking writes while polls are held.
            result.selects_skipped = args.selects - index - 1
            break
        if not 200 <= status < 300:
            result.select_failures.append(f"HTTP {status}")
        else:
            live = target

    # 3. ``--changes`` changes to the polled chain, one after the other: each timed to its
    # answer, then every client's 200 timed from that answer (and from the commit), and the
    # fleet's memory once every client holds its next poll again.
    default = document["default"]["preset"]
    live = document["preset"]
    for index in range(args.changes):
        target = POLLED_PIN if live == default else default
        change = make_change(number, index, server, polled, fleet, listener, write_token, target, default, args)
        result.changes.append(change)
        if change.etag:
            live = target
        else:
            break  # the change failed: the next would start from an unknown state
    outcomes: list[Outcome] = [outcome for answers in fleet.ask("collect", timeout=120) for outcome in answers]
    fleet.ask("close")
    for outcome in outcomes:
        result.held_304 += outcome.held_304
        result.quick_304 += outcome.quick_304
        if outcome.failure:
            result.failures[outcome.failure] += 1
    for change in result.changes:
        for outcome in outcomes:
            answered = {etag: at for at, etag in reversed(outcome.answers)}  # its first 200 of each ETag
            at = answered.get(change.etag)
            if at is None:
                if not outcome.failure:
                    change.missing += 1
                continue
            if not math.isnan(change.answered_at):
                change.from_answer_ms.append((at - change.answered_at) * 1000)
            if not math.isnan(change.committed_at):
                change.from_commit_ms.append((at - change.committed_at) * 1000)
        change.from_answer_ms.sort()
        change.from_commit_ms.sort()
        result.failures["timeout"] += change.missing
    first = result.changes[0] if result.changes else None
    if first is not None:
        result.change = "; ".join(change.label for change in result.changes)
        result.change_ms = max(change.ms for change in result.changes)
        result.t0_source = "each change's answer to its caller"
        result.delays_ms = sorted(ms for change in result.changes for ms in change.from_answer_ms)
        result.cpu_web_ms = sum(change.cpu_web_ms for change in result.changes)
        result.cpu_clients_ms = sum(change.cpu_clients_ms for change in result.changes)
        result.web_waited_ms = sum(change.web_waited_ms for change in result.changes)
        result.answer_window_ms = max(change.window_ms for change in result.changes)

    # 4. Memory once the polls were answered and closed.
    time.sleep(2)
    result.rss_after = polled.rss_kb()
    result.held_after_close = sum(polled.held().values())
    return result


@dataclass
class ChangeTimes:
    """One change made while a fleet holds its polls: its answer, and each client's 200."""

    label: str = ""
    etag: str = ""  # of the version it made ("": it failed)
    ms: float = math.nan  # POST to its answer
    answered_at: float = math.nan  # time.time() its caller had the answer
    from_answer_ms: list[float] = field(default_factory=list)  # each client's 200 after the answer
    missing: int = 0  # clients, still connected, that never had it


PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


def worsen(worst: dict[str, float], delays: list[float]) -> None:
    """Raise each of ``worst``'s PERCENTILES to ``delays``' (sorted) where it is higher."""
    for name, fraction in PERCENTILES:
        value = percentile(delays, fraction)
        worst[name] = value if math.isnan(worst.get(name, math.nan)) else max(worst[name], value)


@dataclass
class Change(ChangeTimes):
    """One change to the polled chain while the fleet holds its polls, and what it took."""

    committed_at: float = math.nan  # the earlier of its answer and this script's NOTIFY of it
    from_commit_ms: list[float] = field(default_factory=list)
    window_ms: float = 0.0  # from the POST until every client had it
    cpu_web_ms: float = 0.0
    cpu_clients_ms: float = 0.0
    web_waited_ms: float = 0.0
    reheld: dict[int, int] = field(default_factory=dict)  # worker -> polls held again after it
    rss_reheld: dict[int, int] = field(default_factory=dict)


def make_change(
    number: int,
    index: int,
    server: Server,
    polled: Server,
    fleet: ClientProcesses,
    listener: NotifyListener,
    write_token: str,
    target: str,
    default: str,
    args: argparse.Namespace,
) -> Change:
    """Select (or revert to) ``target`` on the polled chain through ``server``; wait until
    every client still connected has the new document and holds its next poll again."""
    change = Change()
    answer_box: dict[str, Any] = {}

    def post_change() -> None:
        answer_box["status"], answer_box["body"], answer_box["ms"] = write(
            server.base_url,
            write_token,
            POLLED_CHAIN,
            target,
            default,
            f"bench: long polls, round {number}, change {index + 1}",
            args.wait,
        )
        answer_box["returned"] = time.time()

    workers_cpu, clients_cpu = cpu_ms(polled.workers), cpu_ms(fleet.pids)
    workers_waited = runqueue_wait_ms(polled.workers)
    before = time.time()
    poster = threading.Thread(target=post_change, daemon=True)
    poster.start()
    poster.join(args.wait + GRACE_S)
    status = answer_box.get("status")
    if status != 200:
        why = f"HTTP {status or 'no answer'}" if status is not None else "no answer"
        change.label = f"{target}: {why}" + (f" after {answer_box['ms']:.0f} ms" if "ms" in answer_box else "")
        return change
    version = json.loads(answer_box["body"])["version"]
    epoch = json.loads(answer_box["body"]).get("epoch", 0)
    change.etag = f'"{version}"' if not epoch else f'"{epoch}.{version}"'
    change.ms, change.answered_at = answer_box["ms"], answer_box["returned"]
    deadline = time.monotonic() + args.wait + GRACE_S
    while time.monotonic() < deadline:
        alive = sum(answer["pending"] for answer in fleet.ask("status"))
        if sum(fleet.ask("holding", [change.etag] * len(fleet.pipes))) >= alive:
            break
        time.sleep(0.05)
    change.window_ms = (time.time() - before) * 1000
    change.cpu_web_ms = cpu_ms(polled.workers) - workers_cpu
    change.cpu_clients_ms = cpu_ms(fleet.pids) - clients_cpu
    change.web_waited_ms = runqueue_wait_ms(polled.workers) - workers_waited
    notified = [
        at
        for at, payload in list(listener.received)
        if at >= before
        and json.loads(payload).get("chain") == POLLED_CHAIN
        and json.loads(payload).get("version") == version
    ]
    change.committed_at = min([change.answered_at, *notified[:1]])
    change.label = f"{target} v{version} answered in {change.ms:.0f} ms" + (
        f" (NOTIFY {(notified[0] - before) * 1000:.0f} ms after the POST)" if notified else ""
    )
    # Every client asks again within REPOLL_SPREAD_S of its 200; the gauge is written once a second.
    settle = time.monotonic() + args.settle_timeout
    time.sleep(REPOLL_SPREAD_S)
    while time.monotonic() < settle:
        alive = sum(answer["pending"] for answer in fleet.ask("status"))
        if sum(polled.held().values()) >= alive:
            break
        time.sleep(0.25)
    time.sleep(1.2)
    change.reheld = polled.held()
    change.rss_reheld = polled.rss_kb()
    return change


# --- the bench -----------------------------------------------------------------------------


def check_limits(largest: int, processes: int) -> None:
    """Raise RLIMIT_NOFILE's soft limit to what the connections need; stop with a clear message when the
    limits or the local port range cannot hold ``largest`` connections."""
    # A client process holds its share; a worker may be handed every connection.
    needed = max(math.ceil(largest / processes), largest) + 512
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if raise_open_files_limit(needed) < needed:
        raise SystemExit(
            f"open files: the hard RLIMIT_NOFILE is {hard}, and {largest} connections need about {needed} "
            "in one web worker: raise it (ulimit -Hn, or LimitNOFILE in a unit) or pass fewer --clients"
        )
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        if high - low + 1 < largest + 1000:
            raise SystemExit(
                f"local ports: net.ipv4.ip_local_port_range {low}-{high} has {high - low + 1} ports, too few for "
                f"{largest} connections to one server port: widen it (sysctl) or pass fewer --clients"
            )
    except (OSError, ValueError):
        pass


def connect_hints(failures: Counter[str]) -> list[str]:
    """What the connection failures say about this machine's limits rather than the server."""
    hints = []
    if any("EMFILE" in why or "ENFILE" in why for why in failures):
        hints.append("out of file descriptors: raise RLIMIT_NOFILE (ulimit -Hn) or use more --client-processes")
    if any("EADDRNOTAVAIL" in why for why in failures):
        hints.append("out of local ports: widen net.ipv4.ip_local_port_range or pass fewer --clients")
    if any("Timeout" in why for why in failures):
        hints.append(
            f"connects took over {CONNECT_TIMEOUT_S:g} s: the accept queue is full (the server stopped accepting, "
            "or --backlog / net.core.somaxconn is too small for --connect-rate)"
        )
    if any("ECONNREFUSED" in why for why in failures):
        hints.append("connection refused: the server is not listening (see its log)")
    return hints


def describe_rss(kb: dict[int, int]) -> str:
    return " / ".join(f"{value / 1024:.1f}" for value in kb.values())


def peak_rss(result: Round) -> dict[int, int]:
    """Each process's largest VmRSS while the polls were held: before the changes, or held
    again after any of them."""
    peak = dict(result.rss_held)
    for change in result.changes:
        for pid, kb in change.rss_reheld.items():
            peak[pid] = max(peak.get(pid, 0), kb)
    return peak


def summarize(clients: int, rounds: list[Round], workers: list[int], main_pid: int) -> dict[str, Any]:
    """Print one size's figures; return its key=value figures."""
    figures: dict[str, Any] = {}
    per_round: list[dict[str, Any]] = []
    kb_per_poll = math.nan
    prefix = f"n{clients}"
    last = rounds[-1]
    change_ms = [change.ms for result in rounds for change in result.changes if change.etag]
    for number, result in enumerate(rounds, 1):
        timeouts = result.failures.get("timeout", 0)
        conn_failures = sum(result.connect_failures.values())
        errors = sum(n for why, n in result.failures.items() if why != "timeout")
        if result.ghosts_before:
            print(
                f"  round {number}: waited {result.ghosts_before[1]:.0f} s for {result.ghosts_before[0]} polls "
                "held from the round before, whose clients had closed, to end"
            )
        print(
            f"  round {number}: {result.connected} of {clients} connected"
            + (f" ({dict(result.connect_failures)} failed)" if conn_failures else "")
            + (f" ({result.connect_retries} connects tried again)" if result.connect_retries else "")
            + f"; held {sum(result.held.values())} ({' + '.join(map(str, result.held.values()))} per worker) "
            f"{result.hold_s:.1f} s after the first connect; /metrics while held: {result.metrics_while_held}"
        )
        selects = result.select_ms
        if selects:
            print(
                f"    {len(selects)} writes on {WRITTEN_CHAIN} while held: p50 {statistics.median(selects):.1f} ms, "
                f"p99 {percentile(selects, 0.99):.1f} ms, max {max(selects):.1f} ms "
                f"(write {selects.index(max(selects)) + 1} of {len(selects)})"
                + (f"; failed: {Counter(result.select_failures)}" if result.select_failures else "")
                + (f"; {result.selects_skipped} not sent" if result.selects_skipped else "")
            )
        worst: dict[str, float] = {"p50": math.nan, "p90": math.nan, "p99": math.nan, "max": math.nan}
        answered = clients
        for index, change in enumerate(result.changes, 1):
            delays, commit = change.from_answer_ms, change.from_commit_ms
            print(f"    change {index} on {POLLED_CHAIN}: {change.label}")
            if not change.etag:
                answered = 0
                continue
            answered = min(answered, len(delays))
            if delays:
                print(
                    f"      {len(delays)} of {clients} had it: from its answer p50 {statistics.median(delays):.0f}, "
                    f"p90 {percentile(delays, 0.90):.0f}, p99 {percentile(delays, 0.99):.0f}, max {delays[-1]:.0f} ms"
                    f" (first {delays[0]:.0f}); from the commit p50 {statistics.median(commit):.0f}, p99 "
                    f"{percentile(commit, 0.99):.0f} ms; all had it {change.window_ms:.0f} ms after the POST"
                )
                worsen(worst, delays)
            print(
                f"      CPU meanwhile: web workers {change.cpu_web_ms:.0f} ms (and {change.web_waited_ms:.0f} ms "
                f"runnable, waiting for a CPU), client processes {change.cpu_clients_ms:.0f} ms; held again "
                f"{sum(change.reheld.values())}, RSS MB {describe_rss(change.rss_reheld)}"
            )
        print(
            f"    timeouts {timeouts}, 304s {result.held_304 + result.quick_304} ({result.held_304} after the wait, "
            f"{result.quick_304} at once: not held), errors {errors}"
            + (f" {dict((k, v) for k, v in result.failures.items() if k != 'timeout')}" if errors else "")
            + f", connection failures {conn_failures}"
        )
        peak = peak_rss(result)
        print(
            f"    RSS MB (main / workers): before {describe_rss(result.rss_before)}, held "
            f"{describe_rss(result.rss_held)}, peak held after changes {describe_rss(peak)}, after "
            f"{describe_rss(result.rss_after)}"
            + (
                f" (while still holding {result.held_after_close} polls whose clients had closed)"
                if result.held_after_close
                else ""
            )
        )
        per_poll = {
            pid: (result.rss_held[pid] - result.rss_before[pid]) / result.held[pid]
            for pid in workers
            if result.held.get(pid)
        }
        at_peak = {pid: (peak[pid] - result.rss_before[pid]) / result.held[pid] for pid in per_poll}
        if per_poll:
            retained = [(result.rss_after[pid] - result.rss_before[pid]) / result.held[pid] for pid in per_poll]
            print(
                "    KB per held poll (held - before) / held, per worker: "
                + ", ".join(f"{value:.1f}" for value in per_poll.values())
                + "; at the peak after changes: "
                + ", ".join(f"{value:.1f}" for value in at_peak.values())
                + "; still resident once answered and closed (after - before) / held: "
                + ", ".join(f"{value:.1f}" for value in retained)
            )
        for hint in connect_hints(result.connect_failures):
            print(f"    {hint}")
        if number == 1:
            kb_per_poll = round(max(per_poll.values()), 1) if per_poll else math.nan
        nan = math.nan  # no figure: counts as the worst in the key=value line
        per_round.append(
            {
                "held": sum(result.held.values()),
                "answered": answered,
                **{f"{name}_ms": round(value) if not math.isnan(value) else nan for name, value in worst.items()},
                "timeouts": timeouts,
                "304s": result.held_304 + result.quick_304,
                "errors": errors,
                "conn_failures": conn_failures,
                "select_p50_ms": round(statistics.median(selects), 1) if selects else nan,
                "select_p99_ms": round(percentile(selects, 0.99), 1) if selects else nan,
                "select_max_ms": round(max(selects), 1) if selects else nan,
                "select_failed": len(result.select_failures) + result.selects_skipped,
                "kb_per_poll_peak": round(max(at_peak.values()), 1) if at_peak else nan,
                "changes_made": len([change for change in result.changes if change.etag]),
            }
        )
    # The worst round's figure of each (a bar must hold in every round).
    for key in per_round[0]:
        values = [figures_of_round[key] for figures_of_round in per_round]
        if any(math.isnan(value) for value in values):
            figures[f"{prefix}_{key}"] = math.nan
        else:
            figures[f"{prefix}_{key}"] = min(values) if key in ("held", "answered", "changes_made") else max(values)
    figures[f"{prefix}_kb_per_poll"] = kb_per_poll
    if change_ms:
        print(
            f"  the {len(change_ms)} changes to {POLLED_CHAIN} answered their caller in: p50 "
            f"{statistics.median(change_ms):.0f} ms, p99 {percentile(sorted(change_ms), 0.99):.0f} ms, max "
            f"{max(change_ms):.0f} ms"
        )
        figures[f"{prefix}_change_p50_ms"] = round(statistics.median(change_ms), 1)
        figures[f"{prefix}_change_p99_ms"] = round(percentile(sorted(change_ms), 0.99), 1)
    else:
        figures[f"{prefix}_change_p99_ms"] = math.nan
    if len(rounds) > 1:
        first_peak, last_peak = peak_rss(rounds[0]), peak_rss(last)
        ratios = {pid: last.rss_after[pid] / rounds[0].rss_after[pid] for pid in workers if rounds[0].rss_after[pid]}
        peaks = {pid: last_peak[pid] / first_peak[pid] for pid in workers if first_peak.get(pid)}
        print(
            f"  RSS after round {len(rounds)} / after round 1, per worker: "
            + ", ".join(f"{ratio:.3f}" for ratio in ratios.values())
            + f" (main process {last.rss_after[main_pid] / max(1, rounds[0].rss_after[main_pid]):.3f}); "
            "peak held, round {} / round 1: ".format(len(rounds))
            + ", ".join(f"{ratio:.3f}" for ratio in peaks.values())
        )
        figures[f"{prefix}_rss_round{len(rounds)}_ratio"] = round(max(ratios.values()), 3) if ratios else math.nan
        figures[f"{prefix}_peak_round{len(rounds)}_ratio"] = round(max(peaks.values()), 3) if peaks else math.nan
    return figures


def bars(clients: int, figures: dict[str, Any], rounds: int) -> list[tuple[str, bool]]:
    def number(key: str) -> float:
        value = figures.get(f"n{clients}_{key}", math.nan)
        return float(value)

    checks = [
        (
            "0 timeouts, every client had every change, p99 <= 1 s from the change's answer",
            number("timeouts") == 0 and number("answered") == clients and number("p99_ms") <= 1000,
        ),
        (
            "selects while held: p99 <= 100 ms, none failed",
            number("select_p99_ms") <= 100 and number("select_failed") == 0,
        ),
        ("<= 20 KB per held poll, at the peak after changes", number("kb_per_poll_peak") <= 20),
        # The worker that makes the change also answers its held polls: the change first.
        ("the changes to the polled chain answered their caller p99 <= 100 ms", number("change_p99_ms") <= 100),
    ]
    if rounds > 1:
        checks.append(
            (
                f"no growth: RSS after round {rounds} and its peak within 10 % of round 1's",
                number(f"rss_round{rounds}_ratio") <= 1.10 and number(f"peak_round{rounds}_ratio") <= 1.10,
            )
        )
    return checks


def interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1000,5000,10000", help="held long polls, one size after another")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size, on the same server")
    parser.add_argument("--wait", type=float, default=55.0, help="the long polls' ?wait= in seconds (at most 60)")
    parser.add_argument("--selects", type=int, default=20, help="writes (select, revert, ...) while polls are held")
    parser.add_argument(
        "--without-identity",
        action="store_true",
        help="clients send no X-Chain-Client / X-Chain-Applied-Version (what fleet status costs)",
    )
    parser.add_argument(
        "--changes", type=int, default=5, help="changes to the polled chain per round, each answered to every client"
    )
    parser.add_argument("--select-timeout", type=float, default=10.0, help="seconds a write may take before giving up")
    parser.add_argument(
        "--client-processes",
        type=int,
        default=2,
        help="client processes the polls are spread over (one event loop each)",
    )
    parser.add_argument(
        "--client-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        help="the client processes' event loop (uvloop, where installed: less of the shared CPU spent by clients)",
    )
    parser.add_argument("--connect-rate", type=float, default=1000.0, help="new connections per second, in all")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=15.0,
        help="seconds after the last connection to wait for every poll to be held",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=10.0,
        help="a client answered 304 at once (not held) asks again after this long (the SDK's default)",
    )
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop databases",
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.clients.split(",")]
    if not 0 < args.wait <= 60:
        raise SystemExit("--wait must be within 0..60 s (the server's most)")
    busiest = max(sizes) / args.connect_rate + args.settle_timeout + args.select_timeout + 5
    if busiest > args.wait:
        print(
            f"  note: connecting, settling and the writes may take {busiest:.0f} s, longer than --wait: the first "
            "polls may time out (304) and be asked again before the change"
        )
    check_limits(max(sizes), args.client_processes)
    # SIGTERM as Ctrl-C: the finally blocks stop the server and the clients and drop the database.
    signal.signal(signal.SIGTERM, interrupted)

    load_before = os.getloadavg()[0]
    figures: dict[str, Any] = {}
    results: list[tuple[int, dict[str, Any]]] = []
    with scratch_control_plane("bench_long_polls", args.admin_url) as plane:
        env = {**plane.env, "METRICS_TOKEN": ""}
        env["PROMETHEUS_MULTIPROC_DIR"] = str(Path(env["VAR_DIR"]) / "prometheus")
        tokens = {"read": plane.token("read"), "write": plane.token("write")}
        fleet = ClientProcesses(args.client_processes, args.poll_interval, args.client_loop)  # forked before any thread
        try:
            for clients in sizes:
                port = free_port()
                command = serve_command(env, port)
                workers = option(command, "--workers")
                backlog = option(command, "--backlog")
                print(f"== {clients} long polls; server: {command}")
                if backlog > somaxconn():
                    print(f"  note: the kernel caps --backlog {backlog} at net.core.somaxconn {somaxconn()}")
                server = Server(command=command, port=port, env=env, log=Path(env["VAR_DIR"]) / f"granian-{port}.log")
                listener = None
                try:
                    server.start(workers)
                    _, other = read_chain(server.base_url, tokens["read"], WRITTEN_CHAIN)
                    default = other["default"]["preset"]
                    for _ in range(4):  # warm each worker's read and write paths before "idle"
                        read_chain(server.base_url, tokens["read"], POLLED_CHAIN)
                        for preset in (WRITTEN_PIN, default):  # ends on the default, whatever the answers
                            write(server.base_url, tokens["write"], WRITTEN_CHAIN, preset, default, "bench: warm", 10)
                    time.sleep(1.5)
                    log_from = server.log.stat().st_size
                    listener = NotifyListener(plane.database_url)
                    listener.start()
                    rounds = []
                    for number in range(1, args.rounds + 1):
                        rounds.append(run_round(number, server, fleet, listener, tokens, args, clients))
                        if server.respawned():
                            print(f"  warning: granian respawned a worker in round {number}: {server.log}")
                    size_figures = summarize(clients, rounds, server.workers, server.process.pid)
                    figures.update(size_figures)
                    results.append((clients, size_figures))
                    with open(server.log, "rb") as log:
                        log.seek(log_from)
                        lines = log.read().decode(errors="replace").splitlines()
                    warnings = [line for line in lines if re.search(r"WARNING|ERROR|CRITICAL|Traceback", line)]
                    if warnings:
                        print(f"  server log ({len(warnings)} warning/error lines), last: {warnings[-1][:300]}")
                finally:
                    if listener is not None:
                        listener.close()
                    server.stop()
        finally:
            fleet.stop()

    columns = [
        ("clients", "", 8),
        ("held", "held", 6),
        ("answered", "answered", 9),
        ("p50 ms", "p50_ms", 7),
        ("p90 ms", "p90_ms", 7),
        ("p99 ms", "p99_ms", 7),
        ("max ms", "max_ms", 7),
        ("timeouts", "timeouts", 8),
        ("304s", "304s", 5),
        ("errors", "errors", 6),
        ("conn fail", "conn_failures", 9),
        ("sel p50", "select_p50_ms", 8),
        ("sel p99", "select_p99_ms", 8),
        ("sel max", "select_max_ms", 8),
        ("sel fail", "select_failed", 8),
        ("KB/poll", "kb_per_poll", 8),
        ("KB peak", "kb_per_poll_peak", 8),
        ("chg p99", "change_p99_ms", 8),
        (f"RSS r{args.rounds}/r1", f"rss_round{args.rounds}_ratio", 9),
        (f"peak r{args.rounds}/r1", f"peak_round{args.rounds}_ratio", 10),
    ]
    print(
        "\nworst round of each size (p50-max: each client's 200 from the change's answer, the worst change; KB/poll: "
        "round 1, held before the changes; KB peak: held again after them; RSS: after the last round / after round 1; "
        "worst worker)"
    )
    print(" ".join(f"{title:>{width}}" for title, _, width in columns))
    for clients, size in results:
        row = [clients] + [size.get(f"n{clients}_{key}", "-") for _, key, _ in columns[1:]]
        print(" ".join(f"{value:>{width}}" for value, (_, _, width) in zip(row, columns, strict=True)))
    print(
        f"(machine load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (1-minute averages); "
        f"{os.cpu_count()} cores; {args.client_processes} client processes on {args.client_loop})"
    )
    largest = max(sizes)
    if largest >= 10000:
        met = True
        for name, ok in bars(largest, figures, args.rounds):
            print(f"bar at {largest}: {name}: {'met' if ok else 'NOT met'}")
            met = met and ok
        figures["bars_met"] = str(met).lower()
    figures["python_ref_us"] = python_reference_us()
    print(" ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: the server and the client processes were stopped, the scratch database dropped")
        sys.exit(130)
