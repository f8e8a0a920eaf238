"""Scripted provider streams for ``Router.stream`` and ``AsyncRouter.stream`` tests, with no
socket: ``FakeStream`` and ``FakeStreams``, importable from ``chainclient.testing``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from chainclient.errors import (
    ProviderError,
)
from chainclient.fake_chains import FAKE_PROVIDERS
from chainclient.fake_providers import FakeClock
from chainclient.types import Step


class FakeStream:
    """A scripted provider stream (``chainclient.streams``): yields ``chunks``, spending
    ``first_after_s`` before the first and ``gap_s`` before each later one on the fakes'
    clock, then ends as ``end`` says: ``"complete"``, or an exception to raise (a
    ``TransportError``: ``ProviderError(None, True, "...")`` for a cut or a stream without
    its terminal event). Synchronous and asynchronous at once; ``closed`` tells whether the
    router closed it."""

    def __init__(
        self,
        chunks: Sequence[Any],
        *,
        clock: FakeClock | None,
        first_after_s: float = 0.0,
        gap_s: float = 0.0,
        end: str | Exception = "complete",
        model_id: str | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        self._chunks = list(chunks)
        self._clock = clock
        self._first_after_s = first_after_s
        self._gap_s = gap_s
        self._end = end
        self._sent = 0
        self.closed = False
        self.model_id = model_id
        self.input_tokens: int | None = tokens[0] if tokens is not None else None
        self.output_tokens: int | None = tokens[1] if tokens is not None else None

    def __iter__(self) -> FakeStream:
        return self

    def __next__(self) -> Any:
        if self._sent >= len(self._chunks):
            if isinstance(self._end, Exception):
                raise self._end
            raise StopIteration
        wait = self._first_after_s if self._sent == 0 else self._gap_s
        if self._clock is not None and wait:
            self._clock.advance(wait)
        chunk = self._chunks[self._sent]
        self._sent += 1
        return chunk

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class FakeStreams:
    """Fake streaming transports keyed by provider name, for ``Router.stream`` (as
    ``stream_transports=``) and ``AsyncRouter.stream`` (``async_transports``).

    ``streams.script("alpha", ["Hel", "lo"], gap_s=0.1)`` streams those chunks; ``end=``
    breaks the stream at its end; ``fails_with=`` makes opening it raise (an HTTP status,
    or an exception): every time, or the first ``failures`` times (then it streams).
    ``opened`` lists each stream handed to the router, in order."""

    def __init__(self, clock: FakeClock | None = None, providers: Iterable[str] = FAKE_PROVIDERS) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._scripts: dict[str, Callable[[], FakeStream]] = {}
        self.opened: list[tuple[str, FakeStream]] = []
        for name in providers:
            self.script(name, [f"{name} ", "answers"])

    def script(
        self,
        name: str,
        chunks: Sequence[Any] = (),
        *,
        first_after_s: float = 0.0,
        gap_s: float = 0.0,
        end: str | Exception = "complete",
        fails_with: int | Exception | None = None,
        failures: int | None = None,
        model_id: str | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> FakeStreams:
        opens = itertools.count()

        def open_stream() -> FakeStream:
            failing = failures is None or next(opens) < failures
            if failing and isinstance(fails_with, int) and not isinstance(fails_with, bool):
                raise ProviderError(fails_with, True, f"fake {name} failed")
            if failing and isinstance(fails_with, Exception):
                raise fails_with
            return FakeStream(
                chunks,
                clock=self.clock,
                first_after_s=first_after_s,
                gap_s=gap_s,
                end=end,
                model_id=model_id,
                tokens=tokens,
            )

        self._scripts[name] = open_stream
        return self

    @property
    def transports(self) -> dict[str, Callable[[Step, Any, float], FakeStream]]:
        return {name: self._opener(name) for name in self._scripts}

    @property
    def async_transports(self) -> dict[str, Callable[[Step, Any, float], Any]]:
        def awaitable(name: str) -> Callable[[Step, Any, float], Any]:
            opener = self._opener(name)

            async def open_stream(step: Step, request: Any, timeout_s: float) -> FakeStream:
                return opener(step, request, timeout_s)

            return open_stream

        return {name: awaitable(name) for name in self._scripts}

    @property
    def attempts(self) -> list[str]:
        """Providers whose stream was opened (or failed to open), in order."""
        with self._lock:
            return [name for name, _ in self.opened]

    def _opener(self, name: str) -> Callable[[Step, Any, float], FakeStream]:
        def open_stream(step: Step, request: Any, timeout_s: float) -> FakeStream:
            try:
                stream = self._scripts[name]()
            except Exception:
                with self._lock:
                    self.opened.append((name, FakeStream((), clock=None)))
                raise
            with self._lock:
                self.opened.append((name, stream))
            return stream

        return open_stream


__all__ = ["FakeStream", "FakeStreams"]
