"""OpenTelemetry tracing, opt-in through OpenTelemetry's own environment variables.

Off unless the environment asks for traces the way the OpenTelemetry specification says
(docs/configuration.md, "OpenTelemetry"): ``OTEL_TRACES_EXPORTER`` set to an exporter other than
``none``, or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) with no exporter named; ``OTEL_SDK_DISABLED=true`` turns
it off whatever else is set. Off, nothing of OpenTelemetry is imported and no request pays for
it.

On, each process sets up the SDK's tracer provider (resource, sampler, batch processor,
limits and the OTLP exporter's endpoint, headers and timeout all read by the SDK from the
standard ``OTEL_*`` variables; the service name defaults to ``controlplane``, and to
``controlplane-worker`` in Celery's worker processes) and instruments:

- Django: a server span per request it serves (opentelemetry-instrumentation-django);
- the read front, which answers token reads without Django: a server span for each read
  it answers itself, from the ASGI instrumentation around it, while the requests it hands
  to Django get only Django's span (so no request has two);
- psycopg: a span per statement, a child of the request's or the task's span;
- Celery: a span for queueing a task (in the web process) and one for running it (in the
  worker's processes, set up there after the fork: ``worker_process_init``), the second a
  child of the first across the broker.

``setup()`` runs from ``asgi.py`` and ``wsgi.py`` before Django builds its middleware (the
Django instrumentation adds its own); ``trace_front`` wraps the ASGI application;
``trace_worker_processes`` is called from ``celery.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from read_path.front import ASGIApp, ReadFront

WEB_SERVICE_NAME = "controlplane"
WORKER_SERVICE_NAME = "controlplane-worker"
# The exporter this image ships for OTLP: HTTP with protobuf (the specification's default
# protocol), not gRPC.
OTLP_PROTOCOL = "http/protobuf"

# The process's tracer provider once set up (opentelemetry.sdk.trace.TracerProvider).
_provider: Any = None


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (see the module's docstring)."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower()
    if disabled not in ("", "true", "false"):
        raise ImproperlyConfigured(
            f"OTEL_SDK_DISABLED={environ['OTEL_SDK_DISABLED']!r} is not a boolean: OpenTelemetry reads true or false"
        )
    if disabled == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def setup(*, service_name: str = WEB_SERVICE_NAME, web: bool = True) -> bool:
    """Trace this process if the environment asks for it; True if it does. Once per
    process; ``web``: also instrument Django's request handling."""
    global _provider
    if _provider is not None or not enabled():
        return _provider is not None
    exporters = span_exporters(os.environ)

    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME, then service.name in OTEL_RESOURCE_ATTRIBUTES, then ours.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider

    if web:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument()
    PsycopgInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    return True


def trace_front(front: ReadFront) -> ASGIApp:
    """The production ASGI application: ``front`` itself when tracing is off (its bound
    ``__call__``: the server calls it per request, and a bound method is called ~70 ns
    sooner than an instance, whose ``__call__`` is looked up each time: a few percent of a
    plain read); on, the reads it answers itself go through the ASGI instrumentation and the
    rest straight to it (and on to Django, whose instrumentation makes their span)."""
    if _provider is None:
        return front.__call__

    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.util.http import get_excluded_urls

    from read_path.front import PREFIX, answers_itself

    def span_details(scope: dict[str, Any]) -> tuple[str, dict[str, str]]:
        route = PREFIX if scope["path"] == PREFIX else PREFIX + "/{name}"
        return f"GET {route}", {"http.route": route}

    traced = OpenTelemetryMiddleware(
        front,
        excluded_urls=get_excluded_urls("ASGI"),
        default_span_details=span_details,
        # One span per read: no child spans for each ASGI message sent or received.
        exclude_spans=["receive", "send"],
    )

    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if answers_itself(scope):
            await traced(scope, receive, send)
        else:
            await front(scope, receive, send)

    return application


def trace_worker_processes() -> None:
    """Trace each Celery worker process (when the environment asks for it), set up after
    the fork that made it: the SDK's export thread does not survive a fork."""
    from celery import signals

    signals.worker_process_init.connect(_worker_process_started, weak=False)
    signals.worker_process_shutdown.connect(_worker_process_stopping, weak=False)


def _worker_process_started(**kwargs: object) -> None:
    setup(service_name=WORKER_SERVICE_NAME, web=False)


def _worker_process_stopping(**kwargs: object) -> None:
    """Export what the process still holds: a pool's child exits without running atexit."""
    if _provider is not None:
        _provider.shutdown()


def span_exporters(environ: Mapping[str, str]) -> list[Any]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (default: otlp), built (each reads
    its own settings, the OTLP endpoint and headers among them, from the process's
    environment); raises ImproperlyConfigured naming an exporter or OTLP protocol this image
    does not have."""
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
    exporters = []
    for name in names:
        if name == "none":
            continue
        if name in ("otlp", "otlp_proto_http"):
            protocols = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            variable = next((key for key in protocols if environ.get(key)), None)
            if variable is not None and environ[variable].strip() != OTLP_PROTOCOL:
                raise ImproperlyConfigured(
                    f"{variable}={environ[variable]!r}: this image exports OTLP over HTTP only; set it to "
                    f"{OTLP_PROTOCOL} (or unset it) and point the endpoint at the collector's HTTP port (4318)"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
            continue
        found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
        if not found:
            installed = {point.name for point in entry_points(group="opentelemetry_traces_exporter")}
            available = sorted({"none", "otlp"} | installed)
            raise ImproperlyConfigured(
                f"OTEL_TRACES_EXPORTER names {name!r}, which is not installed: use one of {', '.join(available)}"
            )
        exporters.append(found[0].load()())
    return exporters
