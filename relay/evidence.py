"""What the relay believes: a document from its upstream only if its signature verifies with
the control plane's public keys, and which chains it is refusing its upstream on.

The keys are the operator's (``RELAY_TRUSTED_KEYS``, or ``RELAY_TRUSTED_KEYS_FILE``, read again
when the file changes: a rotation is a rewrite of the file), never the upstream's: they are
what the upstream is checked against. The check itself is the server's
(``presets.document_signatures``, the SDK's rules). Without keys the relay keeps and serves
what its upstream sends, as relays did before, and says so (``/healthz``, a log line at start).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from presets.document_signatures import PublicKeys, Refusal
from relay.config import trusted_keys_in

log = logging.getLogger("relay")

DEGRADED_HEADER = b"x-chain-degraded"
# Distinct reasons logged per chain and burst: an upstream sending a new kind of garbage on
# every poll fills no log.
SAID_MAX = 10
VERIFICATION_OFF = (
    "off: no RELAY_TRUSTED_KEYS or RELAY_TRUSTED_KEYS_FILE, so documents from the upstream are kept and "
    "served unverified; set it to `manage.py signing_keys public --format json` of the control plane"
)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class TrustedKeys:
    """The public keys documents must verify with; None: verification is off."""

    def __init__(self, keys: PublicKeys | None, file: Path | None = None) -> None:
        self._keys = keys
        self.file = file
        self._stamp = _stamp(file) if file is not None else None
        self.error = ""  # why the file, changed, could not be read again (the keys before stay)

    @property
    def on(self) -> bool:
        return self._keys is not None

    @property
    def keys(self) -> PublicKeys | None:
        """The keys, the file read again first if it changed since it was last read."""
        if self.file is not None:
            stamp = _stamp(self.file)
            if stamp != self._stamp:
                self._stamp = stamp
                self._reload(self.file)
        return self._keys

    def _reload(self, file: Path) -> None:
        try:
            keys = trusted_keys_in(file)
        except ValueError as exc:
            # A half-written or mistaken file must not stop a running relay from serving: it
            # keeps checking with the keys it had, and says so until the file is right.
            self.error = str(exc)
            log.warning("relay: %s; still trusting keys %s", exc, ", ".join(self.key_ids))
            return
        self._keys, self.error = keys, ""
        log.info("relay: trusted keys read again from %s: %s", file, ", ".join(keys.key_ids))

    @property
    def key_ids(self) -> tuple[str, ...]:
        return () if self._keys is None else self._keys.key_ids

    def refusal(self, body: bytes) -> Refusal | None:
        """Why a document's exact bytes must not be believed; None when they verify, or when
        verification is off."""
        keys = self.keys
        return None if keys is None else keys.refusal_of_body(body)

    def counts(self, body: bytes) -> bool:
        """Whether a document's bytes verify (``document_files.keep``'s ``counts``)."""
        return self.refusal(body) is None

    def described(self) -> dict[str, Any]:
        """For ``/healthz``."""
        if not self.on:
            return {"verification": VERIFICATION_OFF, "trusted_keys": []}
        said: dict[str, Any] = {"verification": "on", "trusted_keys": list(self.key_ids)}
        if self.file is not None:
            said["trusted_keys_file"] = str(self.file)
        if self.error:
            said["trusted_keys_error"] = self.error
        return said


@dataclass
class Degradation:
    """A chain whose upstream sent what the relay refused, since the last document it believed."""

    kind: str
    why: str
    since: float = field(default_factory=time.time)
    refused: int = 0
    said: set[str] = field(default_factory=set)  # the reasons logged in this burst
    header: tuple[bytes, bytes] = (DEGRADED_HEADER, b"")

    def refuse(self, refusal: Refusal) -> bool:
        """Count ``refusal`` as the latest; whether its reason is new to this burst (to be logged)."""
        self.kind, self.why = refusal.kind, refusal.why
        self.header = (DEGRADED_HEADER, refusal.kind.encode("ascii"))
        self.refused += 1
        if refusal.why in self.said or len(self.said) >= SAID_MAX:
            return False
        self.said.add(refusal.why)
        return True

    def described(self, now: float) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.why,
            "refused": self.refused,
            "since_seconds_ago": round(now - self.since, 1),
        }
