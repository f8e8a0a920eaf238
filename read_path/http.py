"""The HTTP rules every interface shares: the read front applies them without Django's request
machinery, and the DRF API, the health checks and the middleware import them from here.

One error shape for every API failure (``{"error": {"code", "message", "details"}}``), ETag
matching, the long-poll ``wait`` parameter, the read-your-writes ``min_version`` parameter
and the bearer header.
"""

from __future__ import annotations

from typing import Any

from presets.documents import ENVIRONMENT_PATH
from presets.exceptions import Conflict, InvalidInput
from presets.wire import MAX_WAIT_S

_CODES = {
    400: "validation_error",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    415: "unsupported_media_type",
    429: "throttled",
    503: "unavailable",
}

# The chain reads' path (``/api/v1/chains`` and ``/api/v1/chains/{name}``), answered by the
# read front and, for what it hands on, by the API's URLconf.
CHAINS_PATH = "/api/v1/chains"
CHAIN_PATH = CHAINS_PATH + "/"  # followed by the chain's name
# Any path may name an environment first (``/env/staging/api/v1/chains/chat``, ``ENVIRONMENT_PATH``):
# the pages' own and the API's, for a person signed in; a token reads its own environment without it.


def split_environment(path: str) -> tuple[str, str]:
    """The environment a path names first (``""``: none) and the rest of the path."""
    if not path.startswith(ENVIRONMENT_PATH):
        return "", path
    environment, slash, rest = path[len(ENVIRONMENT_PATH) :].partition("/")
    return environment, slash + rest


BEARER_HELP = "use the header 'Authorization: Bearer <token>' (create a token with manage.py create_token NAME)"
# The API and the read front refuse a token with the same words.
TOKEN_REFUSED = "the token is unknown, revoked or expired (see manage.py list_tokens)"


def error_body(
    status_code: int, message: str, details: dict[str, Any] | None = None, code: str | None = None
) -> dict[str, Any]:
    """The body of every API error."""
    return {"error": {"code": code or _CODES.get(status_code, "error"), "message": message, "details": details or {}}}


def matches(if_none_match: str | None, wanted: str) -> bool:
    """Whether the client already holds the document with entity tag ``wanted`` (weak or
    strong, any in a list)."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == wanted or candidate == "*":
            return True
    return False


def wait_seconds(raw: str | None) -> float:
    """The long-poll ``wait`` parameter in seconds (0 when absent)."""
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        raise InvalidInput("wait", f"{raw!r} is not a number of seconds; use 0..{MAX_WAIT_S}") from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidInput("wait", f"must be 0..{MAX_WAIT_S} seconds, got {raw}")
    return wait


def min_version(raw: str | None) -> tuple[int, int] | None:
    """The ``min_version`` parameter as the (epoch, version) a read must serve at least: ``N``,
    or ``E.N`` (a change's ETag, quotes optional); None when absent. Raises InvalidInput."""
    if raw is None:
        return None
    epoch, dot, version = raw.strip().strip('"').rpartition(".")
    if not dot:
        epoch = "0"
    if not (epoch.isdigit() and version.isdigit() and epoch.isascii() and version.isascii()):
        raise InvalidInput(
            "min_version",
            f"{raw!r} is not a version: use the version (or the ETag) a change answered with, e.g. 8 or 1764000000.8",
        )
    return (int(epoch), int(version))


def not_served_yet(name: str, served: tuple[int, int], minimum: tuple[int, int]) -> Conflict:
    """The refusal of a read whose ``min_version`` the chain has not reached, even in the
    database: no change made that version (yet)."""
    return Conflict(
        f"chain {name!r} is at {_label(served)}: it has no {_label(minimum)} (min_version) yet; "
        "pass the version a change answered with",
        details={"chain": name, "min_version": _label(minimum), "version": served[1], "epoch": served[0]},
    )


def _label(order: tuple[int, int]) -> str:
    return f"v{order[1]}" if order[0] == 0 else f"v{order[1]} of epoch {order[0]}"


def bearer_token(header: str | bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for any other scheme or
    an empty token. Bytes are read as latin-1, as ASGI servers pass headers."""
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, raw = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    return raw.strip()
