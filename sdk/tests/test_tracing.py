"""Each attempt a router makes is an OpenTelemetry span when OpenTelemetry is installed, and
routing needs none of it when it is not.

The spans are read back with the OpenTelemetry SDK's in-memory exporter, on a tracer provider
in the API's global place while this module runs, as a service would set its own.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from router_fixtures import fakes_for, make_router, run_async

from chainclient import AllProvidersFailed, Answer, AsyncRouter, Router, Step, tracing
from chainclient.testing import FAKE_MODEL, FakeClock, FakeStreams, fake_chain, fake_document

pytestmark = pytest.mark.usefixtures("router_kind")

SDK = Path(__file__).resolve().parents[1]


class Breakable(SpanProcessor):
    """The exporter's processor, which can be told to raise as a broken tracing setup would."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.inner = SimpleSpanProcessor(exporter)
        self.broken = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.broken:
            raise RuntimeError("the tracing backend is broken")
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.inner.on_end(span)


_EXPORTER = InMemorySpanExporter()
_PROCESSOR = Breakable(_EXPORTER)


@pytest.fixture(scope="module", autouse=True)
def _tracer_provider() -> Iterator[None]:
    """The service's tracer provider, for this module only: the suite runs in one process,
    and the API offers no way to unset its global, so its own name for it is patched (and
    chainclient resolves the API afresh, then forgets it again)."""
    provider = TracerProvider()
    provider.add_span_processor(_PROCESSOR)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trace, "_TRACER_PROVIDER", provider)
        patch.setattr(tracing, "_api", tracing._UNRESOLVED)
        yield
    provider.shutdown()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _PROCESSOR.broken = False


def attempts(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == "chainclient.attempt"]


