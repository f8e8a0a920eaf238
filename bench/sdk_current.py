"""The poller's costs: one ``ChainClient.current()`` call, and an idle poller's CPU.

``current_ns``: nanoseconds per ``current()`` call (best of 5 runs of 1,000,000 calls, loop
overhead included; ``loop_ns`` is the empty loop alone). Bar (DESIGN section 12): <= 1 us.

``idle_cpu_pct``: process CPU time over wall time while a started client polls a local
server that answers 304 at once (run in a subprocess so its CPU is not counted), at an
aggressive ``--poll-interval`` (default 0.1 s) so the figure is measurable.
``poll_cpu_us`` is the CPU per poll; at the default 10 s interval the idle cost is
``poll_cpu_us / 100_000`` percent of one core, and a held long poll costs less still.

Run from the repository root: ``python bench/sdk_current.py [--calls N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    import chainclient  # noqa: F401
except ImportError:  # not installed: use the source tree next to this script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk"))

from chainclient import ChainClient, Provider, Registry, Step

# The services' compiled-in registry: the providers and models of the example presets.
REGISTRY = Registry(
    {
        "vendor_a": Provider(destination="vendor_a-us", models={"large": {"text", "images"}}),
        "vendor_b": Provider(destination="vendor_b-eu", models={"large": {"text", "images"}}),
        "self_hosted": Provider(destination="self-hosted", models={"8b": {"text"}}),
    }
)
DEFAULT = [Step("vendor_a", "large", 20_000), Step("vendor_b", "large", 20_000), Step("self_hosted", "8b", 10_000)]


def example_client(base_url: str, **options: Any) -> ChainClient:
    """A client of the example presets' ``chat`` chain, as the benchmarks run it."""
    return ChainClient(
        base_url,
        **{"chain": "chat", "token": "bench", "registry": REGISTRY, "default": DEFAULT, "service": "bench", **options},
    )


# A control plane that never changes: every poll gets a 304 at once (keep-alive, HTTP/1.1).
SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(304)
        self.send_header("ETag", '"0"')
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def current_ns(client: ChainClient, calls: int, repeats: int = 5) -> tuple[float, float]:
    """Best-of-``repeats`` nanoseconds per ``current()`` call, and per empty loop turn."""
    current = client.current
    best_call = best_loop = float("inf")
    for _ in range(repeats):
        started = time.perf_counter_ns()
        for _ in range(calls):
            current()
        best_call = min(best_call, time.perf_counter_ns() - started)
        started = time.perf_counter_ns()
        for _ in range(calls):
            pass
        best_loop = min(best_loop, time.perf_counter_ns() - started)
    return best_call / calls, best_loop / calls


def idle_cpu(poll_interval: float, seconds: float) -> tuple[float, float, int]:
    """CPU percent of one core and CPU microseconds per poll while the poller idles."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory() as state_dir:
            client = example_client(
                f"http://127.0.0.1:{port}", state_dir=state_dir, poll_interval=poll_interval, long_poll=True
            )
            with client:
                time.sleep(min(1.0, poll_interval * 5))  # first connection, warm-up
                polls_before = client.health()["polls"]
                cpu_before, wall_before = time.process_time(), time.perf_counter()
                time.sleep(seconds)
                cpu = time.process_time() - cpu_before
                wall = time.perf_counter() - wall_before
                polls = client.health()["polls"] - polls_before
                failures = client.health()["consecutive_failures"]
            if failures:
                raise SystemExit(f"the local server failed {failures} polls; figures invalid")
    finally:
        server.terminate()
        server.wait()
    return cpu / wall * 100, cpu / max(polls, 1) * 1e6, polls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    args = parser.parse_args()

    client = example_client("http://127.0.0.1:9")  # never started: current() does no I/O anyway
    call_ns, loop_ns = current_ns(client, args.calls)
    print(f"current(): {call_ns:.1f} ns/call over {args.calls:,} calls (empty loop {loop_ns:.1f} ns)")

    cpu_pct, poll_cpu_us, polls = idle_cpu(args.poll_interval, args.seconds)
    print(
        f"idle poller: {cpu_pct:.2f}% of one core at a {args.poll_interval:g}s interval "
        f"({polls} polls in {args.seconds:g}s, {poll_cpu_us:.0f} us CPU each; "
        f"{poll_cpu_us / 100_000:.4f}% at the default 10s interval)"
    )
    print(
        f"current_ns={call_ns:.0f} loop_ns={loop_ns:.0f} idle_cpu_pct={cpu_pct:.2f} "
        f"poll_cpu_us={poll_cpu_us:.0f} polls={polls} poll_interval_s={args.poll_interval:g}"
    )


if __name__ == "__main__":
    main()
