"""Change notifications: how every web process learns at once that a chain changed.

The sender is a receiver of ``presets.events.selection_changed`` (connected in
``PresetsConfig.ready``): on PostgreSQL it NOTIFYs inside the change's transaction, so the
notification is delivered when (and only if) the change commits. It carries the new document
(well under NOTIFY's 8,000 bytes), so no web process has to read it back. The listener holds
one LISTEN connection per process and hands each payload to the snapshot. Other databases
have no NOTIFY: their snapshots poll versions instead.

The LISTEN connection is made from the same settings as Django's own connections (every libpq
parameter of DATABASE_URL: ``sslmode``, ``sslrootcert``, ``options``...), or from
LISTEN_DATABASE_URL when set: LISTEN needs a session of its own, which a transaction pooler
(PgBouncer ``pool_mode=transaction``) does not keep, while NOTIFY works through one. After
each connect the listener checks that a NOTIFY sent on the ordinary connection arrives on the
LISTEN connection; when it does not, or there is no LISTEN connection, the process polls and
says so: one WARNING line, and ``/readyz`` (``state``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from contextlib import aclosing, suppress
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from django.conf import settings
from django.db import connection, connections

from presets import statements
from presets.documents import ChainDocument
from presets.models import Selection
from presets.signing import sign
from read_path.worker_threads import in_worker_thread

log = logging.getLogger(__name__)

CHANGE_CHANNEL = "chain_changed"
# A service token was created, revoked, changed or deleted: every read front reloads its set.
TOKENS_CHANNEL = "tokens_changed"
# The self-check's NOTIFY is delivered within milliseconds when LISTEN works; this leaves
# room for a loaded database.
SELF_CHECK_S = 3.0
# After a failed self-check the process polls, and checks again this often (a pooler in
# front does not go away by itself, but a check that failed on a slow moment should not
# leave the process polling for good).
RECHECK_S = 60.0
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 10.0

Mode = Literal["starting", "listen", "polling"]


@dataclass(frozen=True)
class State:
    """How this process's snapshot learns of changes, as ``/readyz`` reports it."""

    mode: Mode
    detail: str = ""


_state: State | None = None


def state() -> State | None:
    """This process's change notifications; None when it runs no read front (a WSGI process,
    a Celery worker, a test client): it then holds no long polls."""
    return _state


def set_state(new: State | None, *, warn: bool = True, log_line: str = "") -> None:
    """Record how changes reach this process (``/readyz`` shows it). Falling back to polling
    logs one WARNING (``log_line``, which may name hosts, or else the detail), unless not
    ``warn``; LISTEN working again logs one INFO line."""
    global _state
    previous, _state = _state, new
    if new is None or previous == new:
        return
    line = log_line or new.detail
    if new.mode == "polling" and ((previous is not None and previous.mode == "polling") or not warn):
        log.debug("change notifications: still polling: %s", line)
    elif new.mode == "polling":
        log.warning("change notifications: polling instead of LISTEN: %s", line)
    elif new.mode == "listen" and (previous is None or previous.mode != "listen"):
        log.info("change notifications: %s", line)


# --- the sender ---------------------------------------------------------------------------


def announce_change(sender: Any, *, selection: Selection, epoch: int | None = None, **_: Any) -> None:
    """Tell every web process that ``selection``'s chain changed (a signal receiver)."""
    if connection.vendor != "postgresql":
        return
    # Sent with the change's own writes when it makes them together (presets/statements.py).
    statements.execute("SELECT pg_notify(%s, %s)", [CHANGE_CHANNEL, encode_payload(selection, epoch=epoch)])


