"""What the relay keeps on disk, so that it starts serving when its upstream is down.

- Each chain's document, byte for byte as the upstream served it (the control plane's
  signature covers it), at ``<cache>/api/v1/chains/<name>``: the layout of the read API, so
  the directory could be served as it is. A document only replaces an older one, under a
  lock, whichever of the relay's worker processes writes it.
- The tokens its upstream said were valid (SHA-256 digests, never the tokens) and when.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from presets.documents import etag
from read_path.held import Entry, make_entry

log = logging.getLogger(__name__)


class NotADocument(ValueError):
    """The bytes are not a chain document the relay can serve."""


def entry_of(body: bytes, *, tag: str | None = None) -> Entry:
    """The entry serving ``body``, a chain document's exact bytes, tagged ``tag`` (the
    upstream's ETag; by default the document's own, as the control plane makes it)."""
    try:
        document = json.loads(body)
        name, epoch, version = document["name"], int(document.get("epoch", 0)), int(document["version"])
        expires = document.get("expires_at")
        expires_at = None if expires is None else datetime.fromisoformat(expires).timestamp()
        signature = document.get("signature")
        key_id = signature.get("key_id") if isinstance(signature, dict) else None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotADocument(f"not a chain document ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise NotADocument(f"not a chain name: {name!r}")
    return make_entry(
        name=name,
        epoch=epoch,
        version=version,
        etag=tag or etag(epoch, version),
        body=body,
        expires_at=expires_at,
        key_id=key_id,
    )


def signed_at(entry: Entry) -> str:
    """When the entry's document was signed ('' unsigned): orders two signatures of one version."""
    signature = json.loads(entry.body).get("signature")
    return str(signature.get("signed_at", "")) if isinstance(signature, dict) else ""


def newer(entry: Entry, than: Entry | None) -> bool:
    """Whether ``entry`` may replace ``than``: a later (epoch, version), or the same version
    signed later (after a key rotation)."""
    if than is None or entry.order > than.order:
        return True
    return entry.order == than.order and entry.body != than.body and signed_at(entry) > signed_at(than)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` whole or not at all (a crash leaves the old file)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read_entry(path: Path) -> Entry | None:
    try:
        return entry_of(path.read_bytes())
    except (OSError, NotADocument):
        return None


def keep_document(directory: Path, entry: Entry) -> bool:
    """Write the entry's document unless the one on disk is newer; whether it was written."""
    with _locked(directory):
        path = directory / entry.name
        if not newer(entry, _read_entry(path)):
            return False
        _replace(path, entry.body)
        return True


def forget_document(directory: Path, name: str) -> None:
    with _locked(directory):
        (directory / name).unlink(missing_ok=True)


def kept_documents(directory: Path) -> list[Entry]:
    """Every document kept in ``directory``; an unreadable file is skipped and said."""
    entries: list[Entry] = []
    if not directory.is_dir():
        return entries
    for path in sorted(directory.iterdir()):
        if path.name.startswith("."):
            continue
        entry = _read_entry(path)
        if entry is None or entry.name != path.name:
            log.warning("relay cache: %s is not a chain document; skipped", path)
            continue
        entries.append(entry)
    return entries


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenFile:
    """The tokens the upstream last said were valid, by digest, with when it said so (Unix
    seconds). Every worker process merges its verdicts in: the latest verdict on a digest wins."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, float]:
        try:
            data: Any = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("relay cache: %s is unreadable (%s); starting without known tokens", self.path, exc)
            return {}
        valid = data.get("valid", {}) if isinstance(data, dict) else {}
        return {str(k): float(v) for k, v in valid.items() if isinstance(v, (int, float))}

    def merge(self, verdicts: dict[str, tuple[bool, float]]) -> None:
        """Record ``verdicts`` (digest -> (valid, checked at)): valid ones are kept, refused ones removed."""
        with _locked(self.path.parent):
            data: Any
            try:
                data = json.loads(self.path.read_bytes())
                valid: dict[str, float] = dict(data.get("valid", {}))
                refused: dict[str, float] = dict(data.get("refused", {}))
            except (OSError, ValueError, AttributeError):
                valid, refused = {}, {}
            for digest, (ok, at) in verdicts.items():
                if at < max(valid.get(digest, 0.0), refused.get(digest, 0.0)):
                    continue  # another worker heard later
                if ok:
                    valid[digest] = at
                    refused.pop(digest, None)
                else:
                    refused[digest] = at
                    valid.pop(digest, None)
            # Refusals are kept only so that a late valid verdict cannot bring a token back.
            newest = sorted(refused.items(), key=lambda item: item[1])[-1000:]
            _replace(self.path, json.dumps({"valid": valid, "refused": dict(newest)}).encode())
