"""Streaming through the Router next to the raw provider library, in one run, on loopback.

Both sides read the same answers from the testing kit's fault provider (an OpenAI- and
Anthropic-speaking local server, run in a process of its own), with the official library: the raw side iterates
``client.chat.completions.create(stream=True)`` (``client.messages.create(stream=True)``)
itself; the routed side iterates ``Router.stream`` over the library's adapter
(``chainclient.integrations``), which adds the commit point, the bounds and the receipt.
Runs alternate raw/routed so the machine's noise falls on both alike.

Figures (bars from issue 35):

- ``rate_ratio``: chunks per second routed / raw, for streams of ``--chunks`` chunks (the
  median over ``--repeats`` adjacent raw/routed pairs of their ratio); bar >= 0.95.
- ``ttfc_p99_extra_ms``: p99 of the time to the first chunk with content (what the caller
  waits for: the role or ``message_start`` event before it shows nothing, and the router
  holds it until content comes), routed minus raw, over ``--streams`` short streams each;
  bar <= 1 ms. ``ttfc_p50_extra_ms`` is the median's.
- ``per_chunk_us``: the router's own cost per chunk, from an in-memory stream of 200,000
  chunks read directly and through ``Router.stream`` (no socket, so no network noise);
  bar <= 5 us. ``wire_per_chunk_us`` is the same difference measured on the wire.
- ``drill_added_us``: what a failover drill in the document adds to a streamed request
  (in memory, two chunks, through a ChainClient's hooks; 0.1 % drilled), as
  ``bench/router_overhead.py`` measures it for ``complete()``; bar (issue 54) <= 2 us.

Run from the repository root: ``python bench/stream_overhead.py [--chunks N] [--streams N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI
from router_overhead import client_holding, drill_documents
from sdk_current import DEFAULT

from chainclient import AsyncRouter, Router, Step
from chainclient.integrations.anthropic import AnthropicMessages, AsyncAnthropicMessages
from chainclient.integrations.openai import AsyncOpenAIChat, OpenAIChat
from chainclient.testing import FakeStreams

MESSAGES = [{"role": "user", "content": "hello"}]
MODEL = "bench-model"
TIMEOUT_S = 60.0
# The raw side sends what the adapters send (the attempt's timeout; OpenAI's usage chunk),
# so both sides ask the server for the same stream.
OPENAI_RAW = {"model": MODEL, "messages": MESSAGES, "stream": True, "timeout": TIMEOUT_S,
              "stream_options": {"include_usage": True}}  # fmt: skip
ANTHROPIC_RAW = {"model": MODEL, "max_tokens": 64, "messages": MESSAGES, "stream": True, "timeout": TIMEOUT_S}


class Memory:
    """An in-memory provider stream of ``count`` one-character chunks."""

    def __init__(self, count: int) -> None:
        self._chunks = iter(["x"] * count)

    def __iter__(self) -> Memory:
        return self

    def __next__(self) -> str:
        return next(self._chunks)

    def close(self) -> None:
        pass


SERVE = """
import sys
from chainclient.fault_provider import FaultProvider
provider = FaultProvider("ok", chunks=int(sys.argv[1]))
print(provider.url, flush=True)
sys.stdin.read()
provider.close()
"""


@contextlib.contextmanager
def fault_provider(chunks: int) -> Iterator[str]:
    """A fault provider answering ``ok`` with ``chunks`` chunks, in a process of its own:
    in this one its threads would take the interpreter lock from the client being measured."""
    sdk = str(Path(__file__).resolve().parents[1] / "sdk")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(chunks)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": sdk},
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.communicate("")


def paired(raw: list[float], routed: list[float], chunks: int) -> tuple[float, float]:
    """(rate ratio, extra us per chunk) as the medians over adjacent raw/routed pairs: the
    two runs of a pair share the machine's noise of the moment, which a ratio of two
    medians taken apart does not cancel."""
    ratios = [r / q for r, q in zip(raw, routed, strict=True)]
    extra = [(q - r) / chunks * 1e6 for r, q in zip(raw, routed, strict=True)]
    return statistics.median(ratios), statistics.median(extra)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def count(chunks: Any) -> int:
    return sum(1 for _ in chunks)


def timed(read: Callable[[], int]) -> float:
    started = time.perf_counter()
    read()
    return time.perf_counter() - started


def has_content(chunk: Any) -> bool:
    """Whether a raw library chunk carries text: what the caller waits for (the role and
    start events before it show nothing; the router holds them until content comes)."""
    choices = getattr(chunk, "choices", None)
    if choices is not None:
        return bool(choices and choices[0].delta.content)
    return getattr(chunk, "type", "") == "content_block_delta"


def first_content(open_stream: Callable[[], Iterator[Any]]) -> float:
    """Seconds from opening a stream to holding its first chunk with content."""
    started = time.perf_counter()
    stream = iter(open_stream())
    for chunk in stream:
        if has_content(chunk):
            break
    elapsed = time.perf_counter() - started
    for _ in stream:  # read the rest, so the connection goes back to the pool
        pass
    return elapsed


def sync_sides(url: str, step: Step) -> dict[str, tuple[Callable[[], Any], Router, dict[str, Any]]]:
    """Per library: how the raw side opens a stream, the router over the adapter, its request.
    Each side has a client (and a connection pool) of its own, as a service has: OpenAI's
    synchronous library closes a stream's connection where the adapter pools it, and with
    one pool the raw side would take the connection the routed side gave back."""
    openai, routed_openai = (OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0) for _ in range(2))
    anthropic, routed_anthropic = (Anthropic(base_url=url, api_key="bench", max_retries=0) for _ in range(2))
    return {
        "openai": (
            lambda: openai.chat.completions.create(**OPENAI_RAW),
            Router([step], transports={"vendor": OpenAIChat(routed_openai)}),
            {"messages": MESSAGES},
        ),
        "anthropic": (
            lambda: anthropic.messages.create(**ANTHROPIC_RAW),
            Router([step], transports={"vendor": AnthropicMessages(routed_anthropic)}),
            {"max_tokens": 64, "messages": MESSAGES},
        ),
    }


def drill_added_us(streams: int = 4_000, rounds: int = 15) -> tuple[float, float]:
    """Per streamed request (two chunks in memory, through a ChainClient): without a drill in
    the document, and with one active (0.1 % drilled); best of ``rounds`` alternated rounds,
    on the thread's CPU time."""
    plain, drilled = drill_documents(DEFAULT)
    fakes = FakeStreams(providers=("vendor_a", "vendor_b", "self_hosted"))
    best = {"plain": float("inf"), "drill": float("inf")}
    with tempfile.TemporaryDirectory() as without, tempfile.TemporaryDirectory() as within:
        routers = {
            name: Router(client_holding(document, state_dir), transports={}, stream_transports=fakes.transports)
            for name, document, state_dir in (("plain", plain, without), ("drill", drilled, within))
        }
        for _ in range(rounds):
            for name, router in routers.items():
                started = time.thread_time()
                for _ in range(streams):
                    for _ in router.stream("x"):
                        pass
                best[name] = min(best[name], (time.thread_time() - started) / streams * 1e6)
    return best["plain"], best["drill"] - best["plain"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--streams", type=int, default=1_000)
    args = parser.parse_args()

    # The router's own cost per chunk, without a socket.
    memory_chunks = 200_000
    memory_router = Router(
        [Step("memory", "m", 60_000)], transports={}, stream_transports={"memory": lambda *_: Memory(memory_chunks)}
    )
    direct, routed = [], []
    for _ in range(7):
        direct.append(timed(lambda: sum(1 for _ in Memory(memory_chunks))))
        routed.append(timed(lambda: sum(1 for _ in memory_router.stream("x"))))
    per_chunk_us = (min(routed) - min(direct)) / memory_chunks * 1e6

    figures: dict[str, float] = {"per_chunk_us": per_chunk_us}
    figures["stream_request_us"], figures["drill_added_us"] = drill_added_us()
    with fault_provider(args.chunks) as url, fault_provider(3) as short_url:
        step = Step("vendor", MODEL, 60_000)
        sides = sync_sides(url, step)
        for name, (raw_open, router, request) in sides.items():
            raw_times, routed_times = [], []
            for _ in range(args.repeats):
                raw_times.append(timed(lambda opener=raw_open: count(opener())))
                routed_times.append(timed(lambda r=router, q=request: count(r.stream(q))))
            figures[f"{name}_rate_ratio"], figures[f"{name}_wire_per_chunk_us"] = paired(
                raw_times, routed_times, args.chunks
            )

        for name, (raw_open, router, request) in sync_sides(short_url, step).items():
            raw_first, routed_first = [], []
            for _ in range(args.streams):
                raw_first.append(first_content(raw_open))
                routed_first.append(first_content(lambda r=router, q=request: r.stream(q)))
            figures[f"{name}_ttfc_raw_p99_ms"] = p99(raw_first) * 1000
            figures[f"{name}_ttfc_p50_extra_ms"] = (
                statistics.median(routed_first) - statistics.median(raw_first)
            ) * 1000
            figures[f"{name}_ttfc_p99_extra_ms"] = (p99(routed_first) - p99(raw_first)) * 1000

        # AsyncRouter next to the async library, the same way.

        async def async_side() -> None:
            aopenai, routed_aopenai = (
                AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0) for _ in range(2)
            )
            aanthropic, routed_aanthropic = (
                AsyncAnthropic(base_url=url, api_key="bench", max_retries=0) for _ in range(2)
            )
            openers = {
                "openai": (
                    lambda: aopenai.chat.completions.create(**OPENAI_RAW),
                    AsyncRouter([step], transports={"vendor": AsyncOpenAIChat(routed_aopenai)}),
                    {"messages": MESSAGES},
                ),
                "anthropic": (
                    lambda: aanthropic.messages.create(**ANTHROPIC_RAW),
                    AsyncRouter([step], transports={"vendor": AsyncAnthropicMessages(routed_aanthropic)}),
                    {"max_tokens": 64, "messages": MESSAGES},
                ),
            }
            for name, (raw_open, router, request) in openers.items():
                raw_times, routed_times = [], []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    async for _ in await raw_open():
                        pass
                    raw_times.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    async for _ in router.stream(request):
                        pass
                    routed_times.append(time.perf_counter() - started)
                figures[f"async_{name}_rate_ratio"], figures[f"async_{name}_wire_per_chunk_us"] = paired(
                    raw_times, routed_times, args.chunks
                )

        asyncio.run(async_side())

    for key, value in figures.items():
        print(f"{key:34} {value:10.3f}")
    print(" ".join(f"{key}={value:.3f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
