"""A local LLM provider that fails on purpose, to test transports and routers against the wire.

``FaultProvider`` is a small HTTP/1.1 server on 127.0.0.1, written from the vendors' public
API documentation, that speaks two formats:

- OpenAI chat completions, ``POST /v1/chat/completions``: a ``chat.completion`` object, or
  with ``"stream": true`` server-sent events ``data: {chat.completion.chunk}`` (a first
  chunk with the role, one chunk per piece of content, a last chunk with ``finish_reason``,
  a usage chunk with empty ``choices`` when ``stream_options.include_usage`` is true, then
  ``data: [DONE]``);
- Anthropic messages, ``POST /v1/messages``: a ``message`` object, or with ``"stream":
  true`` ``event:``/``data:`` pairs ``message_start``, ``content_block_start``, ``ping``,
  ``content_block_delta`` (``text_delta``) per piece of content, ``content_block_stop``,
  ``message_delta`` (``stop_reason``, ``usage.output_tokens``) and ``message_stop``.

Streams use ``Transfer-Encoding: chunked``, one chunk per event, each sent as it is made.
Answers echo the requested model, carry usage (input tokens: the words in the request's
messages, at least 1; output tokens: the pieces of content) and the text ``"chunk-0
chunk-1 ..."`` (streamed as ``"chunk-0"``, ``" chunk-1"``, ...)::

    with FaultProvider("rate_limited", retry_after=7) as provider:
        client = OpenAI(api_key="test", base_url=provider.openai_base_url)
        ...
        provider.set("ok", chunks=2000)            # the next request streams 2,000 chunks
        provider.sequence(["server_error", "ok"])  # one 500, then ok for good
        provider.requests[-1].body["model"]

Scenarios (``SCENARIOS``) and their parameters (defaults in ``DEFAULT_PARAMS``):

- ``ok``: a complete answer. ``chunks`` (5): the pieces of content; ``chunk_interval_s``
  (0): the pause before each piece after the first (no pause at all when 0, so thousands of
  chunks stream at wire speed).
- ``rate_limited``: 429 with ``Retry-After: <retry_after>`` (1; a number of seconds, or a
  string sent as is, e.g. an HTTP date) and the vendor's rate-limit error body.
- ``server_error``: 500; ``unavailable``: 503; ``overloaded``: 529 (Anthropic's
  ``overloaded_error`` body; an OpenAI-shaped body of the same type on the OpenAI path);
  ``unauthorized``: 401; each with the vendor's error body.
- ``context_length``: 400, OpenAI's ``context_length_exceeded`` code or Anthropic's
  ``invalid_request_error`` "prompt is too long".
- ``content_policy_400``: 400 refusing the content: OpenAI's ``content_policy_violation``
  code, Anthropic's ``invalid_request_error`` "Output blocked by content filtering policy".
- ``content_filter``: 200, refused: OpenAI ``finish_reason: "content_filter"`` with no
  content (JSON and stream); Anthropic ``stop_reason: "refusal"`` with no content.
- ``connection_refused``: while set, the port refuses TCP connections (the listener is
  closed, as are idle kept-alive connections; setting another scenario binds the same port
  again). It cannot be part of a ``sequence``: a refused connection carries no request.
- ``reset_before_headers``: reads the request, then resets the connection (RST, with
  ``SO_LINGER`` 0) without a response.
- ``reset_mid_stream``: stream: the headers, the opening events and ``chunks_before`` (2)
  pieces of content, then RST. JSON: the headers with a ``Content-Length`` and half the
  body, then RST.
- ``no_headers``: reads the request, then sends nothing for ``hang_s`` (30) and closes
  the connection.
- ``first_chunk_late``: stream: the headers and opening events at once, the first piece of
  content after ``delay_s`` (5), then the rest. JSON: the whole answer after ``delay_s``.
- ``silence_after_first_chunk``: stream: the headers, the opening events and one piece of
  content, then nothing for ``hang_s`` and a close mid-body. JSON: the headers (with a
  ``Content-Length``), then no body for ``hang_s`` and a close.
- ``no_terminal_event``: stream: the opening events and every piece of content, then a clean
  end of the chunked body without the terminal events (OpenAI: no ``finish_reason`` chunk,
  no ``[DONE]``; Anthropic: no ``message_delta``, no ``message_stop``). JSON: a correctly
  framed body holding only the first half of the JSON document.
- ``malformed_chunk``: stream: the first event's data is not JSON. JSON: a 200 whose body
  is not JSON, sent as ``content_type`` ("application/json"; "text/html" stages a
  proxy's error page).
- ``wrong_model``: an ``ok`` answer naming ``model`` ("substituted-model-2026") instead of
  the requested model.
- ``error_event``: stream: the opening events and ``chunks_before`` pieces of content, then
  the vendor's in-stream error of type ``error_type`` ("overloaded_error"): Anthropic's
  ``event: error``, OpenAI's ``data: {"error": {...}}``; then a clean end of the body.
  JSON: answered as ``ok`` (neither API has an error inside a whole answer).

A request with ``Connection: close`` gets its connection closed after the answer; any other
connection is kept alive for the next request, as the vendors' servers do.

Any hang or delay ends at once when the provider is closed (``close()``, or leaving the
``with`` block), so a test never waits for it. Standard library only.
"""

