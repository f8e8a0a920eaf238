"""A thin ASGI front for the services' hot path: ``GET /api/v1/chains[/{name}]`` with a token.

Django's ASGI handler costs about 7x a raw ASGI callable per request (bench/README.md), and
every SDK instance polls this path. So token-authenticated reads of chain documents, long
polls included, are answered here from the per-process ``Snapshot``; everything else (writes,
history, sessions, the UI, the admin) goes to Django unchanged. The front shares Django's
code for what matters: tokens are held by the snapshot (``tokens.TokenSet``), documents come from
``Selection.to_document``, expiry from ``services.revert_expired_and_read``, and errors, ETag
matching and the bearer header from ``read_path.http`` (which the DRF API uses too). It shares
with the relay how its answers go on the wire, the plain read's included (``read_path.answers``).

Most reads are plain (a token already seen live, a chain with no pin due, no long poll): they
are answered first, in ``__call__`` itself, in a few dictionary lookups; the rest go through
``_answer``, which applies the same rules and everything else.

Each read it answers gets a request id (``request_context``: the ``X-Request-ID`` header and
the log records' ``request_id``) and is timed by route for /metrics; a held long poll's wait
is timed apart (``counters.front_holds``). All of it is kept in memory on the hot path and
written once a second, with the read counts.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from math import inf
from typing import Any

from django.conf import settings

from audit.fleet_recorder import FleetRecorder, recorder
from presets import environments
from presets.exceptions import InvalidInput
from presets.expiry import has_passed
from read_path import counters, request_context
from read_path.answers import (
    EMPTY_BODY,
    Receive,
    Scope,
    Send,
    lifespan,
    plain_read,
    respond,
    respond_error,
)
from read_path.held import Entry, departure, read_query
from read_path.http import (
    BEARER_HELP,
    CHAIN_PATH,
    CHAINS_PATH,
    TOKEN_REFUSED,
    bearer_token,
    matches,
    not_served_yet,
    split_environment,
)
from read_path.request_context import (
    CHAIN_ROUTE,
    CHAINS_ROUTE,
    RequestContext,
    access_log,
    log_access,
    reads_log,
)
from read_path.request_ids import request_id_from
from read_path.snapshot import Snapshot
from read_path.tokens import LiveToken
from read_path.worker_threads import in_worker_thread

log = logging.getLogger(__name__)

# Django's ASGIHandler types its arguments more narrowly than the ASGI spec: any callable.
ASGIApp = Callable[..., Awaitable[None]]

PREFIX = CHAINS_PATH
_NAME_AT = len(CHAIN_PATH)
FLEET_FLUSH_S = 1.0
# A read arriving while the process is still loading its snapshot (tokens and documents)
# waits this long for it, then is answered 503: the database may be down.
STARTUP_WAIT_S = 5.0
# A read with ``min_version`` ahead of this process's snapshot waits this long for the
# change's notification (it takes milliseconds), then reads the chain from the database.
MIN_VERSION_WAIT_S = 1.0

_EXPIRY_UNAVAILABLE = (
    "this chain's pin has expired and the control plane's database is unavailable to revert it; retry shortly"
)
BEARERS_MAX = 10_000
_UNPARSED: Any = object()
# The duration labels of the plain reads (``__call__``).
_PLAIN_200 = (CHAIN_ROUTE, "GET", 200)
_PLAIN_304 = (CHAIN_ROUTE, "GET", 304)
_BOUNDS = counters.front_durations.bounds
_FIRST_BOUND = _BOUNDS[0]
_clock = time.perf_counter


class ReadFront:
    """Answer token-authenticated chain reads from the snapshot; hand the rest to Django."""

    def __init__(
        self,
        django_app: ASGIApp,
        snapshot: Snapshot | None = None,
        fleet: FleetRecorder | None = None,
        on_flush: Sequence[Callable[[], None]] = (),
    ) -> None:
        """``on_flush``: more of this process's figures to write for /metrics once a second
        (the project's wiring passes the database pool's, which the read path cannot see)."""
        self.django_app = django_app
        self.snapshot = snapshot or Snapshot()
        self.fleet = fleet or recorder
        self.on_flush = tuple(on_flush)
        self._starting: asyncio.Task[None] | None = None
        self._ready = False
        self._plain_reads = False  # whether __call__ answers plain reads itself: once loaded
        self._plain_200 = counters.front_durations.row(_PLAIN_200)
        self._plain_304 = counters.front_durations.row(_PLAIN_304)
        # Authorization header -> its bearer token (None: not one): parsed once per client.
        self._bearers: dict[bytes, str | None] = {}
        # Held long polls are bounded apart from everything else the process serves.
        self.max_held: int = settings.LONG_POLL_MAX_HELD
        self._not_held = 0
        self._not_held_logged = -inf
        self._flusher: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        if self._starting is None:
            # Started by the lifespan or by the first read; the tasks started here outlive
            # that read, so they start outside its context (their log lines name no request).
            loop = asyncio.get_running_loop()
            self._starting = loop.create_task(self._start_once(), context=contextvars.Context())
        await asyncio.shield(self._starting)

    async def _start_once(self) -> None:
        await self.snapshot.start()
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_periodically())
        self._ready = True
        self._plain_reads = not reads_log.isEnabledFor(logging.INFO)

    async def _flush_periodically(self) -> None:
        """Once a second, off the request path: read counts to the metrics files and who
        read what to fleet status."""
        while True:
            await asyncio.sleep(FLEET_FLUSH_S)
            try:
                not_held, self._not_held = self._not_held, 0
                counters.flush_front(waiters=self.snapshot.waiters, not_held=not_held)
                for flush in self.on_flush:
                    flush()
            except Exception as exc:  # noqa: BLE001 - metrics must never stop the front
                log.warning("metrics: flush failed: %s", exc)
            try:
                await self.snapshot.tokens.record_use()
            except Exception as exc:  # noqa: BLE001 - a token's last use is best effort
                log.warning("tokens: recording use failed: %s", exc)
            try:
                await self.flush_fleet()
            except Exception as exc:  # noqa: BLE001 - fleet status is best effort
                log.warning("fleet status: flush failed: %s", exc)

    async def flush_fleet(self) -> None:
        """Write what the reads noted for fleet status (``FleetRecorder.note``): taken here, on
        the event loop's thread that notes them, parsed and written in a worker thread."""
        noted = self.fleet.take_noted()
        if noted or self.fleet.has_pending:
            await in_worker_thread(self.fleet.flush)(noted)

    async def stop(self) -> None:
        self._starting = None
        self._ready = self._plain_reads = False
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        await self.snapshot.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Most reads are plain: a token this process has seen live (``TokenSet.by_header``),
        # a chain whose pin, if any, has not expired, no long poll (no query: the SDK's polls
        # when it does not long-poll, and any other client's reads), no access line
        # (ACCESS_LOG_READS off, as read at start). They are answered first, here, in a few dictionary lookups, with no
        # coroutine, request context or log record of their own (nothing logs meanwhile);
        # every other request falls through to ``_answer`` (which does the same and the rest)
        # or to Django. ``_token_read``'s rule, ``TokenSet.use`` and ``Durations.observe`` are
        # spelled out here: each call saved is a percent or two of a plain read's time under
        # granian (bench/README.md). The headers and the answer are the relay's too: one call
        # (``answers.plain_read``).
        # A query (a long poll's ``?wait=``, ``min_version``) is never plain: not even looked at
        # here, so a held poll keeps nothing of this attempt while it waits.
        if self._plain_reads and scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            snapshot = self.snapshot
            # Keyed by the whole path: one lookup says it is a chain read, and of which chain.
            entry = snapshot.by_path.get(scope["path"])
            if entry is not None:
                started = _clock()
                header, client, applied, start, body = plain_read(entry, scope["headers"])
                if header is not None:
                    tokens = snapshot.tokens
                    token = tokens.by_header.get(header)
                    if not (
                        token is None
                        or has_passed(entry.expires_at, now := time.time())
                        or has_passed(token.expires_at, now)
                        # A token of another environment, or bound to other chains: ``_read``.
                        or token.environment != entry.environment
                        or (token.chains is not None and entry.name not in token.chains)
                    ):
                        tokens.used.add(token.pk)
                        if client is not None:  # an SDK instance: fleet status (checked at the flush)
                            self.fleet.note(entry.key, client, applied, token.pk)
                        await send(start)
                        await send(body)
                        row = self._plain_304 if body is EMPTY_BODY else self._plain_200
                        seconds = _clock() - started
                        row[0] += seconds
                        # Nearly every plain read falls in the first bucket: one comparison.
                        row[1 if seconds <= _FIRST_BOUND else 1 + bisect_left(_BOUNDS, seconds)] += 1
                        return
                    # A token read all the same (``_token_read``).
                    await self._answer(scope, receive, send, scope["path"], dict(scope["headers"]))
                    return
        headers = _token_read(scope)
        if headers is not None:
            read = self._answer(scope, receive, send, scope["path"], headers)
            del headers  # the read's alone: it lets them go before it holds a long poll
            await read
        elif scope["type"] == "lifespan":
            await lifespan(receive, send, self._start, self.stop)
        else:
            await self.django_app(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, path: str, headers: dict[bytes, bytes]) -> None:
        """One token read: its request id in the answer and in every log record meanwhile;
        its time in /metrics and in the access log."""
        started = time.perf_counter()
        answer = _Answer(send, request_id_from(headers.get(b"x-request-id")), started)
        context = request_context.current.set(answer)
        try:
            # The headers are the read's alone: it lets them go before it holds a long poll
            # (some 400 bytes less for each of the thousands held).
            environment, chains_path = split_environment(path)
            read = self._read(scope, receive, answer, environment, chains_path[len(PREFIX) + 1 :], headers)
            del headers
            await read
            if not answer.status:
                return  # a long poll whose client left: nothing was answered
            seconds = time.perf_counter() - started
            route = CHAINS_ROUTE if chains_path == PREFIX else CHAIN_ROUTE
            # A held long poll's wait is the client's choice, not the front's work: it is
            # timed on its own (controlplane_long_poll_hold_seconds).
            held = answer.held
            counters.front_durations.observe((route, "GET", answer.status), seconds - (held or 0.0))
            if held is not None:
                counters.front_holds.observe((answer.status,), held)
            line = reads_log if answer.status < 400 else access_log
            if line.isEnabledFor(logging.INFO):
                log_access(
                    method="GET",
                    route=route,
                    path=path,
                    status=answer.status,
                    seconds=seconds,
                    held_seconds=held,
                    logger=line,
                )
        finally:
            request_context.current.reset(context)

    async def _read(
        self, scope: Scope, receive: Receive, send: _Answer, asked: str, name: str, headers: dict[bytes, bytes]
    ) -> None:
        """A token read of chain ``name`` (empty: the list) of environment ``asked`` (empty: the
        token's own)."""
        header = headers[b"authorization"]
        raw = self._bearers.get(header, _UNPARSED)
        if raw is _UNPARSED:
            if len(self._bearers) >= BEARERS_MAX:
                self._bearers.clear()  # bounded memory against floods of random headers
            raw = self._bearers[header] = bearer_token(header)
        if raw is None:
            await _error(send, 401, BEARER_HELP, auth=True)
            return
        # From memory when the process holds the token (every read but a new token's first).
        valid = self.snapshot.tokens.known(raw) if self._ready else None
        try:
            if valid is None:
                if not self._ready:
                    await asyncio.wait_for(self._start(), STARTUP_WAIT_S)
                valid = await self.snapshot.tokens.is_valid(raw)
        except Exception:  # noqa: BLE001 - the database is down: the snapshot cannot load, or the token is new
            await _error(send, 503, "the control plane's database is unavailable; retry shortly")
            return
        if not valid:
            await _error(send, 401, TOKEN_REFUSED, auth=True)
            return
        tokens = self.snapshot.tokens
        tokens.remember(header, raw)  # the next read of this header is plain
        live = tokens.live(raw)
        # Few names of its own: a held long poll keeps this frame, a slot a name, while it waits.
        refused = _refusal(live, asked, name)
        if refused is not None:
            await _error(send, refused[0], refused[1], auth=refused[0] == 401, details=refused[2])
            return
        assert live is not None  # refused above
        asked = asked or live.environment  # from here on: the environment read
        if not name:
            try:
                await self._expire_due(time.time())
            except Exception:  # noqa: BLE001 - the database is down: see _live
                await _error(send, 503, _EXPIRY_UNAVAILABLE)
                return
            await _respond(send, 200, self.snapshot.list_body_for(asked, live.chains))
            return
        key = environments.label(asked, name)

        try:
            wait, minimum = read_query(scope.get("query_string"))
        except InvalidInput as exc:
            await _error(send, 400, exc.message, details=exc.details)
            return
        entry = self.snapshot.entries.get(key)
        if entry is not None and entry.expires_at is not None:  # ``_live`` when it may have to act
            try:
                entry = await self._live(key)
            except Exception:  # noqa: BLE001 - the database is down: see _live
                await _error(send, 503, _EXPIRY_UNAVAILABLE)
                return
        if entry is None:
            await _error(send, 404, self._unknown(name, asked), details={"chain": name})
            return
        if minimum is not None and entry.order < minimum:
            try:
                entry = await self._at_least(key, entry, minimum)
            except Exception:  # noqa: BLE001 - the database is down: the version cannot be checked
                await _error(send, 503, "the control plane's database is unavailable; retry shortly")
                return
            if entry.order < minimum:
                refusal = not_served_yet(name, entry.order, minimum)
                await _error(send, 409, refusal.message, details=refusal.details)
                return
        # Fleet status records the instance as its request arrives: a held long poll returns
        # only at the next change, and the version it reports is the one it runs now. Noted as
        # it came (``FleetRecorder.note``): whether it is a valid identity is checked at the
        # flush, once per instance and version, not on every poll; its row counts against
        # the token's cap.
        if b"x-chain-client" in headers:
            self.fleet.note(
                key,
                headers[b"x-chain-client"],
                headers.get(b"x-chain-applied-version", b""),
                live.pk,
            )
        tag = headers.get(b"if-none-match")
        if_none_match = tag.decode("latin-1") if tag is not None else ""
        del headers  # not held with the poll (``_answer``)
        if wait and matches(if_none_match, entry.etag) and self._may_hold():
            held_since = time.perf_counter()
            # A client that leaves (an instance stopped, a fleet restarted) frees its poll at
            # once, not at the end of its wait.
            gone = await departure(receive)
            try:
                waited = await self._wait(key, entry, wait, gone)
            except Exception:  # noqa: BLE001 - the database is down: see _live
                await _error(send, 503, _EXPIRY_UNAVAILABLE)
                return
            finally:
                gone.cancel()
                send.held = time.perf_counter() - held_since
            if waited is None:
                return  # the client left: nobody to answer
            entry = waited
        if matches(if_none_match, entry.etag):
            await _respond(send, 304, b"", entry.etag_header)
        else:
            await _respond(send, 200, entry.body, entry.etag_header)

    def _unknown(self, name: str, environment: str) -> str:
        """A 404's words: the environment named when there are several."""
        if not environments.several():
            return f"unknown chain {name!r}"
        return f"unknown chain {name!r} in {environment}"

    def _may_hold(self) -> bool:
        """Whether one more long poll may be held (``LONG_POLL_MAX_HELD``); when not, it is
        answered at once, counted, and said once a minute."""
        if self.snapshot.waiters < self.max_held:
            return True
        self._not_held += 1
        now = time.monotonic()
        if now - self._not_held_logged >= 60:
            self._not_held_logged = now
            log.warning(
                "long polls: this process holds %d, its most (LONG_POLL_MAX_HELD); answering more at once "
                "(those instances poll at their interval): raise LONG_POLL_MAX_HELD with WEB_MAX_REQUESTS, "
                "or add web processes",
                self.snapshot.waiters,
            )
        return False

    async def _live(self, name: str) -> Entry | None:
        """The chain's entry, its pin reverted if it has expired. Raises when the revert cannot
        reach the database: an expired pin is never served, not even during an outage."""
        entry = self.snapshot.entries.get(name)
        if entry is not None and entry.is_expired(time.time()):
            try:
                entry = await self.snapshot.expire(name)  # reverts it, as the Django path would
            except Exception as exc:
                log.warning(
                    "chain %s: its pin expired and the revert failed (%s); answering 503", name, exc.__class__.__name__
                )
                raise
        return entry

    async def _expire_due(self, now: float) -> None:
        """Revert every expired pin in the snapshot (raises like ``_live``)."""
        expired = [name for name, entry in self.snapshot.entries.items() if entry.is_expired(now)]
        for name in expired:
            await self._live(name)

    async def _at_least(self, name: str, entry: Entry, minimum: tuple[int, int]) -> Entry:
        """The chain's entry once it is ``minimum`` or newer (read-your-writes: a change made
        through another process reaches this one's snapshot within milliseconds); after
        ``MIN_VERSION_WAIT_S``, read from the database (what it has may still be older: the
        version was never made)."""
        deadline = time.monotonic() + MIN_VERSION_WAIT_S
        while entry.order < minimum:
            left = deadline - time.monotonic()
            if left <= 0:
                return await self.snapshot.reload(name) or entry
            entry = await self.snapshot.wait_for_change(name, entry.etag, left) or entry
        return await self._live(name) or entry

    async def _wait(self, name: str, held: Entry, wait: float, gone: asyncio.Future[Any]) -> Entry | None:
        """Hold a long poll for the document tagged ``held.etag`` until the chain's document
        changes, its pin expires (answered at once with the revert, whoever writes it) or
        ``wait`` seconds pass (then the held entry comes back: a 304); None when the client
        leaves first (``gone``)."""
        deadline = time.monotonic() + wait
        entry = held
        while True:
            left = deadline - time.monotonic()
            if entry.expires_at is not None:
                left = min(left, entry.expires_at - time.time())
            if left <= 0:
                return await self._live(name) or entry
            changed = await self.snapshot.wait_for_change(name, held.etag, left, gone=gone)
            if changed is not None:
                return changed
            if gone.done():
                return None
            entry = await self._live(name) or entry
            if entry.etag != held.etag or time.monotonic() >= deadline:
                return entry


