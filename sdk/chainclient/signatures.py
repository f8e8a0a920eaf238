"""Signed chain documents: the keys a client trusts, and whether a document's signature holds.

The control plane signs every chain document with Ed25519 and names the key it used
(``"signature": {"alg", "key_id", "signed_at", "value"}``). A proxy, cache or relay between
it and a service must not be able to steer the service's traffic, and neither must whoever
can write its state file, so a client given ``trusted_keys`` accepts a document (fetched, or
read back from the state file) only when its signature verifies with one of those keys. The
bytes a signature covers are defined once, in ``chainclient.wire.signed_content``.

Standard library only: the signature arithmetic is ``chainclient.integrations.verify`` (the
``verify`` extra, on ``cryptography``), imported only when a client is given keys, so a
service that does not verify imports no third-party library.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from chainclient.wire import SIGNATURE_ALGORITHM, signed_content

Check = Callable[[bytes, bytes], bool]
"""``check(signature, message)`` for one public key (``chainclient.integrations.verify``)."""

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SIGNATURE_FIELDS = ("alg", "key_id", "signed_at", "value")
"""What a signature object holds; each a non-empty string."""

# The kinds of refusal, as the shared test vectors name them (tests/vectors/signed_documents.json).
UNSIGNED = "unsigned"
MALFORMED = "malformed"
UNTRUSTED_KEY = "untrusted_key"
BAD_SIGNATURE = "bad_signature"

MISSING_EXTRA = "trusted_keys needs the verify extra: pip install 'chainclient[verify]'"

_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
# Key ids come from documents too: a huge one must not make a huge log line.
_SHOWN_CHARS = 64


class SignatureRefused(NamedTuple):
    """Why a document's signature is not accepted: the kind, and the reason in words."""

    kind: str
    why: str


class TrustedKeys:
    """The public keys a client trusts, by key id, each loaded once; build with ``load``."""

    def __init__(self, checks: Mapping[str, Check]) -> None:
        self._checks = dict(checks)

    @classmethod
    def load(cls, trusted_keys: object) -> TrustedKeys:
        """Check the ``trusted_keys`` option and load its keys.

        Raises TypeError or ValueError naming the bad key id (not base64url, not 32 bytes),
        and ValueError when ``cryptography`` (the ``verify`` extra) cannot be imported: a
        service that asked for verification must not start without it.
        """
        raw = _decoded_keys(trusted_keys)
        try:
            # Here, not at the top: the core imports no third-party library unless asked to.
            from chainclient.integrations.verify import public_key
        except ImportError as exc:
            cause = exc.__cause__ or exc
            raise ValueError(f"{MISSING_EXTRA} ({cause})") from exc
        checks: dict[str, Check] = {}
        for key_id, key in raw.items():
            try:
                checks[key_id] = public_key(key)
            except ValueError as exc:
                raise ValueError(f"trusted_keys[{key_id!r}] is not an Ed25519 public key: {exc}") from None
        return cls(checks)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._checks))

    def refusal(self, document: dict[str, Any]) -> SignatureRefused | None:
        """Why ``document`` (the JSON object as received) must be refused, or None when its
        signature verifies with a trusted key."""
        signature = document.get("signature")
        if signature is None:
            return SignatureRefused(
                UNSIGNED,
                "unsigned: the document carries no signature, and this client accepts only documents "
                "signed by a trusted key (trusted_keys); is the control plane signing its documents "
                "(manage.py signing_keys), or does a proxy or relay on the way strip the signature?",
            )
        malformed = _malformed(signature)
        if malformed is not None:
            return SignatureRefused(MALFORMED, f"malformed signature: {malformed}")
        key_id: str = signature["key_id"]
        check = self._checks.get(key_id)
        if check is None:
            trusted = ", ".join(_shown(known) for known in self.key_ids)
            return SignatureRefused(
                UNTRUSTED_KEY,
                f"signed by key {_shown(key_id)}, which this client does not trust (trusted: {trusted}); "
                "if the control plane rotated its signing key, add the new public key to trusted_keys "
                "(manage.py signing_keys public prints it)",
            )
        value = _base64url(signature["value"])
        assert value is not None  # _malformed checked it
        if not check(value, signed_content(document)):
            return SignatureRefused(
                BAD_SIGNATURE,
                f"the signature does not verify with trusted key {_shown(key_id)}: the document was changed "
                "after the control plane signed it (by a proxy, relay or cache on the way?), or the public "
                "key configured under that id is not the control plane's",
            )
        return None


def _decoded_keys(trusted_keys: object) -> dict[str, bytes]:
    """The raw public keys of the ``trusted_keys`` option; TypeError or ValueError saying
    which key id is wrong and how."""
    if not isinstance(trusted_keys, Mapping):
        raise TypeError(
            "trusted_keys must be a mapping of key id to public key (base64url, as printed by "
            f"manage.py signing_keys public), or None; got {type(trusted_keys).__name__}"
        )
    if not trusted_keys:
        raise ValueError("trusted_keys is empty: give at least one key, or None to accept unsigned documents")
    keys: dict[str, bytes] = {}
    for key_id, text in trusted_keys.items():
        if not isinstance(key_id, str) or not key_id.strip():
            raise ValueError(f"trusted_keys: key id {key_id!r} must be a non-empty string")
        if not isinstance(text, str):
            raise ValueError(f"trusted_keys[{key_id!r}] must be a string (base64url), got {type(text).__name__}")
        # Tolerated: padding, and the blanks a pasted value brings.
        raw = _base64url(text.strip().rstrip("="))
        if raw is None:
            raise ValueError(f"trusted_keys[{key_id!r}] is not base64url (A-Z, a-z, 0-9, '-', '_')")
        if len(raw) != PUBLIC_KEY_BYTES:
            raise ValueError(
                f"trusted_keys[{key_id!r}] is {len(raw)} bytes; an Ed25519 public key is {PUBLIC_KEY_BYTES} "
                "(43 base64url characters, as printed by manage.py signing_keys public)"
            )
        keys[key_id] = raw
    return keys


def _malformed(signature: object) -> str | None:
    """What is wrong with a signature object's shape, or None when it can be checked."""
    if not isinstance(signature, dict):
        return f"'signature' must be an object with {', '.join(SIGNATURE_FIELDS)}, got {type(signature).__name__}"
    for name in SIGNATURE_FIELDS:
        field = signature.get(name)
        if not isinstance(field, str) or not field:
            return f"signature.{name} must be a non-empty string"
    if signature["alg"] != SIGNATURE_ALGORITHM:
        return (
            f"algorithm {_shown(signature['alg'])} is not {SIGNATURE_ALGORITHM}, the only one this client "
            "verifies (upgrade chainclient if the control plane moved to a new one)"
        )
    value = _base64url(signature["value"])
    if value is None or len(value) != SIGNATURE_BYTES:
        return f"signature.value must be the base64url (no padding) of a {SIGNATURE_BYTES}-byte Ed25519 signature"
    return None


def _base64url(text: str) -> bytes | None:
    """Decode base64url without padding; None if ``text`` is not that."""
    if not _BASE64URL.fullmatch(text):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def _shown(key_id: str) -> str:
    """A key id as log lines and reasons quote it, cut short if it is long."""
    if len(key_id) > _SHOWN_CHARS:
        return repr(key_id[:_SHOWN_CHARS] + "...")
    return repr(key_id)


__all__ = [
    "BAD_SIGNATURE",
    "MALFORMED",
    "MISSING_EXTRA",
    "UNSIGNED",
    "UNTRUSTED_KEY",
    "SignatureRefused",
    "TrustedKeys",
]
