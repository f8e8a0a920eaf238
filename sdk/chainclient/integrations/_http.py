"""What the adapters share: the HTTP layer's failures in the router's terms, the calls
themselves (``LibraryTransport``), and a streamed body read to its end so that its
connection is pooled (``DrainingBody``). The stream wrappers are in ``_chunk_streams``.

Both vendor libraries send through ``httpx2`` over ``httpcore2``. Whatever they wrap a
network failure in (``APIConnectionError``, ``APITimeoutError``), they raise it ``from``
the ``httpx2`` exception, itself raised ``from`` the ``httpcore2`` one; some paths let the
``httpx2`` exception out bare (Anthropic's streams, OpenAI's reading of a streamed error
body). ``network_failure`` finds it either way and says what it means for dispatch:

- ``ConnectError``: the TCP connection (or the TLS handshake) failed: nothing was sent;
- ``ConnectTimeout``, ``PoolTimeout``: no connection within the timeout: nothing was sent;
- any other timeout (waiting for the headers or the next chunk, or writing): the request
  was sent, or partly: the provider may have acted;
- any other transport error (``ReadError`` for a reset, ``RemoteProtocolError`` for a
  close before the headers or mid-body): the connection broke after the request was sent.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, Protocol, TypeVar

import httpx2

from chainclient.errors import ProviderError, ProviderTimeout, ProviderUnavailable, TransportError
from chainclient.receipts import Answer
from chainclient.transport import non_negative_seconds, retry_after_value
from chainclient.types import Step

ChunkContra = TypeVar("ChunkContra", contravariant=True)

Failure = Callable[[BaseException], "TransportError | None"]
"""A library's mapping: the router's error for what the library raised, or None when it is
not a provider failure (a programming error, which propagates as it is)."""


def network_failure(exc: BaseException) -> TransportError | None:
    """The router's error for an ``httpx2`` failure found in ``exc`` or its causes; None if
    there is none."""
    cause = _transport_cause(exc)
    if cause is None:
        return None
    detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if isinstance(cause, (httpx2.ConnectError, httpx2.ProxyError, httpx2.UnsupportedProtocol)):
        return ProviderUnavailable(f"could not connect ({detail})")
    if isinstance(cause, (httpx2.ConnectTimeout, httpx2.PoolTimeout)):
        return ProviderTimeout(False, f"no connection within the timeout ({detail})")
    if isinstance(cause, httpx2.TimeoutException):
        return ProviderTimeout(True, detail)
    if isinstance(cause, httpx2.DecodingError):
        return malformed(detail)
    return ProviderError(None, True, f"connection broke after the request was sent ({detail})")


def _transport_cause(exc: BaseException) -> BaseException | None:
    """The first ``httpx2`` request error in ``exc``'s chain of causes, else the first TLS
    error (OpenAI's client also wraps a bare ``ssl.SSLError``, which AnyIO can let out; as
    nobody knows how far the exchange got, it counts as sent). Any other ``OSError`` is
    not the network's: a file that cannot be read for an upload is a caller's error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    fallback: BaseException | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, httpx2.RequestError):
            return current
        if fallback is None and isinstance(current, ssl.SSLError):
            fallback = current
        # __cause__ only: each layer raises ``from`` the one below; __context__ could be an
        # unrelated error that was being handled at the time.
        current = current.__cause__
    return fallback


@contextlib.contextmanager
def translated(failure: Failure) -> Iterator[None]:
    """Raise the router's error (``failure``'s mapping) for what the block raises, chained
    to it; an exception ``failure`` does not map propagates as it is."""
    try:
        yield
    except Exception as exc:
        mapped = failure(exc)
        if mapped is None or mapped is exc:
            raise
        raise mapped from exc


def malformed(detail: str) -> ProviderError:
    """An answer that is not what the API documents: the provider was reached, and what it
    did is unknown."""
    return ProviderError(None, True, f"malformed answer: {detail}")


