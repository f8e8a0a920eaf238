"""A vendor library's stream held to the contract of ``chainclient.streams``: the wrappers
the adapters return from ``stream()``, for ``Router.stream`` and ``AsyncRouter.stream``.

Each chunk of a stream passes through three frames on its way to the caller: the library's
own iteration (its ``__iter__``, as a caller of the library reads it), one generator here
(which hands the chunk to the vendor's ``StreamState``: model, usage, terminal event,
content filter) and the router's. The router reads the generator itself: it iterates the
stream (``iter(stream)``, once per attempt), so no method call stands between the router
and the chunk; ``next(stream)`` serves a caller that asks chunk by chunk, and raises a
failure again on every later call.

The generator holds the stream's ``_Reading`` (what it and the stream's methods share),
never the stream: a generator that referred to its stream would form a cycle with it, and a
dropped stream would wait for the garbage collector to close its connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Generic, TypeVar

import httpx2

from chainclient.errors import ProviderError, TransportError
from chainclient.integrations._http import Failure, StreamState, shut_down

ChunkT = TypeVar("ChunkT")


def truncated(terminal: str) -> ProviderError:
    """A stream that ended cleanly but early: never a success (``chainclient.streams``)."""
    return ProviderError(None, True, f"the stream ended without {terminal}: the answer is truncated")


class _Reading(Generic[ChunkT]):
    """What a synchronous stream's generator and its methods share: how to close it, its
    state, its failure once raised, whether it was aborted, and what to tell its body when
    the caller leaves (``leave``: see ``chainclient.integrations._http.DrainingBody``)."""

    __slots__ = ("aborted", "close", "failure", "leave", "raised", "state")

    def __init__(
        self,
        close: Callable[[], object],
        state: StreamState[ChunkT],
        failure: Failure,
        leave: Callable[[], object] | None,
    ) -> None:
        self.close = close
        self.state = state
        self.failure = failure
        self.leave = leave
        self.raised: TransportError | None = None
        self.aborted = False

    def closed(self) -> None:
        """Close the connection (an aborted stream's may already be closing in another
        thread: what that raises here is not news)."""
        try:
            self.close()
        except Exception:
            if not self.aborted:
                raise

    def mapped(self, exc: Exception) -> TransportError | None:
        """The router's error for what reading raised (None: not a provider failure)."""
        mapped = self.failure(exc)
        if self.aborted:
            # Whatever the read raised, it raised because abort() cut the connection.
            detail = str(mapped) if mapped is not None else f"{type(exc).__name__}: {exc}"
            return ProviderError(None, True, f"stream aborted ({detail})")
        return mapped

    def fail(self, error: TransportError) -> TransportError:
        """Record ``error`` (raised again by any later ``next()``) and close the connection."""
        self.raised = error
        try:
            self.closed()
        except Exception:
            pass  # the failure is what the caller needs to hear about
        return error


def _observed(chunks: Iterator[ChunkT], reading: _Reading[ChunkT]) -> Iterator[ChunkT]:
    """The library's chunks, each observed; the router's errors for a failure, and for an
    end without the terminal event. Runs once per chunk: kept to one frame."""
    observe = reading.state.observe
    try:
        for chunk in chunks:
            try:
                observe(chunk)
            except TransportError as exc:
                raise reading.fail(exc) from None
            yield chunk
    except Exception as exc:
        if exc is reading.raised:  # observe()'s, already recorded
            raise
        mapped = reading.mapped(exc)
        if mapped is None:
            raise
        raise reading.fail(mapped) from exc
    reading.closed()
    if reading.aborted:
        raise reading.fail(ProviderError(None, True, "stream aborted"))
    if not reading.state.complete:
        raise reading.fail(truncated(reading.state.terminal))


class _Said(Generic[ChunkT]):
    """What a stream says of itself, from its vendor state: the model, the tokens, the
    content of a chunk (both streams' own, sync and asyncio)."""

    _state: StreamState[ChunkT]

    @property
    def model_id(self) -> str:
        """The model the provider says is serving (the requested one until it says)."""
        return self._state.model_id

    @property
    def input_tokens(self) -> int | None:
        return self._state.input_tokens

    @property
    def output_tokens(self) -> int | None:
        return self._state.output_tokens

    def text(self, chunk: ChunkT) -> str:
        """The content ``chunk`` carries; empty for role, start and usage chunks."""
        return self._state.text(chunk)


