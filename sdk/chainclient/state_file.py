"""The last-known-good file: ``{state_dir}/{chain}.json``, read at start-up, never taken back.

A restarted service serves the chain it last applied before it reaches the network, so the
file is read at construction. Several processes may share one ``state_dir`` (one client
each for the same chain) and each may be answered by a lagging replica, so a save takes an
exclusive ``flock`` on ``{chain}.lock``, compares ``(epoch, version)`` with what the file
holds and writes only a newer document, atomically (temp file, ``fsync``, rename). Without
``fcntl`` (Windows) the lock is skipped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from chainclient.snapshot import label
from chainclient.types import ChainDocument, DocumentInvalid, Registry

try:
    import fcntl
except ImportError:  # Windows: the state file is written without a lock there
    fcntl = None  # type: ignore[assignment]

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

STATE_FORMAT = "chainclient-state/1"


class StateFile:
    """One chain's state file; ``path`` is None when the client keeps no file."""

    def __init__(self, state_dir: str | os.PathLike[str] | None, *, chain: str, registry: Registry) -> None:
        self.path = Path(state_dir) / f"{quote(chain, safe='')}.json" if state_dir is not None else None
        self._chain = chain
        self._registry = registry

    def load(self) -> ChainDocument | None:
        """The document saved by a previous run, or None (a missing or unusable file is
        ignored, with one log line for an unusable one)."""
        path = self.path
        if path is None:
            return None
        try:
            document = self._read(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:  # DocumentInvalid is a ValueError
            logger.warning("chain %s: ignoring state file %s: %s", self._chain, path, exc)
            return None
        logger.info("chain %s: starting from %s %s saved in %s", self._chain, label(document), document.preset, path)
        return document

    def save(self, document: ChainDocument) -> ChainDocument | None:
        """Write ``document`` unless the file already holds it or a newer one; return that
        one when it does. Raises OSError, TypeError or ValueError when the save fails.

        Processes sharing a ``state_dir`` can each get answers from a lagging replica, so
        the compare and the write happen under one lock: the file never goes back.
        """
        path = self.path
        if path is None:
            return None
        payload = {
            "format": STATE_FORMAT,
            "chain": self._chain,
            "saved_at": time.time(),
            "document": document.to_json(),
        }
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(path.with_suffix(".lock")):
            try:
                on_disk = self._read(path)
            except (OSError, ValueError, RecursionError):
                on_disk = None  # missing or unusable: load() would ignore it too
            if on_disk is not None and on_disk.order >= document.order:
                return on_disk
            _write_atomically(path, data)
        return None

    def _read(self, path: Path) -> ChainDocument:
        """The document saved in ``path``; raises OSError or ValueError saying why not."""
        payload = json.loads(path.read_bytes())
        if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
            raise DocumentInvalid(f"not a {STATE_FORMAT} file")
        if payload.get("chain") != self._chain:
            raise DocumentInvalid(f"it belongs to chain {payload.get('chain')!r}")
        document = ChainDocument.from_json(payload.get("document"), registry=self._registry, source="disk")
        if document.name != self._chain:
            raise DocumentInvalid(f"its document is for chain {document.name!r}")
        return document


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        # Unlock explicitly: a child forked meanwhile shares the lock through its copy of
        # the descriptor, so closing ours alone would leave every later save waiting.
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
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


__all__ = ["STATE_FORMAT", "StateFile"]