def decoding_failure(exc: BaseException) -> TransportError | None:
    """A body or an event that is not JSON (the libraries call ``json.loads`` unguarded)."""
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return malformed(f"{type(exc).__name__}: {exc}")
    return None


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """How long the provider asked us to wait: ``Retry-After`` in seconds or as an HTTP
    date, or OpenAI's ``retry-after-ms`` (which its library prefers, so do we); None when
    absent or unreadable."""
    milliseconds = non_negative_seconds(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    return retry_after_value(headers.get("retry-after"))


def shut_down(response: httpx2.Response) -> None:
    """Break a read blocked on ``response``'s connection, from any thread: shut the socket
    down (closing it would not wake a blocked ``recv``; shutting it down does), then close
    the response so its connection leaves the pool."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            # socket.socket's own shutdown even for a TLS socket: SSLSocket.shutdown would
            # also drop its SSL object, under the feet of the thread reading through it.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already shut or closed: nothing left to wake
    try:
        response.close()
    except Exception:  # the reading thread may be closing it at the same moment
        pass


DRAIN_S = 0.1
"""How long a complete stream's body may take to end once its last event came, before its
connection is closed instead of pooled (OpenAI's asyncio stream allows the same)."""
_DRAIN_BYTES = 64 * 1024


class StreamState(Protocol[ChunkContra]):
    """What a vendor's stream learns from its chunks: the model, the usage, whether the
    terminal event came; ``observe`` raises ContentPolicyRefusal on a content filter."""

    model_id: str
    input_tokens: int | None
    output_tokens: int | None
    complete: bool
    terminal: str
    """The terminal event, as the error for a truncated stream names it."""

    def observe(self, chunk: ChunkContra) -> None: ...

    def text(self, chunk: ChunkContra) -> str: ...


class DrainingBody(httpx2.SyncByteStream):
    """A streamed response's body that, when closed once the answer is complete, first
    reads what is left of it, so that its HTTP/1.1 connection goes back to the pool.

    OpenAI's library stops reading a stream at ``data: [DONE]`` and closes the response; the
    chunked body's last chunk (``0\\r\\n\\r\\n``) is then still unread, and httpcore closes a
    connection whose response was not read to its end, so every synchronous stream cost a
    new connection (its asyncio stream drains the body itself). What is left is read within
    ``DRAIN_S`` (each read of the connection bounded by what remains of it) and up to 64 KiB.
    A body whose stream was left or aborted (``leave()``), or that ends before its state is
    complete (a failure), is closed as it is: what is left could be long, or never come.
    """

    def __init__(self, body: httpx2.SyncByteStream, network: Any, state: StreamState[Any]) -> None:
        self._body = body
        self._network = network
        self._state: StreamState[Any] | None = state
        self._chunks: Iterator[bytes] | None = None

    @classmethod
    def install(cls, response: httpx2.Response, state: StreamState[Any]) -> DrainingBody | None:
        """Put one in front of ``response``'s body (before it is read); None where the wait
        for the rest could not be bounded (no network stream: a test's transport) or where
        reading it would not keep the connection (HTTP/2 ends a stream, not a connection)."""
        network = response.extensions.get("network_stream")
        if response.http_version != "HTTP/1.1" or not callable(getattr(network, "read", None)):
            return None
        body = cls(response.stream, network, state)  # type: ignore[arg-type]
        response.stream = body
        return body

    @property
    def elapsed(self) -> timedelta | None:
        """The wrapped body's (``httpx2.Response.elapsed`` reads it from the body)."""
        return getattr(self._body, "elapsed", None)

    def __iter__(self) -> Iterator[bytes]:
        # The body's own iterator, kept to read the rest of it at close: no frame of ours
        # between the body's bytes and the library.
        self._chunks = iter(self._body)
        return self._chunks

    def leave(self) -> None:
        """The caller left the stream, or it was aborted: close without reading the rest."""
        self._state = None

    def close(self) -> None:
        state, self._state = self._state, None
        if state is not None and state.complete and self._chunks is not None:
            try:
                with _reads_within(self._network, DRAIN_S):
                    left = _DRAIN_BYTES
                    for data in self._chunks:
                        left -= len(data)
                        if left < 0:
                            break  # more than a body's end: let the connection go
            except Exception:
                pass  # not read to its end: the body's close() closes the connection
        self._body.close()


@contextlib.contextmanager
def _reads_within(network: Any, seconds: float) -> Iterator[None]:
    """Bound every read of ``network`` (httpcore's network stream) to what is left of
    ``seconds`` from now: httpcore passes each read the request's read timeout, taken when
    the body's reading began, so the bound is set on the stream for the while."""
    read = network.read
    deadline = time.monotonic() + seconds

    def read_within(max_bytes: int, timeout: float | None = None) -> bytes:
        left = max(deadline - time.monotonic(), 0.0)
        return read(max_bytes, timeout=left if timeout is None else min(timeout, left))  # type: ignore[no-any-return]

    network.read = read_within
    try:
        yield
    finally:
        del network.read  # the class's own again


class LibraryTransport:
    """What every adapter does on a synchronous client, written once: ``create()`` with the
    step's model and the attempt's timeout, the library's failures translated, the answer
    or the stream wrapped. A library's adapter says only what differs (its call, its
    failures, its answer, its stream types).

    ``__init__`` turns the client's own retries off: the router falls back along the chain,
    and a retry inside the library would spend the attempt's timeout on the provider that
    just failed."""

    failure: Failure
    stream_type: type
    stream_class: Callable[[Any, str], Iterator[Any]]
    answer: Callable[[Any, Step], Answer]

    def __init__(self, client: Any) -> None:
        self.client = client.with_options(max_retries=0)

    def create(self, **arguments: Any) -> Any:
        raise NotImplementedError

    def stream_arguments(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        return request_arguments(request, model=step.model, timeout=timeout_s, stream=True)

    def __call__(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> Answer:
        arguments = request_arguments(request, model=step.model, timeout=timeout_s)
        with translated(type(self).failure):
            response = self.create(**arguments)
        return type(self).answer(response, step)

    def stream(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> Any:
        """Open the stream: returns once the headers arrived (within ``timeout_s``)."""
        with translated(type(self).failure):
            stream = self.create(**self.stream_arguments(step, request, timeout_s))
        if not isinstance(stream, self.stream_type):
            raise malformed(f"expected a stream, got {type(stream).__name__}")
        return type(self).stream_class(stream, step.model)


class AsyncLibraryTransport:
    """``LibraryTransport`` on an asyncio client: the same, awaited."""

    failure: Failure
    stream_type: type
    stream_class: Callable[[Any, str], AsyncIterator[Any]]
    answer: Callable[[Any, Step], Answer]

    def __init__(self, client: Any) -> None:
        self.client = client.with_options(max_retries=0)

    async def create(self, **arguments: Any) -> Any:
        raise NotImplementedError

    def stream_arguments(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        return request_arguments(request, model=step.model, timeout=timeout_s, stream=True)

    async def __call__(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> Answer:
        arguments = request_arguments(request, model=step.model, timeout=timeout_s)
        with translated(type(self).failure):
            response = await self.create(**arguments)
        return type(self).answer(response, step)

    async def stream(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> Any:
        """Open the stream: returns once the headers arrived (within ``timeout_s``)."""
        with translated(type(self).failure):
            stream = await self.create(**self.stream_arguments(step, request, timeout_s))
        if not isinstance(stream, self.stream_type):
            raise malformed(f"expected a stream, got {type(stream).__name__}")
        return type(self).stream_class(stream, step.model)


def request_arguments(request: Mapping[str, Any], **set_here: Any) -> dict[str, Any]:
    """``request`` (the library's ``create()`` keyword arguments) with the ones the adapter
    sets; a request that sets one of those itself is a programming error."""
    clash = sorted(set(request) & set(set_here))
    if clash:
        raise ValueError(f"the adapter sets {', '.join(clash)} itself (from the step and the router): leave it out")
    return {**request, **set_here}


__all__ = [
    "DRAIN_S",
    "AsyncLibraryTransport",
    "DrainingBody",
    "LibraryTransport",
    "Failure",
    "StreamState",
    "decoding_failure",
    "malformed",
    "network_failure",
    "request_arguments",
    "retry_after_s",
    "shut_down",
    "translated",
]
