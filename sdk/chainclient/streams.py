"""What a streaming transport returns: the provider's stream of chunks, as the routers read it.

A streaming transport is ``stream(step, request, timeout_s) -> ProviderStream`` (for
``AsyncRouter``: ``async def stream(...) -> AsyncProviderStream``). It must return within
``timeout_s`` (pass it on as the vendor client's timeout: it bounds the wait for the
response's headers) or raise the errors in ``chainclient.errors``, as ``complete()``'s
transports do. The stream it returns yields the provider's chunks; it must:

- raise a ``TransportError`` when the stream breaks (``ProviderError(None, dispatched=True)``
  for a connection cut mid-stream or a malformed chunk; ``ContentPolicyRefusal`` for a
  content filter ending; ``ProviderError(status)`` for an error event);
- raise ``ProviderError(None, dispatched=True, ...)`` when the stream ends without the
  provider's terminal event (OpenAI's ``finish_reason``, Anthropic's ``message_stop``):
  plain exhaustion means the stream is complete, so a truncated stream is never a success;
- close its connection on ``close()`` (``aclose()``), which the router calls whatever happens.

The routers read it as a ``for`` loop does: ``iter(stream)`` (``aiter(stream)``) once per
attempt, then that iterator's ``__next__`` (``__anext__``) for each chunk; most streams
return themselves (the adapters' return a generator of their own, which saves a call per
chunk).

It may also have, looked up once per attempt:

- ``abort()``: break a read that is blocked in another thread, from any thread (the
  synchronous router's watchdog calls it when a bound passes: closing a socket does not
  wake a blocked ``recv``, shutting it down does);
- ``text(chunk) -> str``: the content a chunk carries, for the commit point (without it a
  ``str`` or ``bytes`` chunk counts by its length and anything else counts as content);
- ``model_id`` (the model the provider says is serving), ``input_tokens`` and
  ``output_tokens``, read when the attempt settles, for its receipt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, runtime_checkable

from chainclient.types import Step


@runtime_checkable
class ProviderStream(Protocol):
    """A provider's stream of chunks for the synchronous ``Router``."""

    def __iter__(self) -> Iterator[Any]: ...

    def __next__(self) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncProviderStream(Protocol):
    """A provider's stream of chunks for ``AsyncRouter``."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def __anext__(self) -> Any: ...

    async def aclose(self) -> None: ...


StreamTransport = Callable[[Step, Any, float], ProviderStream]
"""``stream(step, request, timeout_s) -> ProviderStream`` for ``Router.stream``."""

AsyncStreamTransport = Callable[[Step, Any, float], Awaitable[AsyncProviderStream]]
"""``async def stream(step, request, timeout_s) -> AsyncProviderStream`` for
``AsyncRouter.stream``."""


def chunk_text(chunk: Any) -> str | None:
    """The content of a chunk the stream cannot measure itself: a ``str`` is its text,
    ``bytes`` are decoded; None for anything else (it counts as content)."""
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, (bytes, bytearray)):
        return bytes(chunk).decode("utf-8", "replace")
    return None


__all__ = [
    "AsyncProviderStream",
    "AsyncStreamTransport",
    "ProviderStream",
    "StreamTransport",
    "chunk_text",
]
