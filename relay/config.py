"""The relay's settings, read once from the environment with bounds and clear errors."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from presets.document_signatures import PublicKeys


class ConfigError(Exception):
    """A setting is missing or wrong; the message says which and how to fix it."""


@dataclass(frozen=True)
class RelayConfig:
    upstream: str  # the control plane's (or another relay's) base URL, without a trailing slash
    token: str  # the relay's own service token, for following and for its reports
    cache_dir: Path
    name: str
    token_cache_s: float = 10.0
    upstream_wait_s: int = 55
    relist_s: float = 30.0
    report_queue_max: int = 10_000
    # The control plane's public keys every document from upstream must verify with (None:
    # verification off), and the file they were read from, read again when it changes.
    trusted_keys: PublicKeys | None = None
    trusted_keys_file: Path | None = None

    @property
    def documents_dir(self) -> Path:
        """Where each chain's document is kept, at the path the read API serves it."""
        return self.cache_dir / "api" / "v1" / "chains"


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int, maximum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number ({minimum}..{maximum}), got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name} must be within {minimum}..{maximum}, got {value}")
    return value


def trusted_keys_in(path: Path) -> PublicKeys:
    """The keys in ``path`` (``RELAY_TRUSTED_KEYS_FILE``); ValueError saying what is wrong."""
    where = f"RELAY_TRUSTED_KEYS_FILE {str(path)!r}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror}") from None
    return PublicKeys.parse_json(text, where=where)


def _trusted_keys(environ: Mapping[str, str]) -> tuple[PublicKeys | None, Path | None]:
    # The keys come from the operator, never from the upstream: they are what the upstream's
    # documents are checked against.
    text = environ.get("RELAY_TRUSTED_KEYS", "").strip()
    file = environ.get("RELAY_TRUSTED_KEYS_FILE", "").strip()
    if text and file:
        raise ConfigError("set RELAY_TRUSTED_KEYS or RELAY_TRUSTED_KEYS_FILE, not both")
    try:
        if file:
            return trusted_keys_in(Path(file)), Path(file)
        if text:
            return PublicKeys.parse_json(text, where="RELAY_TRUSTED_KEYS"), None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return None, None


def from_env(environ: Mapping[str, str] = os.environ) -> RelayConfig:
    """The relay's settings (docs/relays.md); raises ConfigError."""
    upstream = environ.get("RELAY_UPSTREAM", "").strip().rstrip("/")
    parts = urlsplit(upstream)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "RELAY_UPSTREAM must be the http(s) URL of the control plane or of another relay, "
            f"e.g. https://chains.example.com (got {upstream!r})"
        )
    token = environ.get("RELAY_TOKEN", "").strip()
    token_file = environ.get("RELAY_TOKEN_FILE", "").strip()
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"RELAY_TOKEN_FILE {token_file!r} cannot be read: {exc.strerror}") from None
    if not token:
        raise ConfigError(
            "set RELAY_TOKEN (or RELAY_TOKEN_FILE) to a service token of the upstream: "
            "manage.py create_token relay-<region> on the control plane"
        )
    trusted_keys, trusted_keys_file = _trusted_keys(environ)
    return RelayConfig(
        upstream=upstream,
        token=token,
        cache_dir=Path(environ.get("RELAY_CACHE_DIR", "").strip() or "var/relay"),
        name=environ.get("RELAY_NAME", "").strip() or socket.gethostname(),
        token_cache_s=_int(environ, "RELAY_TOKEN_CACHE_SECONDS", 10, 1, 300),
        upstream_wait_s=_int(environ, "RELAY_UPSTREAM_WAIT_SECONDS", 55, 1, 60),
        relist_s=_int(environ, "RELAY_RELIST_SECONDS", 30, 1, 3600),
        report_queue_max=_int(environ, "RELAY_REPORT_QUEUE", 10_000, 100, 1_000_000),
        trusted_keys=trusted_keys,
        trusted_keys_file=trusted_keys_file,
    )
