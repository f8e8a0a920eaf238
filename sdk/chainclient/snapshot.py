"""The held document as ``current()`` reads it, and how held documents are named.

A ``Snapshot`` is swapped as one reference: the document held, and what replaces it from
its expiry on (a pin gives way to the chain's default at ``expires_at``, even with no
control plane to tell it). Both are computed when the document arrives, off the read
path, so ``current()`` is a reference read, at most one clock read and one comparison.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from chainclient.types import ChainDocument, DefaultChain, Step


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What ``current()`` reads, swapped as one reference: the held document and what
    replaces it from ``expires_at`` on (the document itself when it has no expiry)."""

    document: ChainDocument
    expires_at: float  # epoch seconds; math.inf without an expiry, so one comparison does
    expired: ChainDocument

    def serving(self, now: float) -> ChainDocument:
        """What ``current()`` returns at ``now`` (which inlines this, for speed)."""
        return self.expired if now >= self.expires_at else self.document


def snapshot_of(document: ChainDocument, default_steps: Sequence[Step]) -> Snapshot:
    """Precompute, off the read path, what ``current()`` serves before and after expiry."""
    if document.expires_at_s is None:
        return Snapshot(document, math.inf, document)
    return Snapshot(document, document.expires_at_s, expired_pin(document, default_steps))


def expired_pin(pin: ChainDocument, default_steps: Sequence[Step]) -> ChainDocument:
    """The pin's chain default, as served from its expiry until the revert arrives."""
    # Older servers send no default: the compiled-in steps are the fallback then.
    default = pin.default or DefaultChain("compiled-default", tuple(default_steps))
    return dataclasses.replace(
        pin,
        preset=default.preset,
        is_default=True,
        chain=default.chain,
        marking=dict(default.marking),
        updated_by="chainclient",
        reason=(
            f"pin {pin.preset} (v{pin.version}) expired at {pin.expires_at}; serving the "
            f"default {default.preset} until the control plane's revert arrives"
        ),
        expires_at=None,
        # The drill's hop is a step of the pin's chain, not of the default's.
        drill=None,
        failure_policy=default.failure_policy,
    )


def entity_tag(document: ChainDocument) -> str:
    """The ETag the control plane sends for ``document``: the version, prefixed by the
    epoch once one was raised (so the same version from before a restore differs)."""
    if document.epoch == 0:
        return f'"{document.version}"'
    return f'"{document.epoch}.{document.version}"'


def label(document: ChainDocument) -> str:
    """``v7``, or ``v7 (epoch 2)`` once an epoch was raised, for log lines."""
    if document.epoch == 0:
        return f"v{document.version}"
    return f"v{document.version} (epoch {document.epoch})"


__all__ = ["Snapshot", "entity_tag", "expired_pin", "label", "snapshot_of"]
