"""Chain documents kept as files, by whoever keeps them: the publisher's directory target
(presets/publishing.py) and a relay's cache (relay/disk.py). Django-free: a relay imports it.

- ``Publication``: a document's exact bytes and what orders it, read from the bytes alone.
- ``keep``: the one rule for replacing a file, under a lock every process on the host shares:
  a later (epoch, version), or the same one signed later by another key; never an older one.
- Files are written whole (a reader sees the old file or the new), readable by a web server,
  and dated a whole second after the file they replace (see ``write_whole``). A file being
  written has no name until it is complete, and then only a hidden one (``.NAME.<hex>.tmp``)
  until it is renamed over the old file; one left by a writer killed in between is removed at
  the next ``keep`` of that chain.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
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
    environment: str = ""  # the chain's environment, as the document says it ('': it says none)

    @classmethod
    def of(cls, body: bytes) -> Publication:
        """The publication of a chain document's bytes; NotADocument for anything else."""
        try:
            document = json.loads(body)
            name, epoch, version = document["name"], document.get("epoch", 0), document["version"]
            signature, expires_at = document.get("signature"), document.get("expires_at")
            environment = document.get("environment", "")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise NotADocument(f"not a chain document ({exc.__class__.__name__}: {exc})") from None
        if type(epoch) is not int or type(version) is not int:
            raise NotADocument("not a chain document (epoch or version is not a whole number)")
        if not isinstance(name, str) or not _CHAIN_NAME.fullmatch(name):
            # It names a file and an object key: a slug, as chain names are (Chain.name).
            raise NotADocument(f"not a chain name: {name!r}")
        if expires_at is not None and not isinstance(expires_at, str):
            raise NotADocument(f"not a chain document (expires_at is {expires_at!r})")
        if not isinstance(environment, str) or not (environment == "" or _CHAIN_NAME.fullmatch(environment)):
            # It names a directory and an object key's part too: a slug, as environments are.
            raise NotADocument(f"not an environment's name: {environment!r}")
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
            environment=environment,
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


# A file being written has no name (Linux's O_TMPFILE) until it is complete, then this hidden
# one from its link until its rename over the document: web servers told to deny dotfiles (as
# docs/publishing.md's nginx example is) never serve it, and the next ``keep`` of the chain
# removes one a writer killed between the two left. Where O_TMPFILE is missing (another system,
# a file system without it), the file is written under this name from the start.
TEMPORARY_SUFFIX = ".tmp"
_TOKEN_BYTES = 8
# The names this module gave its temporary files before (``tempfile.mkstemp(prefix=".",
# suffix=".tmp")``): they name no chain, so they are removed only once surely abandoned.
_OLD_TEMPORARY = re.compile(r"\.[a-z0-9_]{8}\.tmp")
OLD_TEMPORARY_AGE_S = 600.0
# What open(O_TMPFILE) fails with where the kernel or the file system lacks it.
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR, errno.EINVAL}
_PROC_FD = "/proc/self/fd"


def temporary_name(name: str) -> str:
    """A fresh hidden name for a file ``name`` being written."""
    return f".{name}.{secrets.token_hex(_TOKEN_BYTES)}{TEMPORARY_SUFFIX}"


def is_temporary_of(candidate: str, name: str) -> bool:
    """Whether ``candidate`` is a temporary name ``write_whole`` gives a file ``name``."""
    return re.fullmatch(rf"\.{re.escape(name)}\.[0-9a-f]{{{2 * _TOKEN_BYTES}}}\.tmp", candidate) is not None


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` whole or not at all: a reader sees the old file or the new,
    never a part. The file being written has no name until it is complete (Linux's O_TMPFILE;
    elsewhere a hidden one from the start), then a hidden one (``temporary_name``) until it is
    renamed over ``path``.

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
    temporary = temporary_name(path.name)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        handle, named = _unnamed(directory), False
        if handle is None:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=directory)
            named = True
        try:
            _fill(handle, data, modified)
            if not named:
                # linkat(AT_SYMLINK_FOLLOW) through /proc: a name for the complete file, which an
                # unprivileged process can give it no other way.
                os.link(f"{_PROC_FD}/{handle}", temporary, dst_dir_fd=directory, follow_symlinks=True)
                named = True
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            if named:
                try:
                    os.unlink(temporary, dir_fd=directory)
                except FileNotFoundError:
                    pass
            raise
        finally:
            os.close(handle)
    finally:
        os.close(directory)


def _unnamed(directory: int) -> int | None:
    """A file without a name in ``directory``, open for writing; None where there can be none."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is None or not os.path.isdir(_PROC_FD):
        return None
    try:
        return os.open(".", tmpfile | os.O_WRONLY, 0o644, dir_fd=directory)
    except OSError as exc:
        if exc.errno in _NO_TMPFILE:
            return None
        raise


def _fill(handle: int, data: bytes, modified: float) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]
    os.fchmod(handle, 0o644)  # whatever the umask: the web server reads it
    os.utime(handle, (modified, modified))
    os.fsync(handle)


def remove_leftovers(directory: Path, name: str) -> list[str]:
    """Remove the temporary files of ``name`` that writers killed between link and rename left
    in ``directory`` (and the nameless ones of older publishers, once surely abandoned); the
    caller holds ``name``'s lock, so no writer of it is between the two now. The names removed."""
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.endswith(TEMPORARY_SUFFIX):
            continue
        if not is_temporary_of(entry.name, name):
            if not _OLD_TEMPORARY.fullmatch(entry.name):
                continue
            try:
                if now - entry.stat(follow_symlinks=False).st_ctime < OLD_TEMPORARY_AGE_S:
                    continue
            except FileNotFoundError:
                continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        removed.append(entry.name)
    if removed:
        log.warning("%s: removed %s, left by a writer stopped before it finished", directory, ", ".join(removed))
    return removed


def read_held(path: Path) -> Publication | None:
    """The document the file at ``path`` holds; None if there is none or it holds something else."""
    body = _read_bytes(path)
    return None if body is None else held_in(body, where=str(path))


def held_in(body: bytes, *, where: str) -> Publication | None:
    """The document ``body``, read from ``where``, holds; None (and said) if it holds something else."""
    try:
        return Publication.of(body)
    except NotADocument as exc:
        log.warning("%s holds no chain document (%s); it is replaced", where, exc)
        return None


def keep(
    directory: Path, publication: Publication, *, counts: Callable[[bytes], bool] | None = None
) -> tuple[bool, Publication | None]:
    """Write the publication at ``<directory>/<name>`` if it ``replaces`` what the file holds,
    read and compared under the chain's lock (``.<name>.lock`` beside it); (written, held).

    ``counts`` says whether what the file holds (its exact bytes) counts at all: a file that
    does not is replaced whatever it claims (the publisher's evidence rule, in
    ``presets.publishing``). Temporary files a killed writer left for the chain go first."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / publication.name
    with locked(directory / f".{publication.name}.lock"):
        remove_leftovers(directory, publication.name)
        body = _read_bytes(path)
        held = None if body is None else held_in(body, where=str(path))
        believed = body is None or counts is None or counts(body)
        if believed and not publication.replaces(held):
            return False, held
        write_whole(path, publication.body)
    return True, held


def _read_bytes(path: Path) -> bytes | None:
    try:
        with path.open("rb") as file:
            return file.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        return None
