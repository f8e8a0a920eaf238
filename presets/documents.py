"""The chain document (DESIGN §7 and §13), the SDK's input, and how times read everywhere.

``ChainDocument`` is the document's one schema: ``Selection.to_document`` builds it (mypy
checks the builder against it), the read path encodes it (``encode_document``) and the
OpenAPI schema is generated from it (``http_api.schema.serializer_for``, with each field's
``Help``). Field names are public contract. The audit trail's documents (history entries,
fleet status) are TypedDicts in the same way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, NewType, NotRequired, TypedDict, overload

# An RFC 3339 instant in UTC to the millisecond with a Z (``format_instant``).
Instant = NewType("Instant", str)
# An RFC 3339 time in UTC to the second with a Z (``format_time``).
Time = NewType("Time", str)


@dataclass(frozen=True)
class Help:
    """A field's description in the OpenAPI schema: ``Annotated[int, Help("...")]``."""

    text: str


class StepDocument(TypedDict):
    provider: str
    model: str
    timeout_ms: int


class MarkingDocument(TypedDict):
    degraded: bool
    note: str


class RetrySameStepDocument(TypedDict):
    max_wait_ms: Annotated[int, Help("the longest Retry-After honoured before retrying the same step (0..10000)")]


class FailurePolicyDocument(TypedDict):
    """What the SDK's routers do on a failure for the preset's callers, reviewed with the
    presets; a call's own arguments still override it."""

    commit: Annotated[
        str,
        Help(
            "first_chunk: a stream reaches the caller from its first chunk with content; complete: only once the "
            "provider's whole answer came (a stream cut or stalled before its end falls back to the next step)"
        ),
    ]
    first_chunk_ms: Annotated[int | None, Help("a stream's first chunk comes within this (null: the step's timeout)")]
    idle_ms: Annotated[int | None, Help("each later chunk within this of the one before (null: the step's timeout)")]
    retry_same_step: Annotated[
        RetrySameStepDocument | None,
        Help(
            "retry a 429, 500, 503 or 529 (or a refused connection) once on the same step, before anything reached "
            "the caller, within the request's deadline; null: never"
        ),
    ]


class DefaultChainDocument(TypedDict):
    """What the chain falls back to at the pin's ``expires_at``."""

    preset: str
    chain: list[StepDocument]
    marking: MarkingDocument
    failure_policy: NotRequired[Annotated[FailurePolicyDocument, Help("present when the default preset has one")]]


class SignatureDocument(TypedDict):
    """The control plane's signature over the whole document (``presets/signing.py``)."""

    alg: Annotated[str, Help("ed25519")]
    key_id: Annotated[str, Help("the key that signed it: manage.py signing_keys public lists the keys to trust")]
    signed_at: Instant
    value: Annotated[
        str,
        Help(
            "base64url (no padding) of the Ed25519 signature over 'chainclient-document/1' and a newline, then the "
            "document with this object's value left out as JSON with sorted keys, no spaces, non-ASCII escaped"
        ),
    ]


class DrillDocument(TypedDict):
    """A failover drill while it runs (``presets.drills``): the SDK fails ``share_bp`` of the
    requests that reach ``hop`` with ``fault``, before dispatch, from ``starts_at`` to ``ends_at``."""

    id: int
    hop: Annotated[int, Help("1-based step of chain; never the last one")]
    fault: Annotated[
        str,
        Help("server_error, rate_limited, timeout, first_chunk_late, stream_cut_before_first_chunk or invalid_answer"),
    ]
    share_bp: Annotated[int, Help("the share of requests drilled, in hundredths of a percent (1000: 10 %)")]
    services: Annotated[
        list[str],
        Help(
            "empty: every service; else sha256 hex of 'chainclient-drill/1', the id and the sha256 hex of a "
            "drilled service's token, newline-separated"
        ),
    ]
    starts_at: Instant
    ends_at: Annotated[Instant, Help("clients stop injecting at this instant on their own")]


