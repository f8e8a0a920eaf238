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
  chunks stream at wire speed); ``end_delay_s`` (0): the pause between the last event
  (``[DONE]``, ``message_stop``) and the end of the chunked body, as a server or a proxy
  slow to finish its response has it.
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

This module is the server (its connections, and what tests call); the rest is in modules
of its own: the scenarios and their plans (``fault_scenarios``), the vendors' formats
(``fault_formats``), how each scenario answers (``fault_answers``) and the wire
(``fault_wire``).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from chainclient.fault_answers import answer_json, answer_status_error, answer_stream
from chainclient.fault_formats import VendorAnswer, error_body
from chainclient.fault_scenarios import ANTHROPIC_PATH as ANTHROPIC_PATH
from chainclient.fault_scenarios import DEFAULT_PARAMS as DEFAULT_PARAMS
from chainclient.fault_scenarios import OPENAI_PATH as OPENAI_PATH
from chainclient.fault_scenarios import SCENARIOS as SCENARIOS
from chainclient.fault_scenarios import STATUS_SCENARIOS, Plan, PlanSpec, Vendor, plan_of
from chainclient.fault_wire import Listener, Wire, shut


@dataclass(frozen=True)
class ReceivedRequest:
    """One request the provider received: its header names are lower-cased; ``body`` is the
    parsed JSON (None when the body was not JSON)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class FaultProvider:
    """A local OpenAI- and Anthropic-compatible server that answers with ``scenario``.

    ``url`` is ``http://127.0.0.1:PORT``; ``openai_base_url`` (``url + "/v1"``) and
    ``anthropic_base_url`` are what the vendors' clients take as ``base_url``. A context
    manager; ``close()`` ends every connection and every hang at once.
    """

    def __init__(self, scenario: str = "ok", **params: Any) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._plans: list[Plan] = [plan_of(scenario, params)]
        self._requests: list[ReceivedRequest] = []
        self._sockets: set[socket.socket] = set()
        self._idle: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._connections = 0
        self._answered = 0
        self._refusing = scenario == "connection_refused"
        self._listener: Listener | None = None
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
        self._replace([plan_of(scenario, params)])

    def sequence(self, plans: Sequence[PlanSpec]) -> None:
        """Answer the next requests with ``plans`` in order (each a scenario, or a
        ``(scenario, params)`` pair); the last one repeats."""
        if not plans:
            raise ValueError("sequence() needs at least one scenario")
        built = [plan_of(item, {}) if isinstance(item, str) else plan_of(item[0], item[1]) for item in plans]
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
            shut(sock)
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

    def _replace(self, plans: list[Plan]) -> None:
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
                shut(sock)
        elif self._listener is None:
            self._listen()

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Re-binding the port after connection_refused must not wait for TIME_WAIT to pass.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        sock.listen(128)
        self._port = sock.getsockname()[1]
        self._listener = Listener(sock, self._accepted)

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
        wire = Wire(sock)
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

    def _answer(self, wire: Wire, method: str, path: str, headers: dict[str, str], raw_body: bytes) -> bool:
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
            wire.send_json(400, error_body(vendor, "invalid_request_error", "the body is not a JSON object", None))
            return True
        if plan.scenario in STATUS_SCENARIOS:
            return answer_status_error(wire, vendor, plan)
        if plan.scenario == "reset_before_headers":
            wire.reset()
            return False
        if plan.scenario == "no_headers":
            self._closed.wait(plan["hang_s"])
            return False
        answer = VendorAnswer(vendor, plan, body, number)
        if body.get("stream") is True:
            return answer_stream(wire, plan, answer, self._closed)
        return answer_json(wire, plan, answer, self._closed)

    def _next_plan(self, request: ReceivedRequest) -> tuple[Plan, int]:
        """The plan for ``request`` (recorded), and its number, which names its answer."""
        with self._lock:
            self._requests.append(request)
            self._answered += 1
            plan = self._plans.pop(0) if len(self._plans) > 1 else self._plans[0]
            return plan, self._answered


__all__ = [
    "ANTHROPIC_PATH",
    "DEFAULT_PARAMS",
    "OPENAI_PATH",
    "SCENARIOS",
    "FaultProvider",
    "ReceivedRequest",
]
