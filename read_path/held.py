"""Chain documents held in memory, ready for the wire, and the long polls waiting on them.

Shared by the control plane's read front (``snapshot.Snapshot`` fills it from the database)
and by the relay (``relay``, filled from its upstream and its disk): both answer the same read
API from here. Nothing in this module touches Django or a database.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from presets.documents import chain_key
from presets.expiry import has_passed
from read_path.http import CHAIN_PATH, min_version, wait_seconds

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

# A query string that is ``wait=`` and a plain decimal number (nothing parse_qs would decode).
_PLAIN_NUMBER = re.compile(rb"[0-9]{1,6}(?:\.[0-9]{0,6})?")
# Long polls woken per turn of the event loop when a change reaches thousands of them.
WAKE_BATCH = 64


@dataclass(frozen=True)
class Entry:
    """One chain's document, pre-encoded for the wire."""

    name: str
    epoch: int
    version: int
    etag: str
    body: bytes
    expires_at: float | None  # Unix seconds; None for the default
    key_id: str | None = None  # the key that signed the body; None: unsigned
    etag_header: tuple[bytes, bytes] = (b"etag", b"")  # as the front sends it
    # The front's ``http.response.body`` message for a 200: sent as is by every plain read
    # (an ASGI server reads a message, it does not change it).
    body_message: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    environment: str = ""  # the chain's environment ("": a relay's, which serves one)
    # Where it is held: the snapshot's label (``environments.label``: the name alone in the
    # default environment), else ``chain_key(environment, name)``.
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", chain_key(self.environment, self.name))

    @property
    def order(self) -> tuple[int, int]:
        """Documents are ordered by (epoch, version): a raised epoch makes a restored
        database's lower versions the newer ones."""
        return (self.epoch, self.version)

    def is_expired(self, now: float) -> bool:
        return has_passed(self.expires_at, now)


def make_entry(
    *,
    name: str,
    epoch: int,
    version: int,
    etag: str,
    body: bytes,
    expires_at: float | None,
    key_id: str | None,
    environment: str = "",
    key: str = "",
) -> Entry:
    """An entry for ``body``, the document's exact bytes, tagged ``etag``, of ``environment``'s
    chain ``name`` (``""``: a relay's), held at ``key`` (empty: ``chain_key``'s)."""
    return Entry(
        name=name,
        environment=environment,
        key=key,
        epoch=epoch,
        version=version,
        etag=etag,
        body=body,
        expires_at=expires_at,
        key_id=key_id,
        etag_header=(b"etag", etag.encode()),
        body_message={"type": "http.response.body", "body": body},
    )


def _wake(waiters: list[asyncio.Future[None]], start: int = 0) -> None:
    """Wake ``waiters`` ``WAKE_BATCH`` at a time, one batch per turn of the event loop.

    Each woken poll is a task step queued on the loop, and answering it costs ~100 us. Woken
    all at once, ten thousand of them would queue ahead of everything else: the change's own
    answer to its caller (its view has just committed, in a thread), and every other request,
    would wait for the whole fleet to be answered, seconds. A batch at a time, whatever became
    ready meanwhile runs between two batches, and the fleet is answered just as fast."""
    for waiter in waiters[start : start + WAKE_BATCH]:
        if not waiter.done():
            waiter.set_result(None)
    if start + WAKE_BATCH < len(waiters):
        asyncio.get_running_loop().call_soon(_wake, waiters, start + WAKE_BATCH)