from __future__ import annotations

import http
import json
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeAlias

SCENARIOS: tuple[str, ...] = (
    "ok",
    "rate_limited",
    "server_error",
    "unavailable",
    "overloaded",
    "unauthorized",
    "context_length",
    "content_policy_400",
    "content_filter",
    "connection_refused",
    "reset_before_headers",
    "reset_mid_stream",
    "no_headers",
    "first_chunk_late",
    "silence_after_first_chunk",
    "no_terminal_event",
    "malformed_chunk",
    "wrong_model",
    "error_event",
)

DEFAULT_PARAMS: Mapping[str, Any] = {
    "chunks": 5,
    "chunk_interval_s": 0.0,
    "retry_after": 1,
    "chunks_before": 2,
    "hang_s": 30.0,
    "delay_s": 5.0,
    "model": "substituted-model-2026",
    "error_type": "overloaded_error",
    "content_type": "application/json",
}

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

Vendor: TypeAlias = Literal["openai", "anthropic"]
PlanSpec: TypeAlias = "str | tuple[str, Mapping[str, Any]]"
"""What ``sequence()`` takes per request: a scenario, or a ``(scenario, params)`` pair."""

# The statuses the error scenarios answer with.
_STATUS_SCENARIOS: Mapping[str, int] = {
    "rate_limited": 429,
    "server_error": 500,
    "unavailable": 503,
    "overloaded": 529,
    "unauthorized": 401,
    "context_length": 400,
    "content_policy_400": 400,
}
_REASONS: Mapping[int, str] = {529: "Overloaded"}
_MAX_HEAD_BYTES = 64 * 1024
_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST instead of FIN


