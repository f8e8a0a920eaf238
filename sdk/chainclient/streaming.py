"""A streamed request's bookkeeping, shared by ``Router.stream`` and ``AsyncRouter.stream``.

A stream may fall back only before its **commit point**: the first chunk handed to the
caller (``commit_after_chars=1``, the default: the first chunk that carries content), or,
by option, once that many characters are held. Until then chunks are held back, and a
failure discards them and tries the next step like any failed attempt (with the same
side-effect rules). After it, the caller holds part of one provider's answer: a failure
is ``StreamInterrupted``, never a fallback (a second answer) and never a success.

Each attempt has two bounds inside the request's one deadline: its first chunk must come
within ``first_chunk_s`` of the attempt's start (default: the step's timeout), and each
later chunk within ``idle_s`` of asking for it (default: the step's timeout). The clock
runs only while the router waits for the provider, never while the caller holds a chunk.

How a bound is enforced: ``StreamProgress.due`` is the instant the chunk being waited for
is late; it is infinite while nobody waits. The synchronous router registers the attempt
with one process-wide ``Watchdog`` thread, which calls the provider stream's ``abort()``
(a blocked read cannot be interrupted otherwise) once ``due`` passes; the asynchronous one
cancels its own wait with a timer on the event loop. Either way the late chunk, if one
comes, is not delivered. Per chunk this costs two clock reads and two stores.

A stream's commit point and bounds are the call's where it gives them, else the document's
failure policy's (``stream_bounds``); the receipt names the ones the call set
(``set_by_call``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chainclient.streams import chunk_text
from chainclient.types import FailurePolicy

logger = logging.getLogger("chainclient.router")

NOT_WAITING = math.inf
"""``StreamProgress.due`` while the router is not waiting for a chunk."""

_WATCHDOG_TICK_S = 0.05
"""How often the watchdog looks while streams are watched: a bound is enforced within this
(a re-armed attempt's new ``due`` is only seen at the next look)."""

_WATCHDOG_LINGER_S = 2.0
"""How long the watchdog keeps looking after the last stream ended before it sleeps until
the next one is watched."""


@dataclass(frozen=True)
class StreamBounds:
    """A streamed request's options: its commit point and its per-attempt bounds."""

    commit_after_chars: int = 1
    first_chunk_s: float | None = None
    idle_s: float | None = None

    def __post_init__(self) -> None:
        if self.commit_after_chars < 0:
            raise ValueError("commit_after_chars must be 0 or more (0: commit at the first chunk, content or not)")
        for name in ("first_chunk_s", "idle_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive (or None for the step's timeout)")


# Python's largest int: a stream whose policy commits it complete holds every chunk until it ends.
COMPLETE = sys.maxsize


def stream_bounds(
    policy: FailurePolicy | None, commit_after_chars: int | None, first_chunk_s: float | None, idle_s: float | None
) -> StreamBounds:
    """A stream's commit point and bounds: the call's where it gives them, else the
    document's failure ``policy``'s, else the defaults (the first chunk with content, the
    step's timeout)."""
    if policy is None:
        return StreamBounds(1 if commit_after_chars is None else commit_after_chars, first_chunk_s, idle_s)
    if commit_after_chars is None:
        commit_after_chars = COMPLETE if policy.commit == "complete" else 1
    if first_chunk_s is None and policy.first_chunk_ms is not None:
        first_chunk_s = policy.first_chunk_ms / 1000
    if idle_s is None and policy.idle_ms is not None:
        idle_s = policy.idle_ms / 1000
    return StreamBounds(commit_after_chars, first_chunk_s, idle_s)


def set_by_call(
    commit_after_chars: int | None, first_chunk_s: float | None, idle_s: float | None, retry_same_step: bool | None
) -> tuple[str, ...]:
    """The stream's arguments the call gave, which override a failure policy's settings (for
    its receipt)."""
    given = (
        ("commit_after_chars", commit_after_chars),
        ("first_chunk_s", first_chunk_s),
        ("idle_s", idle_s),
        ("retry_same_step", retry_same_step),
    )
    return tuple(name for name, value in given if value is not None)


class StreamProgress:
    """One attempt's stream so far: what is held back, what was delivered, and when the
    chunk being waited for is due."""

    __slots__ = (
        "abort",
        "chunks",
        "committed",
        "deadline",
        "due",
        "expired",
        "first_chunk_at",
        "held",
        "held_chars",
        "idle_s",
        "pull",
        "started",
        "stream",
        "text",
        "why_late",
    )

    def __init__(self, *, started: float, first_due: float, idle_s: float, deadline: float) -> None:
        self.stream: Any = None
        self.pull: Callable[[], Any] = _not_opened
        """The next chunk (the synchronous router's) or an awaitable of it (the asyncio one's)."""
        self.started = started
        self.idle_s = idle_s
        self.deadline = deadline
        self.due = first_due
        """When the chunk being waited for is late (NOT_WAITING while nobody waits)."""
        self.expired = False
        """Set (by the watchdog or the timer) when a bound passed while waiting."""
        self.why_late = ""
        self.chunks = 0
        """Chunks handed to the caller."""
        self.first_chunk_at: float | None = None
        self.committed = False
        self.held: list[Any] = []
        self.held_chars = 0
        self.text: Callable[[Any], str | None] = chunk_text
        self.abort: Callable[[], object] | None = None

    def attach(self, stream: Any, pull: Callable[[], Any]) -> None:
        """The provider's stream, once the transport opened it (see ``chainclient.streams``),
        and how the router reads it: its iterator's ``__next__`` (``__anext__``), looked up
        once, as a ``for`` loop would (an adapter's stream iterates a generator of its own)."""
        self.stream = stream
        self.pull = pull
        text = getattr(stream, "text", None)
        self.text = text if callable(text) else chunk_text
        abort = getattr(stream, "abort", None)
        self.abort = abort if callable(abort) else None

    def arm(self, now: float) -> None:
        """About to wait for a chunk after the first: due ``idle_s`` from now (or at the
        deadline)."""
        due = now + self.idle_s
        self.due = due if due < self.deadline else self.deadline

    def late(self, now: float) -> str:
        """Why the chunk waited for is late at ``now``: the bound that passed."""
        if self.due >= self.deadline and now >= self.deadline:
            return "the request's deadline passed while waiting for a chunk"
        if self.first_chunk_at is None:
            return f"no content within the first-chunk bound ({self.due - self.started:.3g}s)"
        return f"no chunk within the idle bound ({self.idle_s:g}s) after chunk {self.chunks + len(self.held)}"

    def hold(self, chunk: Any, now: float, commit_after_chars: int) -> bool:
        """Hold a chunk received before the commit point; True once it is reached (the
        wait is over), else the next chunk is due. Chunks without content (a role, a
        ``message_start``) show the caller nothing: until content comes, the first-chunk
        bound still runs, and the first chunk is the first with content."""
        self.held.append(chunk)
        text = self.text(chunk)
        size = len(text) if text is not None else commit_after_chars or 1
        if size and self.first_chunk_at is None:
            self.first_chunk_at = now
        self.held_chars += size
        if self.held_chars >= commit_after_chars:
            self.due = NOT_WAITING
            return True
        if self.first_chunk_at is not None:
            self.arm(now)
        return False

    def release(self) -> list[Any]:
        """The held chunks, to hand over at the commit point (or at a complete end); the
        driver counts each in ``chunks`` as it hands it over."""
        held, self.held = self.held, []
        self.committed = True
        return held

    @property
    def first_chunk_s(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started

    def reported(self, name: str) -> Any:
        """What the provider stream reported (``model_id``, ``input_tokens``, ...), if it did."""
        try:
            return getattr(self.stream, name, None)
        except Exception:  # a stream's property must not cost the request its outcome
            return None


def _not_opened() -> Any:
    raise RuntimeError("no stream was opened for this attempt")


class Watchdog:
    """One daemon thread per process that aborts synchronous streams whose bound passed.

    It only reads ``due`` of each watched attempt, every ``_WATCHDOG_TICK_S`` while any is
    watched (and for ``_WATCHDOG_LINGER_S`` after the last one, so a service streaming one
    request after another never has to wake it), so re-arming an attempt for each chunk is a
    store, and watching a new one is a set insertion; ``abort()`` runs in the watchdog's
    thread and breaks the blocked read."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._watched: set[StreamProgress] = set()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._asleep = False
        """Whether the thread waits without a timeout (nothing watched for a while)."""

    def watch(self, progress: StreamProgress) -> None:
        if progress.abort is None:
            return  # nothing could break its read: late chunks are refused when they come
        with self._lock:
            self._watched.add(progress)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()  # a forked child has no watchdog thread: start its own
                self._thread = threading.Thread(target=self._run, name="chainclient-stream-watchdog", daemon=True)
                self._thread.start()
            elif self._asleep:
                self._lock.notify()

    def unwatch(self, progress: StreamProgress) -> None:
        if progress.abort is None:
            return
        with self._lock:
            self._watched.discard(progress)

    def _run(self) -> None:
        last_seen = time.monotonic()
        while True:
            with self._lock:
                now = time.monotonic()
                if self._watched:
                    last_seen = now
                elif now - last_seen > _WATCHDOG_LINGER_S:
                    self._asleep = True
                    while not self._watched:
                        self._lock.wait()
                    self._asleep = False
                    now = time.monotonic()
                late = [progress for progress in self._watched if progress.due <= now and not progress.expired]
                for progress in late:
                    progress.expired = True
                    progress.why_late = progress.late(now)
                    self._watched.discard(progress)
            for progress in late:
                _abort(progress)
            with self._lock:
                self._lock.wait(_WATCHDOG_TICK_S)


def _abort(progress: StreamProgress) -> None:
    assert progress.abort is not None
    try:
        progress.abort()
    except Exception:  # an abort that fails leaves the late chunk to be refused when it comes
        logger.exception("chainclient: aborting a late stream raised")


WATCHDOG = Watchdog()


class StreamedRoute:
    """What both ``stream()`` methods return, besides the chunks: where the stream comes
    from (once committed) and, when it ended, its receipt.

    ``provider``, ``model`` and ``marking`` are None until the commit point; ``chunks`` counts
    the chunks handed over; ``result`` (a ``RouteResult`` whose ``value`` is None) and
    ``receipt`` are set when the stream completed; a stream that failed raised a
    ``RoutingError`` carrying its receipt instead."""

    provider: str | None = None
    model: str | None = None
    marking: Any = None
    result: Any = None

    def __init__(self) -> None:
        self.progress: StreamProgress | None = None

    @property
    def chunks(self) -> int:
        """Chunks handed to the caller so far."""
        return self.progress.chunks if self.progress is not None and self.progress.committed else 0

    @property
    def receipt(self) -> Any:
        """The completed stream's receipt (None until then)."""
        return self.result.receipt if self.result is not None else None

    def _commit(self, step: Any, document: Any, progress: StreamProgress) -> None:
        self.provider, self.model, self.marking = step.provider, step.model, document.marking
        self.progress = progress


__all__ = [
    "COMPLETE",
    "NOT_WAITING",
    "WATCHDOG",
    "StreamBounds",
    "StreamProgress",
    "StreamedRoute",
    "Watchdog",
    "set_by_call",
    "stream_bounds",
]
