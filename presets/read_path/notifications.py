"""Change notifications: how every web process learns at once that a chain changed.

The sender is a receiver of ``presets.events.selection_changed`` (connected in
``PresetsConfig.ready``): on PostgreSQL it NOTIFYs inside the change's transaction, so the
notification is delivered when (and only if) the change commits. It carries the new document
(well under NOTIFY's 8,000 bytes), so no web process has to read it back. The listener holds
one LISTEN connection per process and hands each payload to the snapshot. Other databases
have no NOTIFY: their snapshots poll versions instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from django.db import connection, connections

from presets.documents import ChainDocument
from presets.models import Selection

log = logging.getLogger(__name__)

CHANGE_CHANNEL = "chain_changed"


def announce_change(sender: Any, *, selection: Selection, epoch: int | None = None, **_: Any) -> None:
    """Tell every web process that ``selection``'s chain changed (a signal receiver)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANGE_CHANNEL, encode_payload(selection, epoch=epoch)])


def encode_payload(selection: Selection, *, epoch: int | None) -> str:
    return json.dumps(
        {
            "chain": selection.chain.name,
            "version": selection.version,
            "document": selection.to_document(epoch=epoch),
            "expires_at_ts": selection.expires_at_ts,
        },
        separators=(",", ":"),
    )


def decode_payload(payload: str) -> tuple[ChainDocument, float | None]:
    """The document and its pin's expiry in Unix seconds; raises ValueError, KeyError or
    TypeError on a payload this release did not send."""
    change = json.loads(payload)
    return change["document"], change["expires_at_ts"]


class Follower(Protocol):
    """What the listener feeds (the per-process ``Snapshot``)."""

    async def catch_up(self) -> None: ...

    async def notified(self, payload: str) -> None: ...


async def listen(follower: Follower) -> None:
    """Hold a LISTEN connection for ever, reconnecting with backoff; after each (re)connect,
    catch up with the changes made while nobody was listening."""
    import psycopg

    settings = connections["default"].settings_dict
    conninfo = psycopg.conninfo.make_conninfo(
        dbname=settings["NAME"],
        user=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None,
        port=str(settings["PORT"]) if settings.get("PORT") else None,
        connect_timeout=2,
    )
    delay = 0.5
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            async with conn:
                await conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                delay = 0.5
                await follower.catch_up()
                async for note in conn.notifies():
                    await follower.notified(note.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reconnect with backoff
            log.warning("chain snapshot: LISTEN connection lost (%s); reconnecting", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