def test_a_failover_is_two_attempt_spans_under_the_callers_span(exporter: InMemorySpanExporter) -> None:
    router = make_router(fakes_for({"alpha": 503}), fake_document(version=7))
    tracer = trace.get_tracer("a service")

    with tracer.start_as_current_span("handle request") as caller:
        result = router.complete("hi", task_id="t-1")
        assert trace.get_current_span() is caller  # the attempts gave the context back

    assert result.provider == "beta"
    failed, served = attempts(exporter)
    caller_context = caller.get_span_context()
    for span in (failed, served):
        assert span.parent is not None and span.parent.span_id == caller_context.span_id
        assert span.context is not None and span.context.trace_id == caller_context.trace_id
        assert span.kind is SpanKind.CLIENT
    assert dict(failed.attributes or {}) == {
        "chainclient.chain": "chat",
        "chainclient.chain.version": 7,
        "chainclient.chain.epoch": 0,
        "chainclient.preset": "test-preset",
        "chainclient.step.index": 0,
        "chainclient.provider": "alpha",
        "chainclient.model": FAKE_MODEL,
        "chainclient.task_id": "t-1",
        "chainclient.attempt_id": "t-1-1",
        "gen_ai.provider.name": "alpha",
        "gen_ai.system": "alpha",
        "gen_ai.request.model": FAKE_MODEL,
        "chainclient.outcome": "failed",
        "chainclient.outcome_class": "server_error",
        "chainclient.dispatch": "dispatched_known",
        "chainclient.destination": "alpha-us",
        "chainclient.contract": "none",
        "http.response.status_code": 503,
        "error.type": "server_error",
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == result.attempts[0].reason
    assert [event.name for event in failed.events] == ["exception"]
    attributes = served.attributes or {}
    assert attributes["chainclient.step.index"] == 1
    assert attributes["chainclient.provider"] == attributes["gen_ai.provider.name"] == "beta"
    assert attributes["chainclient.attempt_id"] == "t-1-2"
    assert attributes["chainclient.outcome"] == "ok"
    assert attributes["chainclient.outcome_class"] == "served"
    assert "error.type" not in attributes and "http.response.status_code" not in attributes
    assert served.status.status_code is StatusCode.UNSET
    assert served.start_time is not None and failed.end_time is not None
    assert served.start_time >= failed.end_time


def test_a_timeout_and_an_exhausted_chain_mark_every_span_failed(exporter: InMemorySpanExporter) -> None:
    router = make_router(fakes_for({"alpha": "timeout", "beta": "unavailable", "gamma": 500}))

    with pytest.raises(AllProvidersFailed):
        router.complete("hi")

    spans = attempts(exporter)
    assert [span.attributes["chainclient.outcome_class"] for span in spans if span.attributes] == [
        "timeout",
        "unavailable",
        "server_error",
    ]
    assert all(span.status.status_code is StatusCode.ERROR for span in spans)
    assert all(span.parent is None for span in spans)  # no caller's span: each is a root


def test_the_transport_runs_inside_its_attempts_span(exporter: InMemorySpanExporter) -> None:
    """An instrumented vendor client's span nests under the attempt that made the call."""
    tracer = trace.get_tracer("a vendor client")

    def vendor(step: Step, request: Any, timeout_s: float) -> Answer:
        with tracer.start_as_current_span("POST /v1/chat"):
            return Answer("hello", model_id="vendor-chat-2026-11-01")

    router = make_router(fakes_for({"alpha": vendor}))
    router.complete("hi")

    (call,) = [span for span in exporter.get_finished_spans() if span.name == "POST /v1/chat"]
    (attempt,) = attempts(exporter)
    assert call.parent is not None and attempt.context is not None
    assert call.parent.span_id == attempt.context.span_id
    assert (attempt.attributes or {})["gen_ai.response.model"] == "vendor-chat-2026-11-01"


def test_a_refused_step_is_no_attempt_and_no_span(exporter: InMemorySpanExporter) -> None:
    router = make_router(fakes_for({"alpha": 503}))

    with pytest.raises(AllProvidersFailed) as failed:
        router.complete("hi", allow_fallback=False)

    assert [step.provider for step, _ in failed.value.receipt.refused] == ["beta", "gamma"]
    assert [span.attributes["chainclient.provider"] for span in attempts(exporter) if span.attributes] == ["alpha"]


def test_a_broken_tracing_setup_never_fails_a_request(
    exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_warned", False)
    _PROCESSOR.broken = True
    router = make_router(fakes_for({"alpha": 503}))

    with caplog.at_level(logging.WARNING, logger="chainclient.tracing"):
        assert router.complete("hi").provider == "beta"

    assert attempts(exporter) == []
    assert [record.getMessage() for record in caplog.records] == [
        "chainclient: OpenTelemetry failed starting an attempt's span; requests go on (logged once)"
    ]


@pytest.mark.parametrize("router_kind", ["sync"], indirect=True)
def test_an_interrupted_attempt_ends_its_span_and_gives_the_context_back(
    exporter: InMemorySpanExporter, router_kind: str
) -> None:
    def interrupted(step: Step, request: Any, timeout_s: float) -> str:
        raise KeyboardInterrupt

    router = make_router(fakes_for({"alpha": interrupted}))
    with trace.get_tracer("a service").start_as_current_span("handle request") as caller:
        with pytest.raises(KeyboardInterrupt):
            router.complete("hi")
        assert trace.get_current_span() is caller

    (span,) = attempts(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "KeyboardInterrupt"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=SDK, capture_output=True, text=True, timeout=60
    )


@pytest.mark.system
@pytest.mark.parametrize("router_kind", ["sync"], indirect=True)
def test_routing_works_where_opentelemetry_cannot_be_imported(router_kind: str) -> None:
    done = _run(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # import opentelemetry... raises ImportError
        from chainclient import AsyncRouter, Router
        from chainclient import tracing
        from chainclient.testing import FakeProviders, fake_chain, fake_registry

        fakes = FakeProviders().configure({"alpha": 503})
        router = Router(fake_chain(), transports=fakes.transports, registry=fake_registry())
        assert router.complete("hi").provider == "beta"
        router = AsyncRouter(fake_chain(), transports=fakes.async_transports, registry=fake_registry())
        assert asyncio.run(router.complete("hi")).provider == "beta"
        assert tracing._api is None
        print("routed")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "routed"
    assert "OpenTelemetry" not in done.stderr


@pytest.mark.system
@pytest.mark.parametrize("router_kind", ["sync"], indirect=True)
def test_opentelemetry_is_imported_at_the_first_attempt_not_with_the_package(router_kind: str) -> None:
    done = _run(
        """
        import sys
        from chainclient import Router
        from chainclient.testing import FakeProviders, fake_chain, fake_registry

        assert "opentelemetry" not in sys.modules, "imported with chainclient"
        fakes = FakeProviders()
        router = Router(fake_chain(), transports=fakes.transports, registry=fake_registry())
        assert "opentelemetry" not in sys.modules, "imported by a router's construction"
        router.complete("hi")
        assert "opentelemetry.trace" in sys.modules
        print("lazy")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lazy"


def test_a_streamed_attempt_is_a_span_with_its_chunks_and_first_chunk_time(
    exporter: InMemorySpanExporter, router_kind: str
) -> None:
    streams = FakeStreams(FakeClock())
    streams.script("alpha", fails_with=503)
    streams.script("beta", ["Hel", "lo"], first_after_s=0.25, tokens=(5, 2))
    tracer = trace.get_tracer("a service")
    with tracer.start_as_current_span("handle request") as caller:
        if router_kind == "async":
            router: Any = AsyncRouter(fake_chain(), transports={}, stream_transports=streams.async_transports,
                                      clock=streams.clock)  # fmt: skip

            async def read() -> list[str]:
                return [chunk async for chunk in router.stream("hi")]

            got = run_async(read())
        else:
            router = Router(fake_chain(), transports={}, stream_transports=streams.transports, clock=streams.clock)
            got = list(router.stream("hi"))
        assert trace.get_current_span() is caller, "a stream's span is never the caller's current one"
    assert got == ["Hel", "lo"]
    failed, served = attempts(exporter)
    assert (failed.attributes or {})["chainclient.stream.chunks"] == 0
    attributes = served.attributes or {}
    assert attributes["chainclient.stream.chunks"] == 2
    assert attributes["chainclient.stream.first_chunk_ms"] == 250.0
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (5, 2)
    assert served.parent is not None and served.parent.span_id == caller.get_span_context().span_id
