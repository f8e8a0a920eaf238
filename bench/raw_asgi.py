"""The ceiling for bench/read_throughput.py: a raw ASGI callable answering a chain read.

It does the least a correct answer needs (the document and its ETag, or a 304 when the
request's If-None-Match holds it, with the same headers the read front sends) and nothing a
real control plane must (no token check, no snapshot, no metrics, no request id). Serve it with
the same server and workers as the front: `granian --interface asgi bench.raw_asgi:application`.
RAW_ASGI_DOCUMENT names a file holding the body to send (the bench passes the front's own
answer, so both send the same bytes); RAW_ASGI_ETAG its entity tag.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DOCUMENT = Path(os.environ["RAW_ASGI_DOCUMENT"]).read_bytes() if "RAW_ASGI_DOCUMENT" in os.environ else b"{}"
ETAG = os.environ.get("RAW_ASGI_ETAG", '"1"').encode()
_OK = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"cache-control", b"no-cache"),
        (b"x-request-id", b"0123456789abcdef0123456789abcdef"),
        (b"content-type", b"application/json"),
        (b"etag", ETAG),
    ],
}
_NOT_MODIFIED = {
    "type": "http.response.start",
    "status": 304,
    "headers": [
        (b"cache-control", b"no-cache"),
        (b"x-request-id", b"0123456789abcdef0123456789abcdef"),
        (b"etag", ETAG),
    ],
}
_BODY = {"type": "http.response.body", "body": DOCUMENT}
_EMPTY = {"type": "http.response.body", "body": b""}


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    for name, value in scope["headers"]:
        if name == b"if-none-match" and value == ETAG:
            await send(_NOT_MODIFIED)
            await send(_EMPTY)
            return
    await send(_OK)
    await send(_BODY)
