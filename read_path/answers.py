"""The read API's answers on the wire, as the read front and the relay both send them.

Shared by the control plane's read front (``front.ReadFront``) and the relay (``relay.app``),
which answer the same reads the same way: the plain read's fast path (``plain_read``: its
headers in one pass, its request id, its 304 or 200), every other answer (``respond``,
``respond_error``: the relay's stale and degraded marks are its ``extra`` headers) and the
lifespan loop. One implementation, so that a fix to either reaches both. Nothing here imports
Django or reads a database: the relay has neither.

The plain read is the hot path of both (bench/read_throughput.py, bench/relay.py): it is one
plain function, not a coroutine, and what it looks up is bound at import.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from read_path.held import Entry, Receive
from read_path.http import error_body, matches
from read_path.request_ids import ACCEPTED_ID_BYTES, new_request_id_bytes

__all__ = [
    "EMPTY_BODY",
    "Receive",
    "Scope",
    "Send",
    "lifespan",
    "plain_read",
    "respond",
    "respond_error",
]

Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_NO_CACHE = (b"cache-control", b"no-cache")
_JSON = (b"content-type", b"application/json")
# The body message of every 304 a plain read sends (an ASGI server reads a message, it does
# not change it): the front tells its 304s from its 200s by it, for /metrics.
EMPTY_BODY: dict[str, Any] = {"type": "http.response.body", "body": b""}
_accepted_id = ACCEPTED_ID_BYTES.fullmatch


def plain_read(
    entry: Entry, headers: Iterable[tuple[bytes, bytes]]
) -> tuple[bytes | None, bytes | None, bytes, dict[str, Any], dict[str, Any]]:
    """A plain read of ``entry`` with these request headers: its Authorization and
    X-Chain-Client (None when absent), its X-Chain-Applied-Version (empty when absent), and the
    two messages of its answer, to send as they are once the caller has admitted the read.

    The answer: a 304 when If-None-Match names the entry's ETag (``EMPTY_BODY`` its body
    message), else the entry's 200; with the client's X-Request-ID when well formed, else a
    new one. Of each header the last counts, as ``dict(headers)`` would keep.

    One call for all of it, the answer made before the caller's token check: a read that fails
    the check (rare: a new client's first, a relay's token due for a check) goes the full path
    and drops it, where a second call would cost every plain read."""
    header = tag = request_id = client = None
    applied = b""
    # One pass: cheaper than ``dict(headers)`` for a client's few.
    for key, value in headers:
        if key == b"authorization":
            header = value
        elif key == b"if-none-match":
            tag = value
        elif key == b"x-request-id":
            request_id = value
        elif key == b"x-chain-client":
            client = value
        elif key == b"x-chain-applied-version":
            applied = value
    # ``request_ids.request_id_bytes``, spelled out: a call saved on every plain read.
    if request_id is None or not _accepted_id(request_id):
        request_id = new_request_id_bytes()
    etag_header = entry.etag_header
    # The client's If-None-Match is nearly always the ETag as sent: one comparison of bytes.
    if tag is not None and (tag == etag_header[1] or matches(tag.decode("latin-1"), entry.etag)):
        start = {
            "type": "http.response.start",
            "status": 304,
            "headers": [_NO_CACHE, (b"x-request-id", request_id), etag_header],
        }
        return header, client, applied, start, EMPTY_BODY
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [_NO_CACHE, (b"x-request-id", request_id), _JSON, etag_header],
    }
    return header, client, applied, start, entry.body_message


async def respond(
    send: Send,
    status: int,
    body: bytes,
    request_id: bytes,
    etag_header: tuple[bytes, bytes] | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Any answer but a plain read's: ``body`` as JSON (none on a 304), not to be cached, with
    its request id, the document's ETag and ``extra`` headers (the relay's stale and degraded
    marks, an error's)."""
    headers = [_NO_CACHE, (b"x-request-id", request_id)]
    if status != 304:
        headers.append(_JSON)
    if etag_header is not None:
        headers.append(etag_header)
    if extra:
        headers += extra
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_error(
    send: Send,
    status: int,
    message: str,
    request_id: bytes,
    *,
    auth: bool = False,
    details: dict[str, Any] | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """An error in the API's one shape (``http.error_body``): ``auth`` asks for a bearer token
    (``WWW-Authenticate``), and a 503 says when to retry."""
    headers = [*(extra or []), *([(b"www-authenticate", b"Bearer")] if auth else [])]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await respond(send, status, json.dumps(error_body(status, message, details)).encode(), request_id, extra=headers)


async def lifespan(
    receive: Receive, send: Send, start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    """ASGI's lifespan: ``start`` at the server's startup, ``stop`` at its shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
