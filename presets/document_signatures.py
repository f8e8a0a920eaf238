"""Whether a chain document's signature holds, for whoever keeps or passes documents on: a
relay before it keeps, serves or forwards what its upstream sent, and the publisher before it
counts what it finds in a published directory or bucket. Django-free: a relay imports it.

The rules are the SDK's (``chainclient.signatures``; the server never imports the SDK): the
same four kinds of refusal, checked in the same order (``sdk/tests/vectors/signed_documents.json``
runs through both). What a signature covers is ``wire.signed_content``; the key ids and public
keys are those ``manage.py signing_keys public --format json`` prints.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from presets.wire import SIGNATURE_ALGORITHM, signed_content

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SIGNATURE_FIELDS = ("alg", "key_id", "signed_at", "value")

# The kinds of refusal, as the shared vectors name them; ``not_a_document`` for bytes that are
# no JSON object at all.
UNSIGNED = "unsigned"
MALFORMED = "malformed"
UNTRUSTED_KEY = "untrusted_key"
BAD_SIGNATURE = "bad_signature"
NOT_A_DOCUMENT = "not_a_document"
KINDS = (NOT_A_DOCUMENT, UNSIGNED, MALFORMED, UNTRUSTED_KEY, BAD_SIGNATURE)

_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_SHOWN_CHARS = 64


class Refusal(NamedTuple):
    """Why a document is not believed: the kind, and the reason in words."""

    kind: str
    why: str

    def __str__(self) -> str:
        return self.why


class PublicKeys:
    """The control plane's public keys by key id; a document is believed only if it verifies
    with one of them."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = {key_id: Ed25519PublicKey.from_public_bytes(raw) for key_id, raw in keys.items()}
        self.encoded = {key_id: _encode(raw) for key_id, raw in keys.items()}

    @classmethod
    def parse(cls, keys: object, *, where: str) -> PublicKeys:
        """The keys of a mapping of key id to base64url public key (as ``signing_keys public
        --format json`` prints); ValueError saying, with ``where`` (the setting or file it came
        from), which key is wrong and how."""
        if not isinstance(keys, Mapping):
            raise ValueError(
                f"{where}: expected a JSON object of key id to public key, as `manage.py signing_keys public "
                f"--format json` prints, got {type(keys).__name__}"
            )
        if not keys:
            raise ValueError(
                f"{where}: no key given; paste the output of `manage.py signing_keys public --format json`"
            )
        raw: dict[str, bytes] = {}
        for key_id, text in keys.items():
            if not isinstance(key_id, str) or not key_id.strip():
                raise ValueError(f"{where}: key id {key_id!r} must be a non-empty string")
            value = _base64url(text.strip().rstrip("=")) if isinstance(text, str) else None
            if value is None or len(value) != PUBLIC_KEY_BYTES:
                raise ValueError(
                    f"{where}: key {_shown(key_id)} is not an Ed25519 public key (43 base64url characters, "
                    "as `manage.py signing_keys public` prints)"
                )
            raw[key_id] = value
        return cls(raw)

    @classmethod
    def parse_json(cls, text: str, *, where: str) -> PublicKeys:
        try:
            keys = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        return cls.parse(keys, where=where)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def refusal_of_body(self, body: bytes) -> Refusal | None:
        """Why a document's exact bytes must not be believed, or None when they verify."""
        try:
            document = json.loads(body)
        except ValueError as exc:
            return Refusal(NOT_A_DOCUMENT, f"not JSON ({exc})")
        if not isinstance(document, dict):
            return Refusal(NOT_A_DOCUMENT, f"not a JSON object but {type(document).__name__}")
        return self.refusal(document)

    def refusal(self, document: Mapping[str, Any]) -> Refusal | None:
        """Why ``document`` (the JSON object) must not be believed, or None when its signature
        verifies with one of the keys."""
        signature = document.get("signature")
        if signature is None:
            return Refusal(UNSIGNED, "unsigned: the document carries no signature")
        malformed = _malformed(signature)
        if malformed is not None:
            return Refusal(MALFORMED, f"malformed signature: {malformed}")
        key_id: str = signature["key_id"]
        key = self._keys.get(key_id)
        if key is None:
            trusted = ", ".join(_shown(known) for known in self.key_ids)
            return Refusal(
                UNTRUSTED_KEY,
                f"signed by key {_shown(key_id)}, which is not one of the control plane's keys (trusted: {trusted}); "
                "after a rotation, add the new public key (`manage.py signing_keys public --format json`)",
            )
        value = _base64url(signature["value"])
        assert value is not None  # _malformed checked it
        try:
            key.verify(value, signed_content(document))
        except InvalidSignature:
            return Refusal(
                BAD_SIGNATURE,
                f"the signature does not verify with key {_shown(key_id)}: the document was changed after the "
                "control plane signed it",
            )
        return None


def _malformed(signature: object) -> str | None:
    if not isinstance(signature, dict):
        return f"'signature' must be an object with {', '.join(SIGNATURE_FIELDS)}, got {type(signature).__name__}"
    for name in SIGNATURE_FIELDS:
        field = signature.get(name)
        if not isinstance(field, str) or not field:
            return f"signature.{name} must be a non-empty string"
    if signature["alg"] != SIGNATURE_ALGORITHM:
        return f"algorithm {_shown(signature['alg'])} is not {SIGNATURE_ALGORITHM}"
    value = _base64url(signature["value"])
    if value is None or len(value) != SIGNATURE_BYTES:
        return f"signature.value must be the base64url (no padding) of a {SIGNATURE_BYTES}-byte Ed25519 signature"
    return None


def _base64url(text: str) -> bytes | None:
    if not _BASE64URL.fullmatch(text):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _shown(key_id: str) -> str:
    if len(key_id) > _SHOWN_CHARS:
        return repr(key_id[:_SHOWN_CHARS] + "...")
    return repr(key_id)
