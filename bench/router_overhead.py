"""Router overhead: what ``Router.complete`` itself costs per request, with no-op transports.

Two paths: the head succeeds (``router_us``), and the head fails with HTTP 503 so the second
step serves it (``fallback_us``; breakers off, or the head would soon be skipped). A third
figure adds a request contract (``contract_us``). The no-op transports cost well under a
microsecond, so the figures are the router's own work. Bar (DESIGN section 12): <= 50 us.

``AsyncRouter`` is measured in the same run, on the same paths, awaited one after another
in one event loop (``async_us``, ``async_fallback_us``), next to awaiting the no-op async
transport alone; ``async_ratio`` is ``async_us / router_us``. Its extra cost is the asyncio
timeout each attempt runs under.

Run from the repository root: ``python bench/router_overhead.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from sdk_current import DEFAULT as CHAIN  # the example presets' registry and chain
from sdk_current import REGISTRY

from chainclient import AsyncRouter, Contract, ProviderError, Router, Step

CONTRACT = Contract(requires={"images"}, destinations={"vendor_a-us", "vendor_b-eu"})


def answer(step: Step, request: Any, timeout_s: float) -> str:
    return "ok"


def overloaded(step: Step, request: Any, timeout_s: float) -> str:
    raise ProviderError(503, True, "overloaded")


async def answer_async(step: Step, request: Any, timeout_s: float) -> str:
    return "ok"


async def overloaded_async(step: Step, request: Any, timeout_s: float) -> str:
    raise ProviderError(503, True, "overloaded")


def per_request_async_us(call: Callable[[], Any], requests: int, repeats: int = 5) -> float:
    """As ``per_request_us``, awaiting ``call()`` in one event loop."""

    async def run(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            await call()
        return time.perf_counter() - started

    async def measure() -> float:
        await run(min(requests, 2_000))  # warm up caches
        return min([await run(requests) for _ in range(repeats)])

    return asyncio.run(measure()) / requests * 1e6


def per_request_us(call: Callable[[], object], requests: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs, in microseconds per request (best = least disturbed)."""
    for _ in range(min(requests, 2_000)):  # warm up caches
        call()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(requests):
            call()
        best = min(best, time.perf_counter() - started)
    return best / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()

    healthy = Router(
        CHAIN, transports={"vendor_a": answer, "vendor_b": answer, "self_hosted": answer}, registry=REGISTRY
    )
    failing_head = Router(
        CHAIN,
        transports={"vendor_a": overloaded, "vendor_b": answer, "self_hosted": answer},
        registry=REGISTRY,
        breaker=None,
    )
    baseline = per_request_us(lambda: answer(CHAIN[0], "hello", 20.0), args.requests)
    router_us = per_request_us(lambda: healthy.complete("hello"), args.requests)
    fallback_us = per_request_us(lambda: failing_head.complete("hello"), args.requests)
    contract_us = per_request_us(lambda: healthy.complete("hello", contract=CONTRACT), args.requests)
    assert failing_head.complete("hello").provider == "vendor_b"

    transports = {"vendor_a": answer_async, "vendor_b": answer_async, "self_hosted": answer_async}
    healthy_async = AsyncRouter(CHAIN, transports=transports, registry=REGISTRY)
    failing_async = AsyncRouter(
        CHAIN, transports={**transports, "vendor_a": overloaded_async}, registry=REGISTRY, breaker=None
    )
    async_baseline = per_request_async_us(lambda: answer_async(CHAIN[0], "hello", 20.0), args.requests)
    async_us = per_request_async_us(lambda: healthy_async.complete("hello"), args.requests)
    async_fallback_us = per_request_async_us(lambda: failing_async.complete("hello"), args.requests)
    assert asyncio.run(failing_async.complete("hello")).provider == "vendor_b"

    print(f"no-op transport call alone:        {baseline:6.2f} us")
    print(f"head succeeds:                     {router_us:6.2f} us/request")
    print(f"head fails (503), second serves:   {fallback_us:6.2f} us/request")
    print(f"head succeeds, with a contract:    {contract_us:6.2f} us/request")
    print(f"no-op async transport awaited:     {async_baseline:6.2f} us")
    print(f"AsyncRouter, head succeeds:        {async_us:6.2f} us/request")
    print(f"AsyncRouter, head fails (503):     {async_fallback_us:6.2f} us/request")
    print(
        f"requests={args.requests} router_us={router_us:.1f} fallback_us={fallback_us:.1f} "
        f"contract_us={contract_us:.1f} async_us={async_us:.1f} async_fallback_us={async_fallback_us:.1f} "
        f"async_ratio={async_us / router_us:.2f}"
    )


if __name__ == "__main__":
    main()
