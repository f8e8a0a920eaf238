"""The fault provider on the wire: statuses, headers, SSE framing, resets and hangs, read with
``socket`` and ``http.client`` only (no vendor library), so a test here fails when the
provider is wrong, not when a client is lenient."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from chainclient.fault_provider import ANTHROPIC_PATH, OPENAI_PATH, SCENARIOS, FaultProvider

PATHS = {"openai": OPENAI_PATH, "anthropic": ANTHROPIC_PATH}
VENDORS = ["openai", "anthropic"]
MESSAGES = [{"role": "user", "content": "three words here"}]


@pytest.fixture
def provider() -> Iterator[FaultProvider]:
    with FaultProvider() as fault_provider:
        yield fault_provider


@dataclass
class Raw:
    """An answer as it came off the socket."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    """The chunked body's chunks, each as sent (for a chunked answer)."""
    arrived: list[float] = field(default_factory=list)
    """When each chunk arrived, in seconds after the request was sent."""
    body: bytes = b""
    """The body read by Content-Length (for a JSON answer)."""
    ended: bool = False
    """Whether the body was complete: the terminating chunk, or all Content-Length bytes."""
    error: BaseException | None = None
    """What broke the read: ConnectionResetError, socket.timeout, or EOFError for a close."""
    head_s: float | None = None

    def events(self) -> list[str]:
        return [chunk.decode() for chunk in self.chunks]

    def data(self) -> list[Any]:
        """Each OpenAI event's data, parsed (``[DONE]`` stays a string)."""
        out: list[Any] = []
        for event in self.events():
            assert event.startswith("data: ") and event.endswith("\n\n"), event
            payload = event[len("data: ") : -2]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
        return out

    def named_events(self) -> list[tuple[str, Any]]:
        """Each Anthropic event's name and parsed data."""
        out: list[tuple[str, Any]] = []
        for event in self.events():
            name_line, data_line, *rest = event.split("\n")
            assert name_line.startswith("event: ") and data_line.startswith("data: ") and rest == ["", ""], event
            out.append((name_line[len("event: ") :], json.loads(data_line[len("data: ") :])))
        return out


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buffer += data

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self.fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self.fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