def _refusal(live: LiveToken | None, asked: str, name: str) -> tuple[int, str, dict[str, Any] | None] | None:
    """Why a token read is refused (status, words, details), or None: the token revoked since
    its check (401), an unknown environment named (404, as Django answers such a path), or one
    the token may not read, or a chain it is not bound to (403)."""
    if live is None:  # revoked between the check and now (a reload): as if it were never live
        return 401, TOKEN_REFUSED, None
    if asked and asked not in environments.names():
        unknown = environments.unknown(asked)
        return 404, unknown.message, unknown.details
    environment = asked or live.environment
    refused = live.refusal(environment, name or None)
    if refused is None:
        return None
    return 403, refused, {"environment": environment, **({"chain": name} if name else {})}


def answers_itself(scope: Scope) -> bool:
    """Whether the front answers this request itself: a GET of the chain list or of one
    chain with an Authorization header (a token read, long polls included); everything else
    is Django's. The project's wiring traces the two apart by it (controlplane/telemetry.py)."""
    return _token_read(scope) is not None


def _token_read(scope: Scope) -> dict[bytes, bytes] | None:
    """A token read's headers (``answers_itself``), else None; run for every request."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    path: str = scope["path"]
    if path != PREFIX and not (path.startswith(CHAIN_PATH) and "/" not in path[_NAME_AT:]):
        environment, path = split_environment(path)
        if not environment or (path != PREFIX and not (path.startswith(CHAIN_PATH) and "/" not in path[_NAME_AT:])):
            return None
    headers = dict(scope["headers"])
    return headers if b"authorization" in headers else None


class _Answer(RequestContext):
    """One read the front answers: the request (its id for the header and the log records)
    and what /metrics and the access line need of its answer: the status, and how long it
    was held waiting for a change (a long poll)."""

    __slots__ = ("held", "send", "status")

    def __init__(self, send: Send, request_id: str, started: float) -> None:
        self.request_id = request_id
        self.started = started
        self.send = send
        self.status = 0
        self.held: float | None = None


async def _respond(answer: _Answer, status: int, body: bytes, etag_header: tuple[bytes, bytes] | None = None) -> None:
    answer.status = status  # for /metrics and the access line
    await respond(answer.send, status, body, answer.request_id.encode(), etag_header)


async def _error(
    answer: _Answer, status: int, message: str, *, auth: bool = False, details: dict[str, Any] | None = None
) -> None:
    answer.status = status
    await respond_error(answer.send, status, message, answer.request_id.encode(), auth=auth, details=details)