class HeldDocuments:
    """Every chain's document this process serves, by key (``chain_key``) and by read path,
    each environment's chain list's body, and the long polls waiting on each chain. Which
    document may replace which is the filler's rule (``Snapshot.put``, the relay's
    ``Documents.put``); ``hold`` applies it."""

    def __init__(self, plain_environment: str = "") -> None:
        self.entries: dict[str, Entry] = {}
        # The entries of ``plain_environment`` (the default one, which nearly every read is
        # of) by the path that reads them (``/api/v1/chains/{name}``): the front's plain reads
        # find theirs in one lookup.
        self.plain_environment = plain_environment
        self.by_path: dict[str, Entry] = {}
        self.list_body: bytes = b'{"chains":[]}'  # ``plain_environment``'s
        self.list_bodies: dict[str, bytes] = {}
        self.waiters = 0
        # Per chain, the long polls waiting on it (a future each, woken by ``hold``).
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    def hold(self, entry: Entry) -> None:
        """Serve ``entry`` for its chain from now on; the long polls waiting on the chain are
        answered unless it is the same version (the same document signed again: same ETag)."""
        current = self.entries.get(entry.key)
        self.entries[entry.key] = entry
        if entry.environment == self.plain_environment:
            self.by_path[CHAIN_PATH + entry.name] = entry
        self._rebuild_list(entry.environment)
        if current is None or current.order != entry.order:
            self.wake(entry.key)

    def drop(self, key: str) -> None:
        """Stop serving the chain held at ``key`` (it no longer exists); its long polls are
        answered."""
        entry = self.entries.pop(key, None)
        if entry is not None:
            if entry.environment == self.plain_environment:
                del self.by_path[CHAIN_PATH + entry.name]
            self._rebuild_list(entry.environment)
        self.wake(key)

    def wake(self, key: str) -> None:
        """Wake the long polls waiting on the chain held at ``key`` (each then looks at what
        it holds)."""
        waiters = self._waiting.pop(key, None)
        if waiters:
            _wake(list(waiters))

    def list_body_for(self, environment: str, chains: frozenset[str] | None = None) -> bytes:
        """The chain list of ``environment``, of ``chains`` only when given (a token bound to them)."""
        if chains is None:
            return self.list_bodies.get(environment, b'{"chains":[]}')
        return _list_body(entry.body for entry in self._sorted(environment) if entry.name in chains)

    def _sorted(self, environment: str) -> list[Entry]:
        return sorted(
            (entry for entry in self.entries.values() if entry.environment == environment), key=lambda e: e.name
        )

    def _rebuild_list(self, environment: str) -> None:
        body = self.list_bodies[environment] = _list_body(entry.body for entry in self._sorted(environment))
        if environment == self.plain_environment:
            self.list_body = body

    async def wait_for_change(
        self, key: str, etag: str, timeout: float, *, gone: asyncio.Future[Any] | None = None
    ) -> Entry | None:
        """Wait until the document held at ``key`` is no longer the one tagged ``etag``; None
        when ``timeout`` passes first, or when ``gone`` is done (the client has left)."""
        entry = self.entries.get(key)
        if entry is not None and entry.etag != etag:
            return entry
        if gone is not None and gone.done():
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        waiting = self._waiting.setdefault(key, set())
        waiting.add(waiter)

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        if gone is not None:
            gone.add_done_callback(wake)
        # The timeout wakes the waiter like a change does (what follows tells them apart): one
        # timer, where asyncio.timeout adds an object, the current task's lookup and a
        # reschedule, and wait_for a task of its own (Python 3.11), for each of the thousands of
        # long polls held at once.
        timer = loop.call_later(timeout, wake)
        self.waiters += 1
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiters -= 1
            waiting.discard(waiter)
            if gone is not None:
                gone.remove_done_callback(wake)
        entry = self.entries.get(key)
        return entry if entry is not None and entry.etag != etag else None


def _list_body(bodies: Iterable[bytes]) -> bytes:
    return b'{"chains":[' + b",".join(bodies) + b"]}"


async def departure(receive: Receive) -> asyncio.Future[Any]:
    """A future done when the client disconnects: once the whole request (a GET: one empty
    ``http.request``) has been read, which this does first, ASGI's next message is
    ``http.disconnect``. granian's ``receive`` returns a future: that one is watched as it
    is, where a coroutine (other servers) needs a task of its own, for each of the thousands
    of polls held at once. A coroutine's server that says anything else is not watched (nor
    is a request with more body): the poll then ends at its wait."""
    first = await receive()
    if first["type"] == "http.disconnect":
        left: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        left.set_result(first)
        return left
    following = receive()
    if asyncio.isfuture(following) and not first.get("more_body"):
        return following
    return asyncio.ensure_future(_client_gone(following))


async def _client_gone(following: Awaitable[MutableMapping[str, Any]]) -> None:
    """Return when ``following``, the request's next message, says the client disconnected."""
    if (await following)["type"] == "http.disconnect":
        return
    await asyncio.get_running_loop().create_future()  # never: cancelled when the poll ends


def read_query(query_string: bytes | None) -> tuple[float, tuple[int, int] | None]:
    """A chain read's long-poll ``wait`` in seconds (0 without one) and the ``min_version`` to
    serve at least (None without one); raises InvalidInput."""
    if not query_string:  # a plain read: nothing to parse
        return 0.0, None
    if query_string.startswith(b"wait=") and _PLAIN_NUMBER.fullmatch(query_string, 5):
        return wait_seconds(query_string[5:].decode("ascii")), None  # the SDK's ``?wait=55``: as parse_qs reads it
    query = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    return (
        wait_seconds(query["wait"][-1] if "wait" in query else None),
        min_version(query["min_version"][-1] if "min_version" in query else None),
    )