def announce_tokens_changed(sender: Any, **_: Any) -> None:
    """Tell every web process that the service tokens changed (a ``post_save`` and
    ``post_delete`` receiver for ``ServiceToken``): sent in the change's transaction, so it
    arrives when (and only if) the change commits. Use (``last_used_at``) is written with
    ``update()``, which sends no signal: reads never announce anything."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [TOKENS_CHANNEL])


def encode_payload(selection: Selection, *, epoch: int | None) -> str:
    return json.dumps(
        {
            "chain": selection.chain.name,
            "environment": selection.chain.environment,
            "version": selection.version,
            "document": sign(selection.to_document(epoch=epoch)),
            "expires_at_ts": selection.expires_at_ts,
        },
        separators=(",", ":"),
    )


def decode_payload(payload: str) -> tuple[ChainDocument, float | None]:
    """The document and its pin's expiry in Unix seconds; raises ValueError, KeyError or
    TypeError on a payload this release did not send."""
    change = json.loads(payload)
    return change["document"], change["expires_at_ts"]


# --- the LISTEN connection's settings -----------------------------------------------------


def connection_params(settings_dict: dict[str, Any]) -> dict[str, str]:
    """The libpq connection parameters of a Django database setting: what Django's PostgreSQL
    backend connects with (``get_connection_params``: NAME, USER, PASSWORD, HOST, PORT and
    every OPTIONS entry), less what is Django's or psycopg's rather than libpq's (the pool,
    the isolation level, server-side binding, the cursor factory, adapters, prepared
    statements)."""
    import psycopg
    from django.db.backends.postgresql.base import DatabaseWrapper

    complete = {"NAME": "", "USER": "", "PASSWORD": "", "HOST": "", "PORT": "", "TIME_ZONE": None, **settings_dict}
    complete["OPTIONS"] = dict(settings_dict.get("OPTIONS") or {})
    params = DatabaseWrapper(complete, alias="listen").get_connection_params()
    libpq = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    return {key: str(value) for key, value in params.items() if key in libpq and value is not None}


def listen_settings() -> tuple[dict[str, Any], str]:
    """The LISTEN connection's database setting and the variable it comes from:
    LISTEN_DATABASE_URL when set, else Django's own (DATABASE_URL)."""
    default = connections["default"].settings_dict
    override = getattr(settings, "LISTEN_DATABASE", None)
    if not override:
        return default, "DATABASE_URL"
    keys = ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    return {**default, **{key: override[key] for key in keys}}, "LISTEN_DATABASE_URL"


def conninfo_for(settings_dict: dict[str, Any]) -> str:
    """A database setting's libpq connection string (it holds the password: never log it)."""
    import psycopg

    return psycopg.conninfo.make_conninfo("", **connection_params(settings_dict))


def _where(conninfo: str, source: str) -> str:
    """Where a connection goes, for log lines (no password; /readyz does not name hosts)."""
    import psycopg

    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    host = params.get("host") or "the local socket"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname', '')} ({source})"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or exc.__class__.__name__


# --- the listener -------------------------------------------------------------------------


class Follower(Protocol):
    """What the listener feeds (the per-process ``Snapshot``)."""

    async def catch_up(self) -> None: ...

    async def notified(self, payload: str) -> None: ...

    async def tokens_changed(self) -> None: ...


async def listen(follower: Follower, *, polling_every: float) -> None:
    """Hold a LISTEN connection for ever, reconnecting with backoff; after each (re)connect,
    check that it receives, then catch up with the changes made while nobody was listening.
    ``polling_every`` is the snapshot's version check, which serves while this cannot."""
    import psycopg

    settings_dict, source = listen_settings()
    try:
        conninfo = conninfo_for(settings_dict)
    except Exception as exc:  # noqa: BLE001 - Django's own connections fail the same way, and say so
        set_state(State("polling", f"the LISTEN connection's settings ({source}) are unusable: {_one_line(exc)}"))
        return
    where = _where(conninfo, source)
    # A channel of this process's own: other processes' checks do not reach it.
    check_channel = f"listen_check_{os.getpid()}_{secrets.token_hex(4)}"
    polling = f"until then long polls wake at the version check every {polling_every:g} s"
    delay = RECONNECT_FIRST_S
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            async with conn:
                # A server that stops answering (its processes stopped, a network path that
                # stops forwarding: the bytes are still acknowledged, so TCP notices nothing)
                # would hold these statements for ever: each has DATABASE_STATEMENT_TIMEOUT.
                answer_within(conn, statement_deadline())
                await conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                await conn.execute(f"LISTEN {TOKENS_CHANNEL}")
                await conn.execute(f"LISTEN {check_channel}")
                delay = RECONNECT_FIRST_S
                if await _receives(conn, follower, check_channel):
                    # From here the connection waits for notifications, as long as it takes.
                    answer_within(conn, None)
                    set_state(State("listen"), log_line=f"LISTEN on {where}")
                    await follower.catch_up()
                    async with aclosing(conn.notifies()) as notes:
                        async for note in notes:
                            await _dispatch(follower, note)
                    raise ConnectionError("the LISTEN connection closed")
                # Behind a transaction pooler the LISTEN stayed on whichever server connection
                # ran it, and would send stray notifications to its later clients: undo it
                # (best effort: the pooler may hand this statement to another one).
                with suppress(psycopg.Error):
                    await conn.execute("UNLISTEN *")
            detail = f"{_not_received(source)}; {polling}"
            set_state(State("polling", detail), log_line=f"{detail} (LISTEN connection: {where})")
            await asyncio.sleep(RECHECK_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reconnect with backoff
            detail = f"the LISTEN connection ({source}) failed ({exc.__class__.__name__}); reconnecting; {polling}"
            advice = f"check {source}'s connection settings (sslmode, sslrootcert, options...)"
            if source == "DATABASE_URL":
                advice += "; if DATABASE_URL goes through a transaction pooler, set LISTEN_DATABASE_URL"
            line = f"the LISTEN connection to {where} failed: {_one_line(exc)}; reconnecting; {polling}; {advice}"
            set_state(State("polling", detail), log_line=line)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)