class ChainDocument(TypedDict):
    """The chain document: what the SDK applies. Field names are public contract."""

    name: str
    environment: Annotated[str, Help("the environment whose chain this is (the token read says which)")]
    epoch: Annotated[int, Help("raised after a database restore; clients order documents by (epoch, version)")]
    version: int
    preset: str
    is_default: bool
    chain: list[StepDocument]
    marking: MarkingDocument
    updated_by: str
    reason: str
    updated_at: Instant
    expires_at: Annotated[Instant | None, Help("millisecond precision; the pin is not served from this instant on")]
    default: Annotated[DefaultChainDocument | None, Help("what the chain falls back to at expires_at")]
    failure_policy: NotRequired[
        Annotated[FailurePolicyDocument, Help("present when the served preset has one (presets file)")]
    ]
    drill: NotRequired[Annotated[DrillDocument, Help("present while a failover drill runs on the chain")]]
    signature: NotRequired[
        Annotated[SignatureDocument, Help("present once the control plane has a signing key; verify before use")]
    ]


NO_MARKING: MarkingDocument = {"degraded": False, "note": ""}


# Where a non-default environment's pages and API live: /env/<environment>/... (the read front,
# the relay and the pages alike).
ENVIRONMENT_PATH = "/env/"


def chain_key(environment: str, name: str) -> str:
    """How a chain's document is keyed where documents of several environments are held (the
    read front's snapshot, fleet status): environment and name; the name alone in a relay,
    which serves one environment (``environment`` empty)."""
    return f"{environment}/{name}" if environment else name


def split_chain_key(key: str) -> tuple[str, str]:
    """``chain_key``'s environment (empty when it names none) and name."""
    environment, _, name = key.rpartition("/")
    return environment, name


def encode_document(document: ChainDocument) -> bytes:
    """The document as the read path sends it: compact JSON."""
    return json.dumps(document, separators=(",", ":")).encode()


def etag(epoch: int, version: int) -> str:
    """A chain document's entity tag: its version, prefixed by the epoch once one was raised
    (so a client holding the same version number from before a restore is told apart)."""
    return f'"{version}"' if epoch == 0 else f'"{epoch}.{version}"'


@overload
def format_time(value: datetime) -> Time: ...
@overload
def format_time(value: None) -> None: ...
@overload
def format_time(value: datetime | None) -> Time | None: ...
def format_time(value: datetime | None) -> Time | None:
    """RFC 3339 in UTC to the second with a Z, as messages, alerts and history show times."""
    if value is None:
        return None
    return Time(value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


@overload
def format_instant(value: datetime) -> Instant: ...
@overload
def format_instant(value: datetime | None) -> Instant | None: ...
def format_instant(value: datetime | None) -> Instant | None:
    """RFC 3339 in UTC to the millisecond with a Z, as the chain document carries times.

    A pin is not served from the instant its document states: expiries are stored truncated
    to the millisecond (``to_millisecond``), so this is the exact instant."""
    if value is None:
        return None
    value = value.astimezone(UTC)
    return Instant(value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z")


def to_millisecond(value: datetime) -> datetime:
    """``value`` truncated to the millisecond, the precision documents publish."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def format_duration(value: timedelta | float) -> str:
    """A span as a tired person reads it: "3 h 12 min", "45 min", "40 s" (timedelta or
    seconds). Pages, messages and alerts all write durations this way."""
    total = value.total_seconds() if isinstance(value, timedelta) else value
    seconds = max(0, math.floor(total))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    if hours:
        return f"{hours} h"
    return f"{minutes} min"


def format_clock(value: datetime, *, now: datetime) -> str:
    """A moment in UTC: "06:03 UTC" today, "Sat 29 Nov 06:03 UTC" on another day."""
    value, now = value.astimezone(UTC), now.astimezone(UTC)
    if value.date() == now.date():
        return f"{value:%H:%M} UTC"
    return f"{value:%a %d %b %H:%M} UTC"


def format_moment(value: datetime, *, now: datetime) -> str:
    """A moment and how far it is from ``now``, as a terminal says it: "04:15 UTC (in 2 h)",
    "Sat 29 Nov 06:03 UTC (20 h ago)", "Wed 01 Jan 2031 00:00 UTC (in 365 days)"."""
    clock = format_clock(value, now=now)
    if value.astimezone(UTC).year != now.astimezone(UTC).year:
        clock = f"{value.astimezone(UTC):%a %d %b %Y %H:%M} UTC"
    span = abs(value - now)
    if span < timedelta(seconds=1):
        return f"{clock} (now)"
    distance = f"{span.days} days" if span >= timedelta(days=2) else format_duration(span)
    return f"{clock} (in {distance})" if value > now else f"{clock} ({distance} ago)"
