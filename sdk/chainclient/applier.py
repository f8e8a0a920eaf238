"""Whether a fetched document replaces the one held, and what follows when it does.

A ``200`` body is applied only if it is **signed** by a trusted key (when the client was
given ``trusted_keys``: checked first, on the JSON object as received), **valid** (parsed
against the service's own registry, for this chain) and **newer** by ``(epoch, version)``:
replicas answer out of order, and the held document never goes back (an older document
replayed with its genuine signature is ignored like any older answer). A change is logged in
one line, swapped in as one reference (what ``current()`` reads), saved to the state file and
passed to ``on_change``. An invalid or badly signed body is refused, counted, listed for the
usage report and logged once per document. A valid but older answer may mean the server is
behind this instance (``stats`` decides whether that lasts long enough to say so). A document
whose failover drill this client cannot apply is applied without it, with one warning; one
that brings or ends a drill wakes the usage thread (a drill's reports are seconds apart).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from chainclient import drills
from chainclient.document_parts import environment_refusal
from chainclient.signatures import TrustedKeys
from chainclient.snapshot import Snapshot, entity_tag, label, snapshot_of
from chainclient.state_file import StateFile
from chainclient.stats import ClientStats
from chainclient.transport import describe
from chainclient.types import ChainDocument, DocumentInvalid, Registry, Step
from chainclient.usage import UsageReporter

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

OnChange = Callable[[ChainDocument], object]


class Applied(NamedTuple):
    """What applying a body came to, for the poller."""

    changed: bool
    """Whether the body became the held document."""
    etag: str | None
    """The ETag to send with the next poll; None to keep the one it has."""
    forged: bool = False
    """Whether the body was refused for its signature (the poller asks for a genuine copy
    again later)."""


class Applier:
    """Applies fetched bodies to the client's snapshot (read with ``held``, swapped with
    ``publish``); ``now`` reads the client's wall clock at call time."""

    def __init__(
        self,
        *,
        chain: str,
        registry: Registry,
        default_steps: Sequence[Step],
        stats: ClientStats,
        usage: UsageReporter,
        state_file: StateFile,
        trusted_keys: TrustedKeys | None,
        on_change: OnChange | None,
        held: Callable[[], Snapshot],
        publish: Callable[[Snapshot], None],
        now: Callable[[], float],
        environment: str | None = None,
    ) -> None:
        """``environment``: the one environment whose documents are applied (None: any)."""
        self._chain = chain
        self._environment = environment
        self._registry = registry
        self._default_steps = tuple(default_steps)
        self._stats = stats
        self._usage = usage
        self._state_file = state_file
        self._trusted_keys = trusted_keys
        self._on_change = on_change
        self._held = held
        self._publish = publish
        self._now = now
        # Compare-and-swap under a lock: after stop() then start(), a lingering old poller
        # thread could otherwise race the new one and move the version backwards.
        self._lock = threading.Lock()
        self._last_rejection: tuple[object, str] | None = None

    def apply(self, body: bytes, etag: str | None) -> Applied:
        """Apply a 200 body if it is valid and newer."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            return self._refuse(None, etag, f"not JSON ({exc})")
        version = data.get("version") if isinstance(data, dict) else None
        if self._trusted_keys is not None and isinstance(data, dict):
            refused = self._trusted_keys.refusal(data)
            if refused is not None:
                return self._refuse(version, etag, refused.why, signature=True)
        try:
            document = ChainDocument.from_json(data, registry=self._registry, source="live")
            if document.name != self._chain:
                raise DocumentInvalid(f"document is for chain {document.name!r}")
            refused_environment = environment_refusal(data, self._environment)
            if refused_environment is not None:
                raise DocumentInvalid(refused_environment)
        except DocumentInvalid as exc:
            return self._refuse(version, etag, str(exc))
        if not self._swap_if_newer(document):
            # The same document again (a static host's ETag names its bytes, not the version:
            # one signed anew): its ETag saves the next poll from fetching it again. An older
            # one's is not kept, so the next poll asks for anything newer than the held one.
            same = document.order == self._held().document.order
            return Applied(changed=False, etag=etag if same and etag else None)
        self._stats.server_caught_up(held=self._held().document)
        if self._on_change is not None:
            try:
                self._on_change(document)
            except Exception:
                logger.exception("chain %s: on_change raised for v%d; polling continues", self._chain, document.version)
        return Applied(changed=True, etag=etag or entity_tag(document))

    def _swap_if_newer(self, document: ChainDocument) -> bool:
        with self._lock:
            previous = self._held().document
            if document.order <= previous.order:
                # Replicas can answer out of order; (epoch, version) never goes down, so an
                # older answer is stale, unless it lasts: then the server is behind us.
                if document.order < previous.order:
                    self._stats.server_behind(document, now=self._now(), held=previous)
                else:
                    self._stats.server_caught_up(held=previous)
                logger.debug("chain %s: ignoring %s, already at %s", self._chain, label(document), label(previous))
                return False
            self._swap(previous, document)
        return True

    def _swap(self, previous: ChainDocument, document: ChainDocument) -> None:
        """Make ``document`` current: one log line, one reference swap, then the file."""
        logger.info(
            "chain %s: %s %s -> %s %s by %s: %s",
            self._chain,
            label(previous),
            previous.preset,
            label(document),
            document.preset,
            document.updated_by,
            document.reason,
        )
        self._publish(snapshot_of(document, self._default_steps))
        self._stats.document_changed()
        self._note_drill(previous, document)
        # Saved after the swap: a slow disk must not delay the change reaching requests.
        self._persist(document)

    def _note_drill(self, previous: ChainDocument, document: ChainDocument) -> None:
        """Say what the new document means for failover drills (and which of its parts this
        client ignores), once per document."""
        drill = document.drill
        for part, why in document.ignored:
            logger.warning(
                "chain %s: ignoring the %s in %s: %s; the document itself is applied",
                self._chain,
                part,
                label(document),
                why,
            )
        if drill is not None and (previous.drill is None or previous.drill.id != drill.id):
            logger.info(
                "chain %s: %s carries failover drill %d: %s, from %s to %s",
                self._chain,
                label(document),
                drill.id,
                drills.describe(drill, document.chain),
                drill.starts_at,
                drill.ends_at,
            )
        if drill is not None or previous.drill is not None:
            self._usage.drill_changed()

    def _persist(self, document: ChainDocument) -> None:
        path = self._state_file.path
        if path is None:
            return
        try:
            on_disk = self._state_file.save(document)
        except (OSError, TypeError, ValueError) as exc:
            why = describe(exc)
            self._stats.save_failed(why)
            logger.warning("chain %s: could not save v%d to %s: %s", self._chain, document.version, path, why)
            return
        if on_disk is not None:
            logger.debug(
                "chain %s: %s already holds %s; not saving %s", self._chain, path, label(on_disk), label(document)
            )
            return
        self._stats.save_succeeded()

    def _refuse(self, version: object, etag: str | None, why: str, *, signature: bool = False) -> Applied:
        self._stats.document_refused(signature=why if signature else None)
        self._usage.record_refused(version, why)
        # Keep the refused document's ETag, so a server (or whatever sits on the way) still
        # holding it answers the next polls with a 304 rather than the same body again. A
        # bad signature may be damage on the way (a proxy, a cache): the poller asks for a
        # genuine copy again later (``Poller``: after an interval, then less and less often).
        applied = Applied(changed=False, etag=etag or None, forged=signature)
        key = (etag or version, why)
        if key == self._last_rejection:
            logger.debug("chain %s: refused the same document again: %s", self._chain, why)
            return applied
        self._last_rejection = key
        current = self._held().serving(self._now())
        logger.warning(
            "chain %s: refused document%s from the control plane: %s; keeping v%d %s",
            self._chain,
            f" v{version}" if isinstance(version, int) else "",
            why,
            current.version,
            current.preset,
        )
        return applied


__all__ = ["Applied", "Applier", "OnChange"]
