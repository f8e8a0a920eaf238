"""CPU a web worker spends per read and per long poll answered, for server variants side by side.

Starts one 1-worker production web process (granian, the read front and Django) per variant
on one scratch PostgreSQL database; a variant is a name and the extra granian options it
runs with (``--variant uvloop="--loop uvloop"``). Then, in alternating rounds:

- ``reads``: wrk (one thread, 32 connections) on the authenticated chain read (200s) for
  ``--duration`` seconds; the worker's CPU (all its threads, from /proc) per read;
- ``long-polls``: ``--polls`` clients in a process of their own, each on one connection,
  long-poll ``chat`` and poll again as soon as they are answered (as the SDK does), while a
  change (select, revert, ...) is made every 0.7 s; the worker's CPU per answer and re-poll.

CPU per request is steadier than requests per second on this shared machine; compare the
variants of one run. To compare code, run the same command from two checkouts.

    python bench/worker_cpu.py reads --variant asyncio="--loop asyncio" --variant uvloop="--loop uvloop"
    python bench/worker_cpu.py long-polls --polls 2000 --variant asyncio="--loop asyncio" \
        --variant uvloop="--loop uvloop"

Ends with one line of key=value figures (medians over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from propagation import children_of  # noqa: E402
from read_throughput import (  # noqa: E402
    cpu_seconds,
    free_port,
    granian,
    python_reference_us,
    scratch_control_plane,
    start,
    stop,
    wait_until_up,
    wrk,
)
from select_latency import Writer  # noqa: E402

CHAT = "/api/v1/chains/chat"


def worker_of(server: subprocess.Popen) -> int:
    """The one worker process of a 1-worker granian server (its child)."""
    return children_of(server.pid)[0]


def run_pollers(port: int, token: str, polls: int, answered: Any) -> None:
    """``polls`` long-polling clients (raw HTTP/1.1 over asyncio streams), each asking again
    with the answer's ETag as soon as it has it; counts answers in ``answered``."""

    async def poller(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        etag = ""
        while True:
            writer.write(
                (
                    f"GET {CHAT}?wait=30 HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
                    f"If-None-Match: {etag}\r\nX-Chain-Client: worker-cpu/instance-{index}\r\n\r\n"
                ).encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"etag":
                    etag = value.strip().decode()
            if length:
                await reader.readexactly(length)
            with answered.get_lock():
                answered.value += 1

    async def main() -> None:
        tasks = []
        for index in range(polls):
            tasks.append(asyncio.ensure_future(poller(index)))
            if index % 100 == 99:
                await asyncio.sleep(0.05)  # 2,000 connections a second
        await asyncio.gather(*tasks)

    asyncio.run(main())


def reads_round(port: int, worker: int, auth: dict[str, str], duration: int) -> float:
    before = cpu_seconds([worker])  # the process's own figure counts all its threads
    load = wrk(f"http://127.0.0.1:{port}{CHAT}", auth, duration, 32)
    return (cpu_seconds([worker]) - before) / (load.rps * duration) * 1e6


def long_polls_round(port: int, worker: int, read_token: str, writer: Writer, polls: int, duration: int) -> float:
    answered = multiprocessing.Value("l", 0)
    clients = multiprocessing.Process(target=run_pollers, args=(port, read_token, polls, answered), daemon=True)
    clients.start()
    try:
        deadline = time.monotonic() + 30
        while answered.value < polls and time.monotonic() < deadline:  # each has its first 200
            time.sleep(0.2)
        time.sleep(1.0)  # and is held again
        before, counted = cpu_seconds([worker]), answered.value
        started = time.monotonic()
        pin = True
        while time.monotonic() - started < duration or not pin:  # ending on a revert
            kind, body = ("select", {"preset": "pin_secondary"}) if pin else ("revert", {})
            writer.post(f"{CHAT}/{kind}", {**body, "reason": "bench: worker CPU"})
            pin = not pin
            time.sleep(0.7)
        time.sleep(1.0)  # the last change answered
        return (cpu_seconds([worker]) - before) / max(1, answered.value - counted) * 1e6
    finally:
        clients.terminate()
        clients.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["reads", "long-polls"])
    parser.add_argument(
        "--variant", action="append", default=[], help='NAME="granian options", once per server (at least one)'
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=int, default=4, help="seconds per round (long polls: at least 8)")
    parser.add_argument("--polls", type=int, default=2000, help="long-polling clients (long-polls)")
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    variants = dict(item.partition("=")[::2] for item in args.variant) or {"default": ""}
    if args.mode == "reads" and shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    duration = args.duration if args.mode == "reads" else max(args.duration, 8)

    with scratch_control_plane("bench_worker_cpu", args.admin_url) as plane:
        read_token, write_token = plane.token("read"), plane.token("write")
        auth = {"Authorization": f"Bearer {read_token}"}
        extra = ("--backlog", "20480", "--backpressure", "20480")
        servers: dict[str, tuple[int, subprocess.Popen]] = {}
        try:
            for name in variants:
                port = free_port()
                options = (*extra, *shlex.split(variants[name]))
                command = granian("controlplane.asgi:application", port, workers=1, extra=options)
                servers[name] = (port, start(command, plane.env))
            workers = {}
            for name, (port, server) in servers.items():
                wait_until_up(f"http://127.0.0.1:{port}/healthz")
                workers[name] = worker_of(server)
                if args.mode == "reads":
                    wrk(f"http://127.0.0.1:{port}{CHAT}", auth, 1, 32)  # warm
            figures: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, (port, _) in servers.items():
                    if args.mode == "reads":
                        figures[name].append(reads_round(port, workers[name], auth, duration))
                    else:
                        writer = Writer(port, write_token)
                        round_cpu = long_polls_round(port, workers[name], read_token, writer, args.polls, duration)
                        figures[name].append(round_cpu)
                        writer.close()
        finally:
            for _, server in servers.values():
                stop(server)

    unit = "read" if args.mode == "reads" else "answer and re-poll"
    for name, values in figures.items():
        print(f"{name:>12}: CPU per {unit} {', '.join(f'{v:.1f}' for v in sorted(values))} us ({variants[name]!r})")
    line = {f"{name}_us": round(statistics.median(values), 1) for name, values in figures.items()}
    line["python_ref_us"] = python_reference_us()
    print(" ".join(f"{key}={value}" for key, value in line.items()))


if __name__ == "__main__":
    main()