def exchange(provider: FaultProvider, vendor: str, *, stream: bool = False, timeout: float = 5.0, **body: Any) -> Raw:
    """POST a request and read the answer off the socket, noting how it ended."""
    document = {"model": "requested-model", "messages": MESSAGES, "max_tokens": 64, **body}
    if stream:
        document["stream"] = True
    payload = json.dumps(document).encode()
    host, port = provider.url.removeprefix("http://").split(":")
    raw = Raw()
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(
            f"POST {PATHS[vendor]} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        started = time.monotonic()
        reader = _Reader(sock)
        try:
            raw.status = int(reader.line().split(b" ")[1])
            raw.head_s = time.monotonic() - started
            while line := reader.line():
                name, _, value = line.decode().partition(":")
                raw.headers[name.strip().lower()] = value.strip()
            if raw.headers.get("transfer-encoding") == "chunked":
                while True:
                    size = int(reader.line(), 16)
                    if size == 0:
                        reader.exactly(2)
                        raw.ended = True
                        break
                    raw.chunks.append(reader.exactly(size))
                    raw.arrived.append(time.monotonic() - started)
                    assert reader.exactly(2) == b"\r\n"
            else:
                raw.body = reader.exactly(int(raw.headers["content-length"]))
                raw.ended = True
        except (OSError, EOFError) as exc:
            raw.error = exc
    return raw


def post(provider: FaultProvider, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
    """One request with http.client (which undoes the chunked framing)."""
    host, port = provider.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


# --- ok ----------------------------------------------------------------------------------


def test_an_openai_answer_echoes_the_model_and_carries_usage(provider: FaultProvider) -> None:
    raw = exchange(provider, "openai")
    assert raw.status == 200 and raw.headers["content-type"] == "application/json" and raw.ended
    answer = json.loads(raw.body)
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "requested-model"
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": "chunk-0 chunk-1 chunk-2 chunk-3 chunk-4",
        "refusal": None,
    }
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert "x-request-id" in raw.headers


def test_an_anthropic_answer_echoes_the_model_and_carries_usage(provider: FaultProvider) -> None:
    raw = exchange(provider, "anthropic", system="be brief")
    answer = json.loads(raw.body)
    assert raw.status == 200 and answer["type"] == "message" and answer["model"] == "requested-model"
    assert answer["content"] == [{"type": "text", "text": "chunk-0 chunk-1 chunk-2 chunk-3 chunk-4"}]
    assert answer["stop_reason"] == "end_turn"
    assert answer["usage"] == {"input_tokens": 5, "output_tokens": 5}
    assert "request-id" in raw.headers


def test_an_openai_stream_sends_one_event_per_chunk_then_usage_and_done(provider: FaultProvider) -> None:
    raw = exchange(provider, "openai", stream=True, stream_options={"include_usage": True})
    assert raw.status == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["transfer-encoding"] == "chunked" and "content-length" not in raw.headers
    assert raw.ended and raw.error is None
    data = raw.data()
    assert data[-1] == "[DONE]"
    role, *content, finish, usage, _ = data
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [chunk["choices"][0]["delta"]["content"] for chunk in content] == [
        "chunk-0",
        " chunk-1",
        " chunk-2",
        " chunk-3",
        " chunk-4",
    ]
    assert all(
        chunk["object"] == "chat.completion.chunk" and chunk["model"] == "requested-model" for chunk in data[:-1]
    )
    assert all(chunk["choices"][0]["finish_reason"] is None and chunk["usage"] is None for chunk in [role, *content])
    assert finish["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def test_an_openai_stream_has_no_usage_unless_asked(provider: FaultProvider) -> None:
    data = exchange(provider, "openai", stream=True).data()
    assert len(data) == 1 + 5 + 1 + 1
    assert all("usage" not in chunk for chunk in data[:-1])


def test_an_anthropic_stream_sends_the_documented_events(provider: FaultProvider) -> None:
    raw = exchange(provider, "anthropic", stream=True)
    assert raw.status == 200 and raw.ended and raw.headers["transfer-encoding"] == "chunked"
    events = raw.named_events()
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["model"] == "requested-model" and start["usage"]["input_tokens"] == 3
    assert [data["delta"] for _, data in events[3:8]][1] == {"type": "text_delta", "text": " chunk-1"}
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn" and events[-2][1]["usage"] == {"output_tokens": 5}


@pytest.mark.parametrize("vendor", VENDORS)
def test_two_thousand_chunks_stream_without_sleeping(provider: FaultProvider, vendor: str) -> None:
    provider.set("ok", chunks=2000)
    started = time.monotonic()
    raw = exchange(provider, vendor, stream=True)
    assert raw.ended and len(raw.chunks) > 2000
    assert time.monotonic() - started < 2.0


def test_chunk_interval_spaces_the_content(provider: FaultProvider) -> None:
    provider.set("ok", chunks=3, chunk_interval_s=0.1)
    raw = exchange(provider, "openai", stream=True)
    first, _, third = raw.arrived[1:4]
    assert third - first >= 0.19


@pytest.mark.parametrize("vendor", VENDORS)
def test_end_delay_holds_back_the_end_of_the_body(provider: FaultProvider, vendor: str) -> None:
    provider.set("ok", end_delay_s=0.3)
    started = time.monotonic()
    raw = exchange(provider, vendor, stream=True)
    assert raw.ended and time.monotonic() - started >= 0.3
    assert raw.events()[-1] in ("data: [DONE]\n\n", 'event: message_stop\ndata: {"type": "message_stop"}\n\n')


def test_connections_are_kept_alive_between_requests(provider: FaultProvider) -> None:
    host, port = provider.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    for _ in range(3):
        connection.request("POST", OPENAI_PATH, json.dumps({"model": "m", "messages": [], "stream": True}))
        assert connection.getresponse().read().endswith(b"data: [DONE]\n\n")
    connection.close()
    assert provider.connections == 1


# --- statuses ----------------------------------------------------------------------------

STATUSES = [
    # scenario, status, OpenAI error (type, code), Anthropic error type
    ("rate_limited", 429, ("requests", "rate_limit_exceeded"), "rate_limit_error"),
    ("server_error", 500, ("server_error", None), "api_error"),
    ("unavailable", 503, ("server_error", "service_unavailable"), "api_error"),
    ("overloaded", 529, ("overloaded_error", None), "overloaded_error"),
    ("unauthorized", 401, ("invalid_request_error", "invalid_api_key"), "authentication_error"),
    ("context_length", 400, ("invalid_request_error", "context_length_exceeded"), "invalid_request_error"),
    ("content_policy_400", 400, ("invalid_request_error", "content_policy_violation"), "invalid_request_error"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("scenario", "status", "openai_error", "anthropic_type"), STATUSES, ids=[s[0] for s in STATUSES]
)
def test_error_scenarios_answer_with_the_vendors_status_and_body(
    provider: FaultProvider,
    scenario: str,
    status: int,
    openai_error: tuple[str, str | None],
    anthropic_type: str,
    stream: bool,
) -> None:
    provider.set(scenario)
    raw = exchange(provider, "openai", stream=stream)
    assert raw.status == status and raw.headers["content-type"] == "application/json"
    error = json.loads(raw.body)["error"]
    assert (error["type"], error["code"]) == openai_error and error["message"]

    raw = exchange(provider, "anthropic", stream=stream)
    body = json.loads(raw.body)
    assert raw.status == status and body["type"] == "error" and body["error"]["type"] == anthropic_type
    if scenario == "context_length":
        assert "prompt is too long" in body["error"]["message"]
    if scenario == "content_policy_400":
        assert "content filtering policy" in body["error"]["message"]
    assert ("retry-after" in raw.headers) == (scenario == "rate_limited")


def test_overloaded_has_its_own_reason_phrase(provider: FaultProvider) -> None:
    provider.set("overloaded")
    status, _, _ = post(provider, ANTHROPIC_PATH, {"model": "m", "messages": []})
    assert status == 529


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [(None, "1"), (7, "7"), ("Wed, 21 Oct 2043 07:28:00 GMT", "Wed, 21 Oct 2043 07:28:00 GMT")],
    ids=["default", "seconds", "http-date"],
)
def test_rate_limited_says_when_to_retry(provider: FaultProvider, retry_after: Any, header: str) -> None:
    provider.set("rate_limited", **({} if retry_after is None else {"retry_after": retry_after}))
    assert exchange(provider, "openai").headers["retry-after"] == header


# --- refusals ----------------------------------------------------------------------------


def test_openai_content_filter_has_no_content_in_json_and_stream(provider: FaultProvider) -> None:
    provider.set("content_filter")
    choice = json.loads(exchange(provider, "openai").body)["choices"][0]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] is None

    data = exchange(provider, "openai", stream=True).data()
    assert data[-1] == "[DONE]"
    assert [chunk["choices"][0]["finish_reason"] for chunk in data[:-1]] == [None, "content_filter"]
    assert not any(chunk["choices"][0]["delta"].get("content") for chunk in data[:-1])


def test_anthropic_refusal_is_a_stop_reason(provider: FaultProvider) -> None:
    provider.set("content_filter")
    answer = json.loads(exchange(provider, "anthropic").body)
    assert answer["stop_reason"] == "refusal" and answer["content"] == []

    events = exchange(provider, "anthropic", stream=True).named_events()
    assert [name for name, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert events[2][1]["delta"]["stop_reason"] == "refusal"


# --- connections -------------------------------------------------------------------------


def test_connection_refused_closes_the_port_until_another_scenario(provider: FaultProvider) -> None:
    host, port = provider.url.removeprefix("http://").split(":")
    idle = http.client.HTTPConnection(host, int(port), timeout=5)
    idle.request("POST", OPENAI_PATH, json.dumps({"model": "m", "messages": []}))
    idle.getresponse().read()

    provider.set("connection_refused")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=1).close()
    # A kept-alive connection is dropped too, or a pooled client would never see the refusal.
    assert idle.sock is not None and idle.sock.recv(1) == b""
    idle.close()

    provider.set("ok")
    assert exchange(provider, "openai").status == 200


def test_a_provider_can_start_refusing(provider: FaultProvider) -> None:
    with FaultProvider("connection_refused") as refusing:
        host, port = refusing.url.removeprefix("http://").split(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=1).close()
        refusing.set("ok")
        assert exchange(refusing, "anthropic").status == 200


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_reset_before_headers_sends_nothing_but_a_reset(provider: FaultProvider, stream: bool) -> None:
    provider.set("reset_before_headers")
    raw = exchange(provider, "openai", stream=stream)
    assert raw.status is None and isinstance(raw.error, ConnectionResetError)
    assert len(provider.requests) == 1  # the request was read first


@pytest.mark.parametrize("vendor", VENDORS)
def test_reset_mid_stream_resets_after_the_chunks_before(provider: FaultProvider, vendor: str) -> None:
    provider.set("reset_mid_stream", chunks_before=3)
    raw = exchange(provider, vendor, stream=True)
    assert raw.status == 200 and not raw.ended and isinstance(raw.error, ConnectionResetError)
    opening = 1 if vendor == "openai" else 3
    assert len(raw.chunks) == opening + 3
    assert raw.chunks[-1].decode().count("chunk-2") == 1


def test_reset_mid_stream_cuts_a_json_body_in_half(provider: FaultProvider) -> None:
    provider.set("reset_mid_stream")
    host, port = provider.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        payload = json.dumps({"model": "m", "messages": []}).encode()
        sock.sendall(f"POST {ANTHROPIC_PATH} HTTP/1.1\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        received = b""
        with pytest.raises(ConnectionResetError):
            while data := sock.recv(65536):
                received += data
    head, body = received.split(b"\r\n\r\n", 1)
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    assert head.startswith(b"HTTP/1.1 200") and len(body) == length // 2


# --- hangs and delays --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_no_headers_sends_nothing(provider: FaultProvider, stream: bool) -> None:
    provider.set("no_headers", hang_s=5)
    raw = exchange(provider, "openai", stream=stream, timeout=0.3)
    assert raw.status is None and isinstance(raw.error, socket.timeout)


def test_no_headers_ends_with_a_close_after_hang_s(provider: FaultProvider) -> None:
    provider.set("no_headers", hang_s=0.2)
    raw = exchange(provider, "anthropic")
    assert raw.status is None and isinstance(raw.error, EOFError)


def test_first_chunk_late_sends_the_headers_at_once_and_content_after_the_delay(provider: FaultProvider) -> None:
    provider.set("first_chunk_late", delay_s=0.3)
    raw = exchange(provider, "anthropic", stream=True)
    assert raw.ended and raw.head_s is not None and raw.head_s < 0.2
    # message_start, content_block_start and ping at once; the content after the delay.
    assert max(raw.arrived[:3]) < 0.2 and raw.arrived[3] >= 0.3


def test_first_chunk_late_sends_a_json_answer_after_the_delay(provider: FaultProvider) -> None:
    provider.set("first_chunk_late", delay_s=0.3)
    raw = exchange(provider, "openai")
    assert raw.ended and raw.head_s is not None and raw.head_s >= 0.3


@pytest.mark.parametrize("vendor", VENDORS)
def test_silence_after_first_chunk_stops_after_one_piece_of_content(provider: FaultProvider, vendor: str) -> None:
    provider.set("silence_after_first_chunk", hang_s=0.3)
    raw = exchange(provider, vendor, stream=True)
    assert not raw.ended and isinstance(raw.error, EOFError)  # closed mid-body after hang_s
    opening = 1 if vendor == "openai" else 3
    assert len(raw.chunks) == opening + 1 and b"chunk-0" in raw.chunks[-1]


def test_silence_after_first_chunk_sends_json_headers_but_no_body(provider: FaultProvider) -> None:
    provider.set("silence_after_first_chunk", hang_s=5)
    raw = exchange(provider, "openai", timeout=0.3)
    assert raw.status == 200 and int(raw.headers["content-length"]) > 0
    assert raw.body == b"" and isinstance(raw.error, socket.timeout)


def test_close_ends_every_hang_at_once() -> None:
    provider = FaultProvider("no_headers", hang_s=30)
    raws: list[Raw] = []
    threads = [threading.Thread(target=lambda: raws.append(exchange(provider, "openai", timeout=10))) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while len(provider.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    provider.close()
    for thread in threads:
        thread.join(timeout=2)
    assert time.monotonic() - started < 0.5
    assert len(raws) == 3 and all(raw.status is None and raw.error is not None for raw in raws)


def test_close_ends_a_silent_stream_and_a_late_one() -> None:
    provider = FaultProvider("silence_after_first_chunk", hang_s=30)
    raws: list[Raw] = []
    first = threading.Thread(target=lambda: raws.append(exchange(provider, "anthropic", stream=True, timeout=10)))
    first.start()
    deadline = time.monotonic() + 5
    while not provider.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    provider.set("first_chunk_late", delay_s=30)
    second = threading.Thread(target=lambda: raws.append(exchange(provider, "openai", stream=True, timeout=10)))
    second.start()
    while len(provider.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    provider.close()
    first.join(timeout=2)
    second.join(timeout=2)
    assert time.monotonic() - started < 0.5 and len(raws) == 2


# --- truncated and malformed -------------------------------------------------------------


def test_no_terminal_event_ends_an_openai_stream_cleanly_without_finish_or_done(provider: FaultProvider) -> None:
    provider.set("no_terminal_event")
    raw = exchange(provider, "openai", stream=True, stream_options={"include_usage": True})
    assert raw.ended and raw.error is None
    data = raw.data()
    assert "[DONE]" not in data and len(data) == 6
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in data)


def test_no_terminal_event_ends_an_anthropic_stream_without_message_delta_or_stop(provider: FaultProvider) -> None:
    provider.set("no_terminal_event")
    raw = exchange(provider, "anthropic", stream=True)
    names = [name for name, _ in raw.named_events()]
    assert raw.ended and names[-1] == "content_block_delta"
    assert "message_delta" not in names and "message_stop" not in names


@pytest.mark.parametrize("vendor", VENDORS)
def test_no_terminal_event_sends_a_well_framed_half_json_document(provider: FaultProvider, vendor: str) -> None:
    provider.set("no_terminal_event")
    raw = exchange(provider, vendor)
    assert raw.ended and len(raw.body) == int(raw.headers["content-length"])
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw.body)


@pytest.mark.parametrize("vendor", VENDORS)
def test_malformed_chunk_sends_an_event_that_is_not_json(provider: FaultProvider, vendor: str) -> None:
    provider.set("malformed_chunk")
    raw = exchange(provider, vendor, stream=True)
    assert raw.status == 200 and raw.ended and len(raw.chunks) == 1
    data = raw.events()[0].split("data: ", 1)[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)


def test_malformed_chunk_sends_a_json_answer_that_is_not_json(provider: FaultProvider) -> None:
    provider.set("malformed_chunk")
    raw = exchange(provider, "openai")
    assert raw.status == 200 and raw.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw.body)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_wrong_model_names_another_model(provider: FaultProvider, stream: bool) -> None:
    provider.set("wrong_model")
    raw = exchange(provider, "openai", stream=stream)
    models = {chunk["model"] for chunk in raw.data()[:-1]} if stream else {json.loads(raw.body)["model"]}
    assert models == {"substituted-model-2026"}
    provider.set("wrong_model", model="other-7b")
    assert json.loads(exchange(provider, "anthropic").body)["model"] == "other-7b"


def test_error_event_ends_a_stream_with_the_vendors_error(provider: FaultProvider) -> None:
    provider.set("error_event", chunks_before=1)
    events = exchange(provider, "anthropic", stream=True).named_events()
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "fault provider: overloaded_error mid-stream"},
        },
    )
    provider.set("error_event", chunks_before=0, error_type="server_error")
    data = exchange(provider, "openai", stream=True).data()
    assert data[-1]["error"]["type"] == "server_error" and len(data) == 2


