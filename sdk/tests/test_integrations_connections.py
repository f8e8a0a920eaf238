"""The adapters' connections, through the routers: a stream read to its end gives its
connection back to the client's pool, as a whole answer does, so a service streaming one
request after another keeps one connection; a stream left early, aborted by a bound, or
whose body does not end after its last event, closes its own (promptly), so the next
request never reads the rest of an answer it did not ask for. The fault provider counts the
connections it accepted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_integrations import STEP, VENDORS, Vendor  # the adapters as that module builds them

from chainclient import AsyncRouter, Router
from chainclient.errors import StreamInterrupted
from chainclient.fault_provider import FaultProvider
from chainclient.integrations._http import DRAIN_S

# What a prompt close or end may take past its bound on a busy machine; far short of the
# fault provider's 30 s pauses, which a close that waited for them would sit through.
SLACK_S = 0.5


OPENAI = VENDORS[0]
IDS = [vendor.name for vendor in VENDORS]
CALLS = [("stream", "stream"), ("complete", "stream"), ("stream", "complete", "stream")]
CALL_IDS = ["-".join(calls) for calls in CALLS]


@pytest.fixture
def provider() -> Iterator[FaultProvider]:
    with FaultProvider("ok", chunks=5) as fault_provider:
        yield fault_provider


def _sync_router(vendor: Vendor, provider: FaultProvider) -> tuple[Router, Any]:
    adapter = vendor.sync(provider)
    return Router([STEP], transports={"vendor": adapter}), adapter.client


def _async_router(vendor: Vendor, provider: FaultProvider) -> tuple[AsyncRouter, Any]:
    adapter = vendor.async_(provider)
    return AsyncRouter([STEP], transports={"vendor": adapter}), adapter.client


# --- read to the end: one connection ---------------------------------------------------------


@pytest.mark.parametrize("calls", CALLS, ids=CALL_IDS)
@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_a_stream_read_to_its_end_gives_its_connection_back(
    provider: FaultProvider, vendor: Vendor, calls: tuple[str, ...]
) -> None:
    router, client = _sync_router(vendor, provider)
    for call in calls:
        if call == "complete":
            assert router.complete(vendor.request).value is not None
            continue
        with router.stream(vendor.request) as route:
            chunks = sum(1 for _ in route)
        assert route.receipt is not None and chunks >= 5
    client.close()
    assert len(provider.requests) == len(calls)
    assert provider.connections == 1


@pytest.mark.parametrize("calls", CALLS, ids=CALL_IDS)
@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_an_async_stream_read_to_its_end_gives_its_connection_back(
    provider: FaultProvider, vendor: Vendor, calls: tuple[str, ...]
) -> None:
    async def main() -> None:
        router, client = _async_router(vendor, provider)
        for call in calls:
            if call == "complete":
                assert (await router.complete(vendor.request)).value is not None
                continue
            async with router.stream(vendor.request) as route:
                chunks = 0
                async for _ in route:
                    chunks += 1
            assert route.receipt is not None and chunks >= 5
        await client.close()

    asyncio.run(main())
    assert len(provider.requests) == len(calls)
    assert provider.connections == 1


# --- left early or aborted: its connection closed, promptly ----------------------------------


@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_a_stream_left_early_closes_its_connection(provider: FaultProvider, vendor: Vendor) -> None:
    provider.set("ok", chunks=5, chunk_interval_s=30)  # the rest of the body would take minutes
    router, client = _sync_router(vendor, provider)
    with router.stream(vendor.request) as route:
        next(iter(route))
        leaving = time.monotonic()
    assert time.monotonic() - leaving < SLACK_S
    provider.set("ok")
    assert router.complete(vendor.request).value is not None  # not the rest of the stream
    client.close()
    assert provider.connections == 2


@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_an_async_stream_left_early_closes_its_connection(provider: FaultProvider, vendor: Vendor) -> None:
    provider.set("ok", chunks=5, chunk_interval_s=30)

    async def main() -> float:
        router, client = _async_router(vendor, provider)
        async with router.stream(vendor.request) as route:
            await route.__anext__()
            leaving = time.monotonic()
        left_s = time.monotonic() - leaving
        provider.set("ok")
        assert (await router.complete(vendor.request)).value is not None
        await client.close()
        return left_s

    assert asyncio.run(main()) < SLACK_S
    assert provider.connections == 2


@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_a_stream_aborted_by_its_idle_bound_closes_its_connection(provider: FaultProvider, vendor: Vendor) -> None:
    provider.set("ok", chunks=5, chunk_interval_s=30)
    router, client = _sync_router(vendor, provider)
    with pytest.raises(StreamInterrupted, match="idle"):
        with router.stream(vendor.request, idle_s=0.2) as route:
            for _ in route:
                pass
    provider.set("ok")
    assert router.complete(vendor.request).value is not None
    client.close()
    assert provider.connections == 2


@pytest.mark.parametrize("vendor", VENDORS, ids=IDS)
def test_an_async_stream_cut_by_its_idle_bound_closes_its_connection(provider: FaultProvider, vendor: Vendor) -> None:
    provider.set("ok", chunks=5, chunk_interval_s=30)

    async def main() -> None:
        router, client = _async_router(vendor, provider)
        with pytest.raises(StreamInterrupted, match="idle"):
            async with router.stream(vendor.request, idle_s=0.2) as route:
                async for _ in route:
                    pass
        provider.set("ok")
        assert (await router.complete(vendor.request)).value is not None
        await client.close()

    asyncio.run(main())
    assert provider.connections == 2


# --- a body that does not end after its last event --------------------------------------------
# OpenAI's only: its library stops reading at [DONE], so the body's end is read for the pool
# (by the adapter, or by the asyncio library itself) within DRAIN_S; Anthropic's library reads
# a stream to the end of its body, whenever that comes, as it does without the adapter.


def test_a_stream_whose_body_does_not_end_is_complete_and_its_connection_closed(provider: FaultProvider) -> None:
    provider.set("ok", chunks=5, end_delay_s=30)
    router, client = _sync_router(OPENAI, provider)
    started = time.monotonic()
    with router.stream(OPENAI.request) as route:
        for _ in route:
            pass
    assert route.receipt is not None
    assert time.monotonic() - started < DRAIN_S + SLACK_S
    provider.set("ok")
    assert router.complete(OPENAI.request).value is not None
    client.close()
    assert provider.connections == 2


def test_an_async_stream_whose_body_does_not_end_is_complete_and_its_connection_closed(
    provider: FaultProvider,
) -> None:
    provider.set("ok", chunks=5, end_delay_s=30)

    async def main() -> float:
        router, client = _async_router(OPENAI, provider)
        started = time.monotonic()
        async with router.stream(OPENAI.request) as route:
            async for _ in route:
                pass
        assert route.receipt is not None
        elapsed = time.monotonic() - started
        provider.set("ok")
        assert (await router.complete(OPENAI.request)).value is not None
        await client.close()
        return elapsed

    assert asyncio.run(main()) < DRAIN_S + SLACK_S
    assert provider.connections == 2
