"""What the relay keeps on disk, so that it starts serving when its upstream is down.

- Each chain's document, byte for byte as the upstream served it (the control plane's
  signature covers it), at ``<cache>/api/v1/chains/<name>``: the layout of the read API, so
  the directory could be served as it is. A document only replaces an older one, by the
  publisher's rule and lock (``presets/document_files.py``), whichever of the relay's worker
  processes writes it. With verification on, a file whose signature does not verify is never
  loaded, and counts as absent when the next document is written.
- The tokens its upstream said were valid (SHA-256 digests, never the tokens) and when.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from presets import document_files
from presets.document_files import NotADocument, Publication
from presets.document_signatures import Refusal
from presets.documents import etag
from read_path.held import Entry, make_entry

log = logging.getLogger(__name__)


def entry_of(body: bytes, *, tag: str | None = None) -> Entry:
    """The entry serving ``body``, a chain document's exact bytes, tagged ``tag`` (the
    upstream's ETag; by default the document's own, as the control plane makes it)."""
    document = Publication.of(body)
    try:
        expires_at = None if document.expires_at is None else datetime.fromisoformat(document.expires_at).timestamp()
    except ValueError as exc:
        raise NotADocument(f"not a chain document (expires_at: {exc})") from None
    return make_entry(
        name=document.name,
        epoch=document.epoch,
        version=document.version,
        etag=tag or etag(document.epoch, document.version),
        body=body,
        expires_at=expires_at,
        key_id=document.key_id,
    )


def newer(entry: Entry, than: Entry | None) -> bool:
    """Whether ``entry`` may replace ``than``: the publisher's rule (``Publication.replaces``),
    a later (epoch, version) or the same one signed later by another key."""
    return than is None or Publication.of(entry.body).replaces(Publication.of(than.body))


def keep_document(directory: Path, entry: Entry, *, counts: Callable[[bytes], bool] | None = None) -> bool:
    """Write the entry's document unless the one on disk is newer; whether it was written. With
    ``counts`` (whether a document verifies), one on disk that does not is replaced whatever
    version it claims."""
    return document_files.keep(directory, Publication.of(entry.body), counts=counts)[0]


def forget_document(directory: Path, name: str) -> None:
    with document_files.locked(directory / f".{name}.lock"):
        (directory / name).unlink(missing_ok=True)


def kept_documents(directory: Path, *, refusal: Callable[[bytes], Refusal | None] | None = None) -> list[Entry]:
    """Every document kept in ``directory``; an unreadable file is skipped and said, and so is
    one ``refusal`` (the signature check) refuses: it stays on disk, unused, until the next
    document of its chain replaces it (``keep_document`` with ``counts``)."""
    entries: list[Entry] = []
    if not directory.is_dir():
        return entries
    for path in sorted(directory.iterdir()):
        if path.name.startswith("."):
            continue
        try:
            body = path.read_bytes()
            entry = entry_of(body)
        except (OSError, NotADocument):
            entry = None
        if entry is None or entry.name != path.name:
            log.warning("relay cache: %s is not a chain document; skipped", path)
            continue
        refused = refusal(body) if refusal is not None else None
        if refused is not None:
            log.warning(
                "relay cache: %s (v%d) does not verify (%s: %s); discarded: not served, and replaced by "
                "the next document from the upstream",
                path,
                entry.version,
                refused.kind,
                refused,
            )
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with document_files.locked(self.path.parent / f".{self.path.name}.lock"):
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
            document_files.write_whole(self.path, json.dumps({"valid": valid, "refused": dict(newest)}).encode())