# --- the API -----------------------------------------------------------------------------


def test_a_sequence_answers_in_order_and_the_last_repeats(provider: FaultProvider) -> None:
    provider.sequence(["server_error", ("rate_limited", {"retry_after": 3}), "ok"])
    assert exchange(provider, "openai").status == 500
    raw = exchange(provider, "openai")
    assert raw.status == 429 and raw.headers["retry-after"] == "3"
    assert [exchange(provider, "anthropic").status for _ in range(2)] == [200, 200]


def test_requests_are_recorded_and_cleared(provider: FaultProvider) -> None:
    exchange(provider, "openai", stream=True)
    [request] = provider.requests
    assert (request.method, request.path) == ("POST", OPENAI_PATH)
    assert request.headers["content-type"] == "application/json"
    assert request.body["model"] == "requested-model" and request.body["stream"] is True
    provider.clear()
    assert provider.requests == []


def test_other_paths_are_not_found(provider: FaultProvider) -> None:
    status, _, body = post(provider, "/v1/embeddings", {})
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"


def test_a_body_that_is_not_json_is_a_bad_request(provider: FaultProvider) -> None:
    host, port = provider.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    connection.request("POST", OPENAI_PATH, b"nope")
    assert connection.getresponse().status == 400
    connection.close()


def test_urls_name_the_port_and_the_vendors_base(provider: FaultProvider) -> None:
    assert provider.url.startswith("http://127.0.0.1:")
    assert provider.openai_base_url == provider.url + "/v1"
    assert provider.anthropic_base_url == provider.url


def test_unknown_scenarios_and_parameters_are_refused(provider: FaultProvider) -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        provider.set("flaky")
    with pytest.raises(TypeError, match="hang_seconds"):
        provider.set("no_headers", hang_seconds=1)
    with pytest.raises(ValueError, match="sequence"):
        provider.sequence(["ok", "connection_refused"])
    with pytest.raises(ValueError):
        provider.sequence([])


def test_every_scenario_is_documented() -> None:
    import chainclient.fault_provider as module

    assert module.__doc__ is not None
    missing = [scenario for scenario in SCENARIOS if f"``{scenario}``" not in module.__doc__]
    assert not missing