class ChunkStream(_Said[ChunkT]):
    """A vendor library's synchronous stream, held to ``chainclient.streams.ProviderStream``.

    It yields the library's own chunk objects; it raises the router's errors for a break, a
    malformed chunk, an error event or a content filter, and ProviderError when the stream
    ends without its terminal event. A failure is raised again by any later ``next()``.
    ``leave`` is called when the caller closes or aborts the stream, before its connection
    is closed.
    """

    def __init__(
        self,
        chunks: Iterable[ChunkT],
        response: httpx2.Response,
        close: Callable[[], object],
        state: StreamState[ChunkT],
        failure: Failure,
        *,
        leave: Callable[[], object] | None = None,
    ) -> None:
        self._reading = _Reading(close, state, failure, leave)
        self._chunks = _observed(iter(chunks), self._reading)
        self._response = response
        self._state = state

    def __iter__(self) -> Iterator[ChunkT]:
        return self._chunks

    def __next__(self) -> ChunkT:
        raised = self._reading.raised
        if raised is not None:
            raise raised
        return next(self._chunks)

    def close(self) -> None:
        """Close the connection (the router calls it whatever happens)."""
        reading = self._reading
        if reading.leave is not None:
            reading.leave()
        reading.closed()

    def abort(self) -> None:
        """Break a ``next()`` blocked in another thread, promptly, from any thread."""
        reading = self._reading
        reading.aborted = True
        if reading.leave is not None:
            reading.leave()
        shut_down(self._response)


class _AsyncReading(Generic[ChunkT]):
    """``_Reading`` for an asyncio stream (cancelling the task that awaits a chunk is how
    an asyncio caller breaks a blocked read, so there is no abort)."""

    __slots__ = ("close", "failure", "raised", "state")

    def __init__(self, close: Callable[[], Awaitable[object]], state: StreamState[ChunkT], failure: Failure) -> None:
        self.close = close
        self.state = state
        self.failure = failure
        self.raised: TransportError | None = None

    async def fail(self, error: TransportError) -> TransportError:
        self.raised = error
        try:
            await self.close()
        except Exception:
            pass  # the failure is what the caller needs to hear about
        return error


async def _aobserved(chunks: AsyncIterator[ChunkT], reading: _AsyncReading[ChunkT]) -> AsyncIterator[ChunkT]:
    """``_observed``, awaiting the library."""
    observe = reading.state.observe
    try:
        async for chunk in chunks:
            try:
                observe(chunk)
            except TransportError as exc:
                raise await reading.fail(exc) from None
            yield chunk
    except Exception as exc:
        if exc is reading.raised:
            raise
        mapped = reading.failure(exc)
        if mapped is None:
            raise
        raise await reading.fail(mapped) from exc
    await reading.close()
    if not reading.state.complete:
        raise await reading.fail(truncated(reading.state.terminal))


class AsyncChunkStream(_Said[ChunkT]):
    """A vendor library's asyncio stream, held to ``chainclient.streams.AsyncProviderStream``
    as ``ChunkStream`` holds a synchronous one."""

    def __init__(
        self,
        chunks: AsyncIterable[ChunkT],
        close: Callable[[], Awaitable[object]],
        state: StreamState[ChunkT],
        failure: Failure,
    ) -> None:
        self._reading = _AsyncReading(close, state, failure)
        self._chunks = _aobserved(aiter(chunks), self._reading)
        self._state = state

    def __aiter__(self) -> AsyncIterator[ChunkT]:
        return self._chunks

    async def __anext__(self) -> ChunkT:
        raised = self._reading.raised
        if raised is not None:
            raise raised
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        """Close the connection (the router calls it whatever happens)."""
        await self._reading.close()


__all__ = ["AsyncChunkStream", "ChunkStream", "StreamState", "truncated"]
