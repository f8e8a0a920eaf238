"""Router overhead: what ``Router.complete`` itself costs per request, with no-op transports.

Two paths: the head succeeds (``router_us``), and the head fails with HTTP 503 so the second
step serves it (``fallback_us``; breakers off, or the head would soon be skipped). A third
figure adds a request contract (``contract_us``). The no-op transports cost well under a
microsecond, so the figures are the router's own work. Bar (DESIGN section 12): <= 50 us.

``AsyncRouter`` is measured in the same run, on the same paths, awaited one after another
in one event loop (``async_us``, ``async_fallback_us``), next to awaiting the no-op async
transport alone; ``async_ratio`` is ``async_us / router_us``. Its extra cost is the asyncio
timeout each attempt runs under.

Failover drills: the same healthy path through a ``ChainClient`` (its hooks: served,
attempts, drills), with no drill in its document (``client_us``) and with an active drill it
takes part in (``drill_us``: hop 1, 0.1 % drilled, so nearly every request pays the drill's
bookkeeping and is served by the head as before); ``drill_added_us`` is the difference, for
``Router`` and ``AsyncRouter``. Bars (issue 54): no drill, within 1 us of the router before
drills; in a drill, at most 2 us more a request. The two are measured in adjacent short runs
(``drill_figures`` says why).

Failure policies: the same healthy path with a failure policy in the document (streams
committed complete, a same-step retry; the receipt names it) against one without
(``policy_added_us``, ``async_policy_added_us``), measured likewise. Bar (issue 61): within
1 us.

Run from the repository root: ``python bench/router_overhead.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sdk_current import DEFAULT as CHAIN  # the example presets' registry and chain
from sdk_current import REGISTRY, example_client

from chainclient import AsyncRouter, ChainClient, ChainDocument, Contract, FailurePolicy, ProviderError, Router, Step
from chainclient.state_file import StateFile
from chainclient.types import Drill

CONTRACT = Contract(requires={"images"}, destinations={"vendor_a-us", "vendor_b-eu"})


def answer(step: Step, request: Any, timeout_s: float) -> str:
    return "ok"


def overloaded(step: Step, request: Any, timeout_s: float) -> str:
    raise ProviderError(503, True, "overloaded")


async def answer_async(step: Step, request: Any, timeout_s: float) -> str:
    return "ok"


async def overloaded_async(step: Step, request: Any, timeout_s: float) -> str:
    raise ProviderError(503, True, "overloaded")


def per_request_async_us(
    call: Callable[[], Any], requests: int, repeats: int = 5, clock: Callable[[], float] = time.perf_counter
) -> float:
    """As ``per_request_us``, awaiting ``call()`` in one event loop."""

    async def run(count: int) -> float:
        started = clock()
        for _ in range(count):
            await call()
        return clock() - started

    async def measure() -> float:
        await run(min(requests, 2_000))  # warm up caches
        return min([await run(requests) for _ in range(repeats)])

    return asyncio.run(measure()) / requests * 1e6


def per_request_us(
    call: Callable[[], object], requests: int, repeats: int = 5, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Best of ``repeats`` runs, in microseconds per request (best = least disturbed)."""
    for _ in range(min(requests, 2_000)):  # warm up caches
        call()
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        for _ in range(requests):
            call()
        best = min(best, clock() - started)
    return best / requests * 1e6


def _instant(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch_s))


def client_holding(document: ChainDocument, state_dir: str) -> ChainClient:
    """A ChainClient (never started) serving ``document``, read from its state file as after
    a restart: the source a service's Router has, with every hook."""
    StateFile(state_dir, chain="chat", registry=REGISTRY).save(document)
    client = example_client("http://127.0.0.1:9", state_dir=state_dir)
    assert client.current().version == document.version
    return client


def drill_documents(chain: list[Step]) -> tuple[ChainDocument, ChainDocument]:
    """``chain`` as a live document, without a drill and with one active now for an hour
    (hop 1, a server error, 0.1 % of the requests: nearly every request in the window pays
    the drill's bookkeeping and is served by the head, as without the drill)."""
    plain = ChainDocument.compiled_default("chat", chain)
    plain = dataclasses.replace(plain, version=1, preset="normal", is_default=False, source="live")
    now = time.time()
    drill = Drill(7, 1, "server_error", 10, (), _instant(now - 60), _instant(now + 3600))
    return plain, dataclasses.replace(plain, version=2, drill=drill)


