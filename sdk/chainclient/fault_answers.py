"""How each fault provider scenario answers one request on the wire, once the request is read.

Every function here sends one answer and returns whether the connection can take another
request (False: it was reset, or left hanging until ``closed`` is set, which ends every
hang and delay at once). The scenarios are explained in ``fault_provider``'s docstring.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping

from chainclient.fault_formats import ERRORS, VendorAnswer, error_body
from chainclient.fault_scenarios import STATUS_SCENARIOS, Plan, Vendor
from chainclient.fault_wire import Wire


def answer_status_error(wire: Wire, vendor: Vendor, plan: Plan) -> bool:
    """The error scenarios: their status and the vendor's error body."""
    status = STATUS_SCENARIOS[plan.scenario]
    headers: list[tuple[str, str]] = []
    if plan.scenario == "rate_limited":
        headers.append(("Retry-After", str(plan["retry_after"])))
    kind, message, code = ERRORS[plan.scenario][vendor]
    wire.send_json(status, error_body(vendor, kind, message, code), headers)
    return True


def answer_json(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    """A whole answer (``"stream"`` not true), as the scenario has it sent or broken."""
    scenario = plan.scenario
    document = json.dumps(answer.document()).encode()
    headers = answer.headers("application/json")
    if scenario == "reset_mid_stream":
        wire.head(200, [*headers, ("Content-Length", str(len(document)))])
        wire.send(document[: len(document) // 2])
        wire.reset()
        return False
    if scenario == "silence_after_first_chunk":
        wire.head(200, [*headers, ("Content-Length", str(len(document)))])
        closed.wait(plan["hang_s"])
        return False
    if scenario == "first_chunk_late" and closed.wait(plan["delay_s"]):
        return False
    if scenario == "no_terminal_event":
        document = document[: len(document) // 2]
    elif scenario == "malformed_chunk":
        document = b"<html><body>upstream hiccup</body></html>"
        headers = [("Content-Type", plan["content_type"]), *headers[1:]]
    wire.head(200, [*headers, ("Content-Length", str(len(document)))])
    wire.send(document)
    return True


def answer_stream(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    """A streamed answer (``"stream": true``): the headers, the opening events, then the
    pieces of content and the closing events as the scenario has them sent or broken."""
    wire.head(200, [*answer.headers("text/event-stream; charset=utf-8"), ("Transfer-Encoding", "chunked")])
    if plan.scenario == "malformed_chunk":
        return _ended(wire, [answer.malformed_event()])
    _send(wire, answer.opening())
    if plan.scenario == "content_filter":  # refused: no content at all
        return _ended(wire, answer.closing())
    broken = _BROKEN_STREAMS.get(plan.scenario)
    if broken is not None:
        return broken(wire, plan, answer, closed)
    return _stream_content(wire, plan, answer, closed)


def _stream_content(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    """Every piece of content, late or paced as the scenario says, then the closing events
    (left out for ``no_terminal_event``), and the end of the body ``end_delay_s`` later."""
    if plan.scenario == "first_chunk_late" and closed.wait(plan["delay_s"]):
        return False
    interval = plan["chunk_interval_s"]
    for index, event in enumerate(answer.pieces()):
        if interval and index and closed.wait(interval):
            return False
        wire.chunk(event)
    _send(wire, answer.closing() if plan.scenario != "no_terminal_event" else ())
    if plan["end_delay_s"] and closed.wait(plan["end_delay_s"]):
        return False
    return _ended(wire, ())


def _reset_mid_stream(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    _send(wire, answer.pieces()[: plan["chunks_before"]])
    wire.reset()
    return False


def _silence_after_first_chunk(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    wire.chunk(answer.pieces()[0])
    closed.wait(plan["hang_s"])
    return False


def _error_event(wire: Wire, plan: Plan, answer: VendorAnswer, closed: threading.Event) -> bool:
    _send(wire, answer.pieces()[: plan["chunks_before"]])
    return _ended(wire, [answer.error_event(plan["error_type"])])


# The scenarios whose stream breaks after its opening events, each in its own way.
_BROKEN_STREAMS: Mapping[str, Callable[[Wire, Plan, VendorAnswer, threading.Event], bool]] = {
    "reset_mid_stream": _reset_mid_stream,
    "silence_after_first_chunk": _silence_after_first_chunk,
    "error_event": _error_event,
}


def _send(wire: Wire, events: Iterable[bytes]) -> None:
    for event in events:
        wire.chunk(event)


def _ended(wire: Wire, events: Iterable[bytes]) -> bool:
    """Send ``events``, then a clean end of the chunked body: the connection stays usable."""
    _send(wire, events)
    wire.end_chunks()
    return True


__all__ = ["answer_json", "answer_status_error", "answer_stream"]
