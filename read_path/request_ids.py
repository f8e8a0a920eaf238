"""Request ids (the ``X-Request-ID`` header): a client's when well formed, else one made here.

Shared by the read front, Django's middleware (through ``request_context``) and the relay;
nothing here imports Django.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets

# Letters, digits and ``._:+/=-``, at most 64: UUIDs, hex or base64 ids and the like. Anything
# else (spaces, quotes, control characters, a 4 kB value) is replaced, never logged.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:+/=-]{1,64}")
ACCEPTED_ID_BYTES = re.compile(_ACCEPTED.pattern.encode())  # the same rule, for headers as bytes


def _new_id_source() -> None:
    global _id_numbers
    # 64 random bits, the first set (so every id has 32 hex digits), then a 64-bit counter.
    _id_numbers = itertools.count((secrets.randbits(64) | 1 << 63) << 64)


_id_numbers = itertools.count()
_new_id_source()
os.register_at_fork(after_in_child=_new_id_source)


def request_id_from(header: str | bytes | None) -> str:
    """The request's id: ``header`` (an incoming ``X-Request-ID``) when it is well formed,
    else a new random one (32 hex digits). Bytes are read as latin-1, as ASGI servers pass
    headers."""
    if header:
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        if _ACCEPTED.fullmatch(header):
            return header
    # An id, not a secret: unique per process (a random prefix, drawn again in a forked child)
    # and a counter, cheaper than any random draw per read on the front.
    return f"{next(_id_numbers):x}"


def new_request_id_bytes() -> bytes:
    """A new id, as ``request_id_from`` makes them, as the bytes of a header (the plain reads
    of the read front and the relay)."""
    return b"%x" % next(_id_numbers)


def request_id_bytes(header: bytes | None) -> bytes:
    """``request_id_from`` for a relay's request, as the bytes of a header: ``header`` (its
    X-Request-ID) when well formed, else a new id."""
    if header is None or not ACCEPTED_ID_BYTES.fullmatch(header):
        return new_request_id_bytes()
    return header
