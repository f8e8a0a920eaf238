"""OpenTelemetry, opt-in: the production processes export traces when OTEL_* asks for them.

The web process (granian: the read front and Django) and a Celery worker run against their
own PostgreSQL and Redis (tests/servers.py), exporting over OTLP/HTTP to a collector this
module runs in-process, which decodes what it receives with opentelemetry-proto. With
tracing switched off the same requests export nothing, and with no OTEL_* set the processes
do not even import OpenTelemetry.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage

from controlplane import telemetry
from tests.servers import Stack, get, require_tools, running_stack, select, wait_for

SERVER = SpanMessage.SPAN_KIND_SERVER
CONSUMER = SpanMessage.SPAN_KIND_CONSUMER
EXPORT_BOUND_S = 20.0  # the batch processor exports every 100 ms here (OTEL_BSP_SCHEDULE_DELAY)


@dataclass(frozen=True)
class Collected:
    """One span as the collector received it."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]

    @property
    def statement(self) -> str:
        return str(self.attributes.get("db.statement") or self.attributes.get("db.query.text") or "")


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on a free loopback port: ``POST /v1/traces``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receiver)
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"
        self.spans: list[Collected] = []
        self.lock = threading.Lock()

    def received(self) -> list[Collected]:
        with self.lock:
            return list(self.spans)

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()

    def trace(self, trace_id: str) -> list[Collected]:
        return [span for span in self.received() if span.trace_id == trace_id]


