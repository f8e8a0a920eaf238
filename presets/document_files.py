"""Chain documents kept as files, by whoever keeps them: the publisher's directory target
(presets/publishing.py) and a relay's cache (relay/disk.py). Django-free: a relay imports it.

- ``Publication``: a document's exact bytes and what orders it, read from the bytes alone.
- ``keep``: the one rule for replacing a file, under a lock every process on the host shares:
  a later (epoch, version), or the same one signed later by another key; never an older one.
- Files are written whole (a reader sees the old file or the new), readable by a web server,
  and dated a whole second after the file they replace (see ``write_whole``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

# A document is a few KB; a file is read up to this much.
MAX_DOCUMENT_BYTES = 1 << 20
_CHAIN_NAME = re.compile(r"[-a-zA-Z0-9_]+")


class NotADocument(ValueError):
    """Bytes that are not a chain document (a file or an object may hold anything)."""


@dataclass(frozen=True)
class Publication:
    """One chain's document: its exact bytes, and what orders it."""

    name: str
    epoch: int
    version: int
    key_id: str | None  # the key that signed it; None: unsigned
    signed_at: str  # when ('' unsigned); RFC 3339 to the millisecond in UTC, so text order is time order
    body: bytes = field(repr=False)
    expires_at: str | None = None  # the pin's expiry as the document says it

    @classmethod
    def of(cls, body: bytes) -> Publication:
        """The publication of a chain document's bytes; NotADocument for anything else."""
        try:
            document = json.loads(body)
            name, epoch, version = document["name"], document.get("epoch", 0), document["version"]
            signature, expires_at = document.get("signature"), document.get("expires_at")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise NotADocument(f"not a chain document ({exc.__class__.__name__}: {exc})") from None
        if type(epoch) is not int or type(version) is not int:
            raise NotADocument("not a chain document (epoch or version is not a whole number)")
        if not isinstance(name, str) or not _CHAIN_NAME.fullmatch(name):
            # It names a file and an object key: a slug, as chain names are (Chain.name).
            raise NotADocument(f"not a chain name: {name!r}")
        if expires_at is not None and not isinstance(expires_at, str):
            raise NotADocument(f"not a chain document (expires_at is {expires_at!r})")
        key_id = signed_at = None
        if isinstance(signature, dict):
            key_id, signed_at = signature.get("key_id"), signature.get("signed_at")
        return cls(
            name=name,
            epoch=epoch,
            version=version,
            key_id=key_id if isinstance(key_id, str) else None,
            signed_at=signed_at if isinstance(signed_at, str) else "",
            body=body,
            expires_at=expires_at,
        )

    @property
    def order(self) -> tuple[int, int]:
        return (self.epoch, self.version)

    def replaces(self, held: Publication | None) -> bool:
        """Whether this may replace ``held``: a later (epoch, version), or the same one signed
        later by another key (signed anew after a key's activation). Never an older one; the
        same version signed again by the same key adds nothing."""
        if held is None:
            return True
        if self.order != held.order:
            return self.order > held.order
        return self.key_id != held.key_id and self.signed_at > held.signed_at

    def __str__(self) -> str:
        epoch = f" (epoch {self.epoch})" if self.epoch else ""
        return f"{self.name} v{self.version}{epoch}"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold ``path`` (a lock file, made if missing) exclusively: every process on the host waits."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` whole or not at all: a reader sees the old file or the new.

    The file is readable by a web server (0644), and its modification time is a later whole
    second than the old file's: static web servers make a file's ETag of its size and
    modification time in seconds (nginx, Caddy, Apache), so two documents of one size written
    within a second would share an ETag, and a client holding the first would be answered 304
    for the second."""
    try:
        after: float | None = path.stat().st_mtime
    except FileNotFoundError:
        after = None
    modified = time.time()
    if after is not None and int(modified) <= int(after):
        modified = float(int(after) + 1)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), 0o644)  # mkstemp's 0600 would keep the web server out
            os.utime(file.fileno(), (modified, modified))
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_held(path: Path) -> Publication | None:
    """The document the file at ``path`` holds; None if there is none or it holds something else."""
    try:
        with path.open("rb") as file:
            body = file.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        return None
    return held_in(body, where=str(path))


def held_in(body: bytes, *, where: str) -> Publication | None:
    """The document ``body``, read from ``where``, holds; None (and said) if it holds something else."""
    try:
        return Publication.of(body)
    except NotADocument as exc:
        log.warning("%s holds no chain document (%s); it is replaced", where, exc)
        return None


def keep(directory: Path, publication: Publication) -> tuple[bool, Publication | None]:
    """Write the publication at ``<directory>/<name>`` if it ``replaces`` what the file holds,
    read and compared under the chain's lock (``.<name>.lock`` beside it); (written, held)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / publication.name
    with locked(directory / f".{publication.name}.lock"):
        held = read_held(path)
        if not publication.replaces(held):
            return False, held
        write_whole(path, publication.body)
    return True, held