@dataclass(frozen=True)
class ReceivedRequest:
    """One request the provider received: its header names are lower-cased; ``body`` is the
    parsed JSON (None when the body was not JSON)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


@dataclass(frozen=True)
class _Plan:
    scenario: str
    params: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.params[name]


class FaultProvider:
    """A local OpenAI- and Anthropic-compatible server that answers with ``scenario``.

    ``url`` is ``http://127.0.0.1:PORT``; ``openai_base_url`` (``url + "/v1"``) and
    ``anthropic_base_url`` are what the vendors' clients take as ``base_url``. A context
    manager; ``close()`` ends every connection and every hang at once.
    """

    def __init__(self, scenario: str = "ok", **params: Any) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._plans: list[_Plan] = [_plan(scenario, params)]
        self._requests: list[ReceivedRequest] = []
        self._sockets: set[socket.socket] = set()
        self._idle: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._connections = 0
        self._answered = 0
        self._refusing = scenario == "connection_refused"
        self._listener: _Listener | None = None
        self._port = 0
        if scenario == "connection_refused":
            # Reserve a port, then refuse on it, as a host whose server is down does.
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            self._port = probe.getsockname()[1]
            probe.close()
        else:
            self._listen()
        self.url = f"http://127.0.0.1:{self._port}"
        self.openai_base_url = self.url + "/v1"
        self.anthropic_base_url = self.url

    # --- what tests call -----------------------------------------------------------------

    def set(self, scenario: str, **params: Any) -> None:
        """Answer every request from now on with ``scenario`` (forgets any sequence)."""
        self._replace([_plan(scenario, params)])

    def sequence(self, plans: Sequence[PlanSpec]) -> None:
        """Answer the next requests with ``plans`` in order (each a scenario, or a
        ``(scenario, params)`` pair); the last one repeats."""
        if not plans:
            raise ValueError("sequence() needs at least one scenario")
        built = [_plan(item, {}) if isinstance(item, str) else _plan(item[0], item[1]) for item in plans]
        if any(plan.scenario == "connection_refused" for plan in built):
            raise ValueError("connection_refused cannot be part of a sequence: a refused connection carries no request")
        self._replace(built)

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def connections(self) -> int:
        """How many TCP connections were accepted (a client that reuses its connections
        opens fewer than it sends requests)."""
        with self._lock:
            return self._connections

    def clear(self) -> None:
        """Forget the requests received so far (the scenario stays)."""
        with self._lock:
            self._requests.clear()

    def close(self) -> None:
        """Stop listening, end every hang and drop every connection, at once."""
        self._closed.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        with self._lock:
            sockets = list(self._sockets)
            threads = list(self._threads)
        for sock in sockets:
            _shut(sock)
        for thread in threads:
            thread.join(timeout=1.0)

    def __enter__(self) -> FaultProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- listening -----------------------------------------------------------------------

    def _replace(self, plans: list[_Plan]) -> None:
        if self._closed.is_set():
            raise RuntimeError("the fault provider is closed")
        refuse = plans[0].scenario == "connection_refused"
        with self._lock:
            self._plans = plans
            self._refusing = refuse
            idle = list(self._idle) if refuse else []
        if refuse:
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.stop()
            # A pooled connection would bypass the refusal: drop the idle ones, so the
            # client's pool sees them closed and connects anew.
            for sock in idle:
                _shut(sock)
        elif self._listener is None:
            self._listen()

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Re-binding the port after connection_refused must not wait for TIME_WAIT to pass.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        sock.listen(128)
        self._port = sock.getsockname()[1]
        self._listener = _Listener(sock, self._accepted)

    def _accepted(self, sock: socket.socket) -> None:
        # Every event goes out in its own send: without NODELAY, Nagle's algorithm would
        # hold small events back waiting for the client's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        thread = threading.Thread(target=self._serve_connection, args=(sock,), name="fault-provider", daemon=True)
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return
            self._connections += 1
            self._sockets.add(sock)
            self._threads.add(thread)
        thread.start()

    def _serve_connection(self, sock: socket.socket) -> None:
        wire = _Wire(sock)
        try:
            while not self._closed.is_set():
                with self._lock:
                    # Under the lock set() takes: either it sees this connection idle and
                    # drops it, or this sees the refusal and ends the connection itself.
                    if self._refusing:
                        return
                    self._idle.add(sock)
                raw = wire.read_request()
                with self._lock:
                    self._idle.discard(sock)
                if raw is None:
                    return
                method, path, headers, body = raw
                if not self._answer(wire, method, path, headers, body):
                    return
                if headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            pass  # the client went away, or close() shut the socket: both end the connection
        finally:
            with self._lock:
                self._idle.discard(sock)
                self._sockets.discard(sock)
                self._threads.discard(threading.current_thread())
            wire.close()

    # --- answering -----------------------------------------------------------------------

    def _answer(self, wire: _Wire, method: str, path: str, headers: dict[str, str], raw_body: bytes) -> bool:
        """Answer one request; return whether the connection can take another."""
        try:
            body: Any = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = None
        plan, number = self._next_plan(ReceivedRequest(method, path, headers, body))
        vendor: Vendor | None = "openai" if path == OPENAI_PATH else "anthropic" if path == ANTHROPIC_PATH else None
        if vendor is None or method != "POST":
            wire.send_json(404, {"error": {"type": "not_found_error", "message": f"no route for {method} {path}"}})
            return True
        if not isinstance(body, dict):
            wire.send_json(400, _error_body(vendor, "invalid_request_error", "the body is not a JSON object", None))
            return True
        if plan.scenario in _STATUS_SCENARIOS:
            return _send_status_error(wire, vendor, plan)
        if plan.scenario == "reset_before_headers":
            wire.reset()
            return False
        if plan.scenario == "no_headers":
            self._closed.wait(plan["hang_s"])
            return False
        answer = _Answer(vendor, plan, body, number)
        if body.get("stream") is True:
            return self._stream(wire, plan, answer)
        return self._json(wire, plan, answer)

    def _json(self, wire: _Wire, plan: _Plan, answer: _Answer) -> bool:
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
            self._closed.wait(plan["hang_s"])
            return False
        if scenario == "first_chunk_late" and self._closed.wait(plan["delay_s"]):
            return False
        if scenario == "no_terminal_event":
            document = document[: len(document) // 2]
        elif scenario == "malformed_chunk":
            document = b"<html><body>upstream hiccup</body></html>"
            headers = [("Content-Type", plan["content_type"]), *headers[1:]]
        wire.head(200, [*headers, ("Content-Length", str(len(document)))])
        wire.send(document)
        return True

    def _stream(self, wire: _Wire, plan: _Plan, answer: _Answer) -> bool:
        scenario = plan.scenario
        wire.head(200, [*answer.headers("text/event-stream; charset=utf-8"), ("Transfer-Encoding", "chunked")])
        if scenario == "malformed_chunk":
            wire.chunk(answer.malformed_event())
            wire.end_chunks()
            return True
        for event in answer.opening():
            wire.chunk(event)
        if scenario == "content_filter":
            for event in answer.closing():
                wire.chunk(event)
            wire.end_chunks()
            return True
        pieces = answer.pieces()
        if scenario == "reset_mid_stream":
            for event in pieces[: plan["chunks_before"]]:
                wire.chunk(event)
            wire.reset()
            return False
        if scenario == "silence_after_first_chunk":
            wire.chunk(pieces[0])
            self._closed.wait(plan["hang_s"])
            return False
        if scenario == "error_event":
            for event in pieces[: plan["chunks_before"]]:
                wire.chunk(event)
            wire.chunk(answer.error_event(plan["error_type"]))
            wire.end_chunks()
            return True
        if scenario == "first_chunk_late" and self._closed.wait(plan["delay_s"]):
            return False
        interval = plan["chunk_interval_s"]
        for index, event in enumerate(pieces):
            if interval and index and self._closed.wait(interval):
                return False
            wire.chunk(event)
        if scenario != "no_terminal_event":
            for event in answer.closing():
                wire.chunk(event)
        wire.end_chunks()
        return True

    def _next_plan(self, request: ReceivedRequest) -> tuple[_Plan, int]:
        """The plan for ``request`` (recorded), and its number, which names its answer."""
        with self._lock:
            self._requests.append(request)
            self._answered += 1
            plan = self._plans.pop(0) if len(self._plans) > 1 else self._plans[0]
            return plan, self._answered


# --- the vendors' formats ---------------------------------------------------------------


class _Answer:
    """One answer in a vendor's format: the JSON document, or the stream's events."""

    def __init__(self, vendor: Vendor, plan: _Plan, body: Mapping[str, Any], number: int) -> None:
        self.vendor = vendor
        self.plan = plan
        self.body = body
        requested = body.get("model")
        self.model = plan["model"] if plan.scenario == "wrong_model" else str(requested or "")
        self.refused = plan.scenario == "content_filter"
        self.count = 0 if self.refused else max(0, int(plan["chunks"]))
        self.input_tokens = _prompt_tokens(body)
        self.number = number
        self.id = f"chatcmpl-fault-{number}" if vendor == "openai" else f"msg_fault_{number}"
        self.created = int(time.time())
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True

    def headers(self, content_type: str) -> list[tuple[str, str]]:
        request_id = "x-request-id" if self.vendor == "openai" else "request-id"
        return [("Content-Type", content_type), (request_id, f"req_fault_{self.number}")]

    def texts(self) -> list[str]:
        return [f"chunk-{index}" if index == 0 else f" chunk-{index}" for index in range(self.count)]

    def document(self) -> dict[str, Any]:
        text = "".join(self.texts())
        if self.vendor == "openai":
            return {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None if self.refused else text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "content_filter" if self.refused else "stop",
                    }
                ],
                "usage": self._openai_usage(),
            }
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [] if self.refused else [{"type": "text", "text": text}],
            "stop_reason": "refusal" if self.refused else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.count},
        }

    def opening(self) -> list[bytes]:
        if self.vendor == "openai":
            return [self._chunk({"role": "assistant", "content": ""}, None)]
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
        }
        events = [_sse("message_start", {"type": "message_start", "message": message})]
        if not self.refused:
            block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            events.append(_sse("content_block_start", block))
        events.append(_sse("ping", {"type": "ping"}))
        return events

    def pieces(self) -> list[bytes]:
        if self.vendor == "openai":
            return [self._chunk({"content": text}, None) for text in self.texts()]
        return [
            _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            )
            for text in self.texts()
        ]

    def closing(self) -> list[bytes]:
        if self.vendor == "openai":
            events = [self._chunk({}, "content_filter" if self.refused else "stop")]
            if self.include_usage:
                usage_chunk = self._chunk_document([], usage=self._openai_usage())
                events.append(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
            events.append(b"data: [DONE]\n\n")
            return events
        events = [] if self.refused else [_sse("content_block_stop", {"type": "content_block_stop", "index": 0})]
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": "refusal" if self.refused else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": self.count},
        }
        events.append(_sse("message_delta", delta))
        events.append(_sse("message_stop", {"type": "message_stop"}))
        return events

    def error_event(self, kind: str) -> bytes:
        message = f"fault provider: {kind} mid-stream"
        if self.vendor == "openai":
            return b"data: " + json.dumps(_error_body("openai", kind, message, None)).encode() + b"\n\n"
        return _sse("error", _error_body("anthropic", kind, message, None))

    def malformed_event(self) -> bytes:
        if self.vendor == "openai":
            return b'data: {"id": "chatcmpl-fault", "choices": [{"delta": \n\n'
        return b'event: message_start\ndata: {"type": "message_start", "message": \n\n'

    def _chunk(self, delta: Mapping[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}
        document = self._chunk_document([choice], usage=None)
        return b"data: " + json.dumps(document).encode() + b"\n\n"

    def _chunk_document(self, choices: list[dict[str, Any]], *, usage: Mapping[str, int] | None) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            # With include_usage every chunk carries the field; only the last has a value.
            document["usage"] = dict(usage) if usage is not None else None
        return document

    def _openai_usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.count,
            "total_tokens": self.input_tokens + self.count,
        }


def _send_status_error(wire: _Wire, vendor: Vendor, plan: _Plan) -> bool:
    status = _STATUS_SCENARIOS[plan.scenario]
    headers: list[tuple[str, str]] = []
    if plan.scenario == "rate_limited":
        headers.append(("Retry-After", str(plan["retry_after"])))
    kind, message, code = _ERRORS[plan.scenario][vendor]
    wire.send_json(status, _error_body(vendor, kind, message, code), headers)
    return True


# scenario -> vendor -> (error type, message, OpenAI error code)
_ERRORS: Mapping[str, Mapping[Vendor, tuple[str, str, str | None]]] = {
    "rate_limited": {
        "openai": ("requests", "Rate limit reached for requests. Please try again in 1s.", "rate_limit_exceeded"),
        "anthropic": ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", None),
    },
    "server_error": {
        "openai": ("server_error", "The server had an error while processing your request.", None),
        "anthropic": ("api_error", "Internal server error", None),
    },
    "unavailable": {
        "openai": ("server_error", "The service is temporarily unavailable.", "service_unavailable"),
        "anthropic": ("api_error", "Service temporarily unavailable", None),
    },
    "overloaded": {
        "openai": ("overloaded_error", "Overloaded", None),
        "anthropic": ("overloaded_error", "Overloaded", None),
    },
    "unauthorized": {
        "openai": ("invalid_request_error", "Incorrect API key provided.", "invalid_api_key"),
        "anthropic": ("authentication_error", "invalid x-api-key", None),
    },
    "context_length": {
        "openai": (
            "invalid_request_error",
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130000 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        ),
        "anthropic": ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", None),
    },
    "content_policy_400": {
        "openai": (
            "invalid_request_error",
            "Your request was rejected as a result of our safety system.",
            "content_policy_violation",
        ),
        "anthropic": ("invalid_request_error", "Output blocked by content filtering policy", None),
    },
}


def _error_body(vendor: Vendor, kind: str, message: str, code: str | None) -> dict[str, Any]:
    if vendor == "openai":
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"type": "error", "error": {"type": kind, "message": message}}


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    """The words in the request's messages (and Anthropic's ``system``), at least 1: a
    stand-in for a tokenizer that tests can predict."""
    texts: list[str] = []

    def collect(content: Any) -> None:
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])

    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            collect(message.get("content"))
    collect(body.get("system"))
    return max(1, sum(len(text.split()) for text in texts))


def _plan(scenario: str, params: Mapping[str, Any]) -> _Plan:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of: {', '.join(SCENARIOS)}")
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        raise TypeError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_PARAMS)}")
    return _Plan(scenario, {**DEFAULT_PARAMS, **params})


# --- the wire ---------------------------------------------------------------------------


class _Listener:
    """Accepts connections on ``sock`` in a thread until ``stop()``, which closes ``sock``
    before it returns (so the port refuses connections from then on)."""

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
        self._sock = sock
        self._accepted = accepted
        # A blocked accept() is not woken by closing its socket on every platform; a byte
        # on this pair is.
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="fault-provider-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5.0)
        self._wake_w.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            try:
                while True:
                    ready = {key.fileobj for key, _ in selector.select()}
                    if self._wake_r in ready:
                        return
                    try:
                        conn, _ = self._sock.accept()
                    except OSError:
                        continue
                    self._accepted(conn)
            finally:
                self._sock.close()
                self._wake_r.close()


class _Wire:
    """One server-side connection: reads requests, writes responses and chunks."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        """The next request (method, path, lower-cased headers, body), or None when the
        client closed the connection."""
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > _MAX_HEAD_BYTES:
                return None
            data = self._sock.recv(65536)
            if not data:
                return None
            self._buffer += data
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else ""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(self._buffer) < length:
            data = self._sock.recv(65536)
            if not data:
                return None
            self._buffer += data
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return method, path.split("?", 1)[0], headers, body

    def head(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        reason = _REASONS.get(status) or http.HTTPStatus(status).phrase
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send_json(self, status: int, document: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = json.dumps(document).encode()
        self.head(status, [("Content-Type", "application/json"), *headers, ("Content-Length", str(len(body)))])
        self.send(body)

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def chunk(self, data: bytes) -> None:
        self._sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunks(self) -> None:
        self._sock.sendall(b"0\r\n\r\n")

    def reset(self) -> None:
        """Drop the connection with a TCP RST: what a crashed peer or a balancer's
        timeout looks like to the client."""
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
        finally:
            self._sock.close()

    def close(self) -> None:
        self._sock.close()


def _shut(sock: socket.socket) -> None:
    """Wake whatever is blocked on ``sock`` (closing alone does not wake a blocked recv)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


__all__ = [
    "ANTHROPIC_PATH",
    "DEFAULT_PARAMS",
    "OPENAI_PATH",
    "SCENARIOS",
    "FaultProvider",
    "ReceivedRequest",
]
