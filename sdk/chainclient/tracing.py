"""OpenTelemetry spans for the routers' attempts, when the service uses OpenTelemetry.

chainclient depends on nothing. When ``opentelemetry.trace`` (the API package) can be
imported, every attempt a router makes is a span named ``chainclient.attempt``: a child of
the span current in the caller (the service's request span), current itself while the
transport runs (so an instrumented HTTP client's span for the vendor call nests under it),
and ended when the router settles the attempt, with the attempt's outcome. Steps that
admission refused are not attempts and make no span.

The API is imported once, the first time a router starts an attempt. Without it, or while
no tracer provider is set (OpenTelemetry's no-op default: a few microseconds, against an LLM
call's hundreds of milliseconds), nothing is attached to the caller's context. Tracing never costs a
request its answer: an error here is logged once and the request goes on untraced.

The attributes follow OpenTelemetry's semantic conventions where one fits (``gen_ai.*`` for
the provider and models, ``http.response.status_code``, ``error.type``) and are
``chainclient.*`` otherwise.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, NamedTuple

from chainclient._version import __version__
from chainclient.health import outcome_class
from chainclient.receipts import Attempt
from chainclient.types import ChainDocument, Step

logger = logging.getLogger("chainclient.tracing")

SPAN_NAME = "chainclient.attempt"
INSTRUMENTATION_NAME = "chainclient"

_UNRESOLVED: Any = object()
# The API's pieces once imported: (trace module, context module, tracer), or None when
# OpenTelemetry cannot be imported; _UNRESOLVED until the first attempt asks.
_api: Any = _UNRESOLVED
_warned = False


class AttemptSpan(NamedTuple):
    """An attempt's span, and the token that restores the caller's context when it ends."""

    span: Any
    token: object


def attempt_started(
    document: ChainDocument, index: int, step: Step, task_id: str, number: int, *, current: bool = True
) -> AttemptSpan | None:
    """Start the span of attempt ``number`` of request ``task_id`` (on step ``index`` of
    ``document``) and make it current (unless ``current=False``: a stream's attempt, whose
    caller runs between chunks); None when there is nothing to trace."""
    api = _api if _api is not _UNRESOLVED else _resolve()
    if api is None:
        return None
    trace, context, tracer = api
    try:
        span = tracer.start_span(
            SPAN_NAME,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "chainclient.chain": document.name,
                "chainclient.chain.version": document.version,
                "chainclient.chain.epoch": document.epoch,
                "chainclient.preset": document.preset,
                "chainclient.step.index": index,
                "chainclient.provider": step.provider,
                "chainclient.model": step.model,
                "chainclient.task_id": task_id,
                "chainclient.attempt_id": f"{task_id}-{number}",
                "gen_ai.provider.name": step.provider,
                "gen_ai.system": step.provider,  # the name before semantic conventions 1.37
                "gen_ai.request.model": step.model,
            },
        )
        if not span.is_recording():
            return None  # the no-op default, or not sampled: nothing to end or to attach
        return AttemptSpan(span, context.attach(trace.set_span_in_context(span)) if current else None)
    except Exception:  # noqa: BLE001 - tracing must never fail a request
        _failed("starting an attempt's span")
        return None


def attempt_ended(handle: AttemptSpan, attempt: Attempt, raised: Exception | None, *, model_reported: bool) -> None:
    """End the attempt's span with how it went and give the caller its context back."""
    span = handle.span
    try:
        attributes: dict[str, Any] = {
            "chainclient.outcome": attempt.outcome,
            "chainclient.outcome_class": outcome_class(attempt),
            "chainclient.dispatch": attempt.dispatch,
            "chainclient.destination": attempt.destination,
            "chainclient.contract": attempt.contract,
        }
        if attempt.status is not None:
            attributes["http.response.status_code"] = attempt.status
        if model_reported:
            attributes["gen_ai.response.model"] = attempt.model_id
        if attempt.chunks is not None:
            attributes["chainclient.stream.chunks"] = attempt.chunks
            if attempt.first_chunk_s is not None:
                attributes["chainclient.stream.first_chunk_ms"] = round(attempt.first_chunk_s * 1000, 3)
        if attempt.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = attempt.input_tokens
        if attempt.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = attempt.output_tokens
        if attempt.drill is not None:  # no call was made: a failover drill's fault
            attributes["chainclient.drill"] = attempt.drill
        if attempt.outcome != "ok":
            attributes["error.type"] = attributes["chainclient.outcome_class"]
            if raised is not None:
                span.record_exception(raised)
            trace = _api[0]
            span.set_status(trace.Status(trace.StatusCode.ERROR, attempt.reason or attempt.error or attempt.outcome))
        span.set_attributes(attributes)
    except Exception:  # noqa: BLE001 - tracing must never fail a request
        _failed("recording an attempt's outcome on its span")
    finally:
        _close(handle)


def attempt_interrupted(handle: AttemptSpan, error: BaseException) -> None:
    """End the span of an attempt whose call was interrupted (a cancelled task, Ctrl-C)."""
    try:
        trace = _api[0]
        handle.span.set_attribute("error.type", type(error).__name__)
        handle.span.set_status(trace.Status(trace.StatusCode.ERROR, f"interrupted: {type(error).__name__}"))
    except Exception:  # noqa: BLE001 - tracing must never fail a request
        _failed("recording an interrupted attempt on its span")
    finally:
        _close(handle)


def _close(handle: AttemptSpan) -> None:
    try:
        handle.span.end()
        if handle.token is not None:
            _api[1].detach(handle.token)
    except Exception:  # noqa: BLE001 - tracing must never fail a request
        _failed("ending an attempt's span")


def _resolve() -> Any:
    """Import the API once: (trace, context, tracer), or None without OpenTelemetry. The
    tracer is the API's: a proxy until the service sets its tracer provider, then that
    provider's."""
    global _api
    try:
        trace = importlib.import_module("opentelemetry.trace")
        context = importlib.import_module("opentelemetry.context")
        _api = (trace, context, trace.get_tracer(INSTRUMENTATION_NAME, __version__))
    except Exception:  # noqa: BLE001 - ImportError, or an install too broken to use
        _api = None
    return _api


def _failed(doing: str) -> None:
    """Log the first tracing failure with its traceback; later ones stay quiet."""
    global _warned
    if not _warned:
        _warned = True
        logger.warning("chainclient: OpenTelemetry failed %s; requests go on (logged once)", doing, exc_info=True)


__all__ = [
    "INSTRUMENTATION_NAME",
    "SPAN_NAME",
    "AttemptSpan",
    "attempt_ended",
    "attempt_interrupted",
    "attempt_started",
]
