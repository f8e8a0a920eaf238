"""The last-known-good file: ``{state_dir}/{chain}.json``, read at start-up, never taken back.

A restarted service serves the chain it last applied before it reaches the network, so the
file is read at construction. Several processes may share one ``state_dir`` (one client
each for the same chain) and each may be answered by a lagging replica, so a save takes the
lock ``{chain}.lock`` (``state_lock``: one protocol with the TypeScript client, so services in
both languages can share the directory), compares ``(epoch, version)`` with what the file
holds and writes only a newer document, atomically (temp file, ``fsync``, rename). A save
that cannot have the lock within ``state_lock.WAIT_S`` fails rather than write without it.

The file carries a digest of its content, and a file whose digest does not match is
refused: a version raised by hand must neither become what a restarted service serves nor
hold back every later save (it would look newer than anything the control plane sends). A
digest only catches accidental and naive edits: whoever can write the file can recompute
it. Signing is what stops a deliberate forger: the file holds the document exactly as the
control plane signed it, and a client given ``trusted_keys`` verifies that signature again
on load, so a document edited in the file (digest recomputed or not), or one without a
signature, is refused like a file whose digest does not match. What a forger can still do is
put back an older document the control plane really signed for this chain: it verifies, and
a restarted service serves it until its first poll brings the current one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import quote

from chainclient.document_parts import environment_refusal
from chainclient.signatures import UNSIGNED, TrustedKeys
from chainclient.snapshot import label
from chainclient.state_lock import state_lock
from chainclient.transport import describe
from chainclient.types import ChainDocument, DocumentInvalid, Registry

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

STATE_FORMAT = "chainclient-state/2"

# What releases before the digest (0.3 and earlier) wrote. Such a file is still read, and
# rewritten with a digest as soon as it is: a service upgrading the SDK must not lose its
# last-known-good at the restart that upgrades it (with the control plane out of reach just
# then, it would serve the compiled-in default). So an edit made to such a file before that
# first read goes unnoticed, as it always did; from then on the file has a digest. What is
# left is a way round the digest: turning a file back into this format without one. That
# takes a deliberate edit (the format changed, the digest deleted), and a digest does not
# stop deliberate edits anyway, since recomputing it is as easy. The edit it is there to
# catch, a value changed in an editor, is refused, and so is a current file whose digest
# was deleted. With trusted_keys set, the way round is closed: the document in a file of
# either format is verified again on load, and releases before signatures kept none.
FORMAT_BEFORE_DIGESTS = "chainclient-state/1"

DIGEST_MISMATCH = "digest mismatch: the file changed after it was saved (edited by hand?)"

# A file saved before the control plane signed, or by a release that kept no signature, is
# the usual case: said so, rather than suspecting a proxy as a fetched document's reason does.
_UNSIGNED_ON_DISK = (
    "unsigned: its document carries no signature, and trusted_keys is set (saved before the control "
    "plane signed its documents, by chainclient 0.3 or earlier, which kept no signature, or edited?)"
)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What ``load()`` found: the document to start from, or why the file was refused."""

    document: ChainDocument | None
    refused: str | None = None


@dataclasses.dataclass(frozen=True)
class _Saved:
    """A document read back from the file, and whether the file carried a digest."""

    document: ChainDocument
    digested: bool