def adjacent_figures(
    plain: ChainDocument, other: ChainDocument, name: str, requests: int, rounds: int = 31
) -> tuple[dict[str, float], dict[str, ChainClient]]:
    """Per request: a Router (and an AsyncRouter) over a ChainClient holding ``plain``
    (``client``), and over one holding ``other`` (``name``: a drill, a failure policy).
    A difference of a microsecond drowns in this machine's noise when two figures are taken
    apart (its speed drifts by a third within a minute), so the two are measured in short
    adjacent runs, which share the noise of the moment, on the thread's CPU time, ``rounds``
    times (the order swapped each time); each figure is the median, and ``*_added_us`` the
    median of the adjacent runs' differences. Also the two clients, to check what they did."""
    transports = {"vendor_a": answer, "vendor_b": answer, "self_hosted": answer}
    async_transports = {"vendor_a": answer_async, "vendor_b": answer_async, "self_hosted": answer_async}
    with tempfile.TemporaryDirectory() as without, tempfile.TemporaryDirectory() as within:
        clients = {"client": client_holding(plain, without), name: client_holding(other, within)}
        routers = {key: Router(client, transports=transports) for key, client in clients.items()}
        async_routers = {key: AsyncRouter(client, transports=async_transports) for key, client in clients.items()}
        count = max(requests // 10, 1)
        runs: dict[str, list[float]] = {"client": [], name: [], "async_client": [], f"async_{name}": []}
        for turn in range(rounds):
            order = ("client", name) if turn % 2 == 0 else (name, "client")
            for key in order:
                router = routers[key]
                runs[key].append(
                    per_request_us(lambda r=router: r.complete("hello"), count, repeats=1, clock=time.thread_time)
                )
            for key in order:
                async_router = async_routers[key]
                runs[f"async_{key}"].append(
                    per_request_async_us(
                        lambda r=async_router: r.complete("hello"), count, repeats=1, clock=time.thread_time
                    )
                )
    figures = {key: statistics.median(values) for key, values in runs.items()}
    figures[f"{name}_added_us"] = statistics.median(d - c for d, c in zip(runs[name], runs["client"], strict=True))
    figures[f"async_{name}_added_us"] = statistics.median(
        d - c for d, c in zip(runs[f"async_{name}"], runs["async_client"], strict=True)
    )
    return figures, clients


def drill_figures(requests: int) -> dict[str, float]:
    """``adjacent_figures`` without a drill and with an active one the client takes part in."""
    plain, drilled = drill_documents(CHAIN)
    figures, clients = adjacent_figures(plain, drilled, "drill", requests)
    drilled_requests = clients["drill"]._usage.drills.take(7).drilled
    assert drilled_requests > 0, "the drill drilled nothing: the figure would not include it"
    return figures


def policy_figures(requests: int) -> dict[str, float]:
    """``adjacent_figures`` without a failure policy and with one (streams committed complete,
    a same-step retry): what a served request pays for carrying it (its receipt names it)."""
    plain, _ = drill_documents(CHAIN)
    policy = FailurePolicy(commit="complete", first_chunk_ms=5000, retry_max_wait_ms=2000)
    figures, clients = adjacent_figures(plain, dataclasses.replace(plain, failure_policy=policy), "policy", requests)
    assert clients["policy"].current().failure_policy == policy
    return figures


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
    drills = drill_figures(args.requests)
    print(f"ChainClient source, no drill:      {drills['client']:6.2f} us/request")
    print(f"ChainClient source, in a drill:    {drills['drill']:6.2f} us/request (0.1 % drilled)")
    print(f"  the drill adds:                  {drills['drill_added_us']:6.2f} us/request")
    print(f"AsyncRouter, ChainClient, no drill:{drills['async_client']:6.2f} us/request")
    print(f"AsyncRouter, ChainClient, drill:   {drills['async_drill']:6.2f} us/request")
    print(f"  the drill adds:                  {drills['async_drill_added_us']:6.2f} us/request")
    policies = policy_figures(args.requests)
    print(f"ChainClient source, a policy:      {policies['policy']:6.2f} us/request")
    print(f"  the policy adds:                 {policies['policy_added_us']:6.2f} us/request")
    print(f"AsyncRouter, ChainClient, policy:  {policies['async_policy']:6.2f} us/request")
    print(f"  the policy adds:                 {policies['async_policy_added_us']:6.2f} us/request")
    print(
        f"requests={args.requests} router_us={router_us:.1f} fallback_us={fallback_us:.1f} "
        f"contract_us={contract_us:.1f} async_us={async_us:.1f} async_fallback_us={async_fallback_us:.1f} "
        f"async_ratio={async_us / router_us:.2f} client_us={drills['client']:.1f} drill_us={drills['drill']:.1f} "
        f"drill_added_us={drills['drill_added_us']:.2f} async_client_us={drills['async_client']:.1f} "
        f"async_drill_us={drills['async_drill']:.1f} "
        f"async_drill_added_us={drills['async_drill_added_us']:.2f} "
        f"policy_added_us={policies['policy_added_us']:.2f} "
        f"async_policy_added_us={policies['async_policy_added_us']:.2f}"
    )


if __name__ == "__main__":
    main()