def statement_deadline() -> float | None:
    """DATABASE_STATEMENT_TIMEOUT in seconds (None when it is 0 or unset: no deadline)."""
    return float(getattr(settings, "DATABASE_STATEMENT_TIMEOUT", 0) or 0) or None


def answer_within(conn: Any, seconds: float | None) -> None:
    """Give every wait for the server on ``conn`` (a psycopg AsyncConnection) that has no
    bound of its own a deadline of ``seconds`` (None lifts it). Past it the connection is
    closed and the wait raises ``OperationalError``, at once: cancelling the task instead
    would have psycopg ask the server to cancel the statement and wait up to 10 s more for a
    server that does not answer."""
    import psycopg
    from psycopg.errors import _WaitTimeout

    if seconds is None:
        vars(conn).pop("wait", None)
        return
    wait = type(conn).wait

    async def bounded_wait(gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        try:
            return await wait(conn, gen, interval, seconds if timeout is None else timeout)
        except _WaitTimeout:
            if timeout is not None:
                raise  # psycopg's own bounded wait (notifies): it handles it
            conn.pgconn.finish()
            raise psycopg.OperationalError(
                f"the database did not answer within {seconds:g} s (DATABASE_STATEMENT_TIMEOUT); "
                "the connection was closed"
            ) from None

    conn.wait = bounded_wait


def _not_received(source: str) -> str:
    """Why the process polls when its LISTEN connection does not receive, and what to set."""
    missed = (
        f"a NOTIFY sent on the database connection did not arrive on the LISTEN connection within {SELF_CHECK_S:g} s"
    )
    if source == "LISTEN_DATABASE_URL":
        return (
            f"{missed}: check that LISTEN_DATABASE_URL reaches the same PostgreSQL database as "
            "DATABASE_URL, directly or through a pooler in session mode"
        )
    return (
        f"{missed}, as when DATABASE_URL goes through a transaction pooler (PgBouncer "
        "pool_mode=transaction): set LISTEN_DATABASE_URL to a direct connection to the same "
        "PostgreSQL database"
    )


async def _receives(conn: Any, follower: Follower, channel: str) -> bool:
    """Whether a NOTIFY sent on the ordinary database connection (DATABASE_URL, as changes
    send theirs) arrives on ``conn``. Changes that arrive meanwhile are applied."""
    token = secrets.token_hex(8)
    await in_worker_thread(_notify)(channel, token)
    async with aclosing(conn.notifies(timeout=SELF_CHECK_S)) as notes:
        async for note in notes:
            if note.channel == channel and note.payload == token:
                return True
            await _dispatch(follower, note)
    return False


async def _dispatch(follower: Follower, note: Any) -> None:
    """Hand a notification to the follower by its channel."""
    if note.channel == CHANGE_CHANNEL:
        await follower.notified(note.payload)
    elif note.channel == TOKENS_CHANNEL:
        await follower.tokens_changed()


def _notify(channel: str, payload: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])