class StateFile:
    """One chain's state file; ``path`` is None when the client keeps no file."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None,
        *,
        chain: str,
        registry: Registry,
        trusted_keys: TrustedKeys | None = None,
        environment: str | None = None,
    ) -> None:
        """``environment``: the client's (``ChainClient(environment=...)``): a file saved from
        another environment's document is refused (a service moved to another environment
        with its state directory)."""
        self.path = Path(state_dir) / f"{quote(chain, safe='')}.json" if state_dir is not None else None
        self._chain = chain
        self._registry = registry
        self._trusted_keys = trusted_keys
        self._environment = environment

    def load(self) -> Loaded:
        """The document saved by a previous run, if any. A missing file is no document; an
        unusable one (its digest not matching, or with ``trusted_keys`` its document's
        signature not verifying, included) is refused, with one log line."""
        path = self.path
        if path is None:
            return Loaded(None)
        try:
            saved = self._read(path)
        except FileNotFoundError:
            return Loaded(None)
        except (OSError, ValueError, RecursionError) as exc:  # DocumentInvalid is a ValueError
            logger.warning("chain %s: ignoring state file %s: %s", self._chain, path, exc)
            return Loaded(None, refused=str(exc) if isinstance(exc, DocumentInvalid) else describe(exc))
        document = saved.document
        if saved.digested:
            logger.info(
                "chain %s: starting from %s %s saved in %s", self._chain, label(document), document.preset, path
            )
            return Loaded(document)
        logger.info(
            "chain %s: starting from %s %s saved in %s, written before digests (%s); rewriting it with one",
            self._chain,
            label(document),
            document.preset,
            path,
            FORMAT_BEFORE_DIGESTS,
        )
        try:
            self.save(document)
        except (OSError, TypeError, ValueError) as exc:
            # Still served: the next save of a newer document writes the digest.
            logger.warning("chain %s: could not rewrite %s with a digest: %s", self._chain, path, describe(exc))
        return Loaded(document)

    def save(self, document: ChainDocument) -> ChainDocument | None:
        """Write ``document`` unless the file already holds it (with a digest) or a newer one;
        return that one when it does. Raises OSError, TypeError or ValueError when the save
        fails (``StateFileLocked``, an OSError, when the lock cannot be had in time).

        Processes sharing a ``state_dir`` can each get answers from a lagging replica, so
        the compare and the write happen under one lock: the file never goes back.
        """
        path = self.path
        if path is None:
            return None
        payload: dict[str, object] = {
            "format": STATE_FORMAT,
            "chain": self._chain,
            "saved_at": time.time(),
            "document": document.to_json(),
        }
        payload["digest"] = _digest_of(payload)
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        with state_lock(path.with_suffix(".lock")) as lock:
            try:
                on_disk = self._read(path)
            except (OSError, ValueError, RecursionError):
                on_disk = None  # missing or unusable (edited, too): load() refuses it as well
            if on_disk is not None:
                held = on_disk.document.order
                if held > document.order or (held == document.order and on_disk.digested):
                    return on_disk.document
            # The lock is checked last thing: one broken as stale meanwhile must not write.
            _write_atomically(path, data, before_rename=lock.check)
        return None

    def _read(self, path: Path) -> _Saved:
        """The document saved in ``path``; raises OSError or ValueError saying why not."""
        payload = json.loads(path.read_bytes())
        if not isinstance(payload, dict) or payload.get("format") not in (STATE_FORMAT, FORMAT_BEFORE_DIGESTS):
            raise DocumentInvalid(f"not a {STATE_FORMAT} file")
        digested = payload["format"] == STATE_FORMAT
        if digested:
            # Checked first: nothing in an edited file is believed, its chain name included.
            if "digest" not in payload:
                raise DocumentInvalid(f"no digest, which every {STATE_FORMAT} file carries")
            if payload["digest"] != _digest_of(payload):
                raise DocumentInvalid(DIGEST_MISMATCH)
        if payload.get("chain") != self._chain:
            raise DocumentInvalid(f"it belongs to chain {payload.get('chain')!r}")
        saved = payload.get("document")
        if self._trusted_keys is not None and isinstance(saved, dict):
            # Before the document is believed: a digest is recomputed as easily as it is
            # checked, a signature is not.
            refused = self._trusted_keys.refusal(saved)
            if refused is not None:
                raise DocumentInvalid(
                    _UNSIGNED_ON_DISK if refused.kind == UNSIGNED else f"its document is refused: {refused.why}"
                )
        document = ChainDocument.from_json(saved, registry=self._registry, source="disk")
        if document.name != self._chain:
            raise DocumentInvalid(f"its document is for chain {document.name!r}")
        refused_environment = environment_refusal(saved, self._environment) if isinstance(saved, dict) else None
        if refused_environment is not None:
            raise DocumentInvalid(f"its {refused_environment}")
        return _Saved(document, digested)


def _digest_of(payload: Mapping[str, object]) -> str:
    """``sha256:<hex>`` over ``payload`` without its ``digest``, as canonical JSON (keys
    sorted, no spaces, ASCII): the content decides it, not the layout, so a file indented
    again by a tool is not an edit while any changed value is."""
    content = {key: value for key, value in payload.items() if key != "digest"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _write_atomically(path: Path, data: bytes, *, before_rename: Callable[[], None]) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file;
    ``before_rename`` may raise to leave the old one."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        before_rename()
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    # Make the rename itself durable; not every platform can open a directory.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


__all__ = ["DIGEST_MISMATCH", "FORMAT_BEFORE_DIGESTS", "STATE_FORMAT", "Loaded", "StateFile"]