class _Receiver(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        spans = list(_decode(ExportTraceServiceRequest.FromString(body)))
        with self.server.lock:
            self.server.spans.extend(spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _decode(request: ExportTraceServiceRequest) -> Iterator[Collected]:
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield Collected(
                    service=service,
                    name=span.name,
                    kind=span.kind,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes=_attributes(span.attributes),
                )


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _needs_the_tools() -> None:
    require_tools("telemetry tests")


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def tracing_env(collector: Collector) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture(scope="module")
def stack(collector: Collector) -> Iterator[Stack]:
    with running_stack("telemetry", env=tracing_env(collector)) as stack:
        yield stack


def server_spans(spans: list[Collected]) -> list[Collected]:
    return [span for span in spans if span.kind == SERVER]


# --- the web process ------------------------------------------------------------------------


def test_a_select_is_one_trace_whose_statements_are_children_of_its_server_span(
    stack: Stack, collector: Collector
) -> None:
    status, _, body = select(stack, "chat", "pin_secondary")
    assert status == 200, body[:500]

    def select_trace() -> tuple[Collected, list[Collected]] | None:
        for span in server_spans(collector.received()):
            if span.attributes.get("http.method") == "POST" and "select" in str(span.attributes.get("http.route")):
                statements = [child for child in collector.trace(span.trace_id) if child.statement]
                # A change's writes go as one query, its statements joined by ";" (presets/statements.py).
                written = {
                    part.split()[0] for child in statements for part in child.statement.split(";") if part.strip()
                }
                if {"UPDATE", "INSERT"} <= written:
                    return span, statements
        return None

    assert wait_for(lambda: select_trace() is not None, EXPORT_BOUND_S), [
        (span.name, span.attributes.get("http.route")) for span in collector.received()
    ]
    found = select_trace()
    assert found is not None
    server, statements = found
    assert server.service == "controlplane"
    assert server.parent_id == ""
    assert server_spans(collector.trace(server.trace_id)) == [server]  # Django's span, and only it
    for statement in statements:
        assert statement.parent_id == server.span_id, statement
        assert statement.attributes["db.system"] == "postgresql"


def test_a_read_the_front_answers_itself_is_a_server_span(stack: Stack, collector: Collector) -> None:
    status, _, _ = get(stack, "/api/v1/chains/chat", token=stack.read_token)
    assert status == 200

    def front_reads() -> list[Collected]:
        return [
            span
            for span in server_spans(collector.received())
            if span.name == "GET /api/v1/chains/{name}" and span.attributes.get("http.target") == "/api/v1/chains/chat"
        ]

    assert wait_for(lambda: bool(front_reads()), EXPORT_BOUND_S), [span.name for span in collector.received()]
    read = front_reads()[0]
    assert read.attributes["http.route"] == "/api/v1/chains/{name}"
    assert read.attributes["http.status_code"] == 200
    assert server_spans(collector.trace(read.trace_id)) == [read]  # Django made none for it


QUEUE_A_TASK = """
import django
django.setup()
from opentelemetry import trace
from controlplane import telemetry
from worker.pins import expire_pins
assert telemetry.setup(web=False)
with trace.get_tracer("a test").start_as_current_span("queueing") as span:
    expire_pins.delay()
print(format(span.get_span_context().trace_id, "032x"))
"""


def test_a_task_runs_in_the_trace_that_queued_it_with_its_statements(stack: Stack, collector: Collector) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--concurrency=1", "-l", "warning"],
        cwd=settings.BASE_DIR,
        env=stack.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        queued = subprocess.run(
            [sys.executable, "-c", QUEUE_A_TASK],
            cwd=settings.BASE_DIR,
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert queued.returncode == 0, queued.stderr
        trace_id = queued.stdout.split()[-1]

        def run_with_statements() -> Collected | None:
            spans = collector.trace(trace_id)
            for run in spans:
                if run.kind == CONSUMER and any(child.statement and child.parent_id == run.span_id for child in spans):
                    return run
            return None

        assert wait_for(lambda: run_with_statements() is not None, 60), collector.trace(trace_id)
        run = run_with_statements()
        assert run is not None
        assert run.name == "run/worker.pins.expire_pins"
        assert run.service == "controlplane-worker"
        (queueing,) = [span for span in collector.trace(trace_id) if span.span_id == run.parent_id]
        assert queueing.name == "apply_async/worker.pins.expire_pins"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)


# --- switched off -----------------------------------------------------------------------------


def test_switched_off_the_same_requests_export_nothing(stack: Stack, collector: Collector) -> None:
    """The endpoint still points at the collector; OTEL_SDK_DISABLED=true wins over it."""
    stack.kill_web()
    collector.clear()
    stack.env["OTEL_SDK_DISABLED"] = "true"
    try:
        stack.start_web()
        assert select(stack, "chat", "drop_vendor_b")[0] == 200
        assert get(stack, "/api/v1/chains/chat", token=stack.read_token)[0] == 200

        assert not wait_for(lambda: bool(collector.received()), 3.0), collector.received()
    finally:
        stack.kill_web()
        del stack.env["OTEL_SDK_DISABLED"]


@pytest.mark.parametrize(
    ("otel", "imported"),
    [({}, False), ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, True)],
    ids=["no-otel-variables", "an-otlp-endpoint"],
)
def test_without_otel_variables_the_processes_import_no_opentelemetry(otel: dict[str, str], imported: bool) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")} | otel
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, controlplane.asgi, controlplane.wsgi, controlplane.celery; "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('opentelemetry.')}))",
        ],
        cwd=settings.BASE_DIR,
        env=env | {"DJANGO_SETTINGS_MODULE": "controlplane.settings", "VAR_DIR": str(settings.VAR_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    modules = done.stdout.strip().splitlines()[-1]
    if imported:
        assert "instrumentation" in modules and "sdk" in modules, modules
    else:
        assert modules == "[]"


# --- which environment switches it on --------------------------------------------------------

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "controlplane-eu", "OTEL_BSP_SCHEDULE_DELAY": "100"}, False),
        (ENDPOINT, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", **ENDPOINT}, False),
        ({"OTEL_SDK_DISABLED": "true", **ENDPOINT}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "false", **ENDPOINT}, True),
    ],
    ids=[
        "nothing-set",
        "other-otel-variables-only",
        "an-otlp-endpoint",
        "a-traces-endpoint",
        "an-exporter-named",
        "exporter-none-wins-over-an-endpoint",
        "sdk-disabled-wins",
        "sdk-disabled-any-case",
        "sdk-disabled-false",
    ],
)
def test_tracing_is_on_only_when_otel_variables_ask_for_it(environ: dict[str, str], on: bool) -> None:
    assert telemetry.enabled(environ) is on


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"OTEL_SDK_DISABLED": "1", **ENDPOINT},
            "OTEL_SDK_DISABLED='1' is not a boolean: OpenTelemetry reads true or false",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "OTEL_TRACES_EXPORTER names 'zipkin', which is not installed: use one of console, none, otlp, "
            "otlp_proto_http",
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", **ENDPOINT},
            "OTEL_EXPORTER_OTLP_PROTOCOL='grpc': this image exports OTLP over HTTP only; set it to http/protobuf "
            "(or unset it) and point the endpoint at the collector's HTTP port (4318)",
        ),
    ],
    ids=["sdk-disabled-not-a-boolean", "unknown-exporter", "grpc"],
)
def test_a_bad_otel_variable_is_a_one_line_error_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as error:
        telemetry.enabled(environ) and telemetry.span_exporters(environ)
    assert str(error.value) == message


def test_the_exporters_named_are_built() -> None:
    exporters = telemetry.span_exporters({"OTEL_TRACES_EXPORTER": "otlp, console", **ENDPOINT})
    assert [type(exporter).__name__ for exporter in exporters] == ["OTLPSpanExporter", "ConsoleSpanExporter"]
