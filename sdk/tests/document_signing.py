"""Signing chain documents in tests as the control plane does: Ed25519 over
``chainclient.wire.signed_content``, the signature in base64url without padding.

Test modules import this after ``pytest.importorskip("cryptography")``: the SDK's own suite
runs without the ``verify`` extra too.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from chainclient.wire import SIGNATURE_ALGORITHM, signed_content

SIGNED_AT = "2026-12-04T16:50:00.123Z"


def b64url(raw: bytes) -> str:
    """Base64url without padding, as keys and signatures are written."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class SigningKey:
    """A control plane's signing key: its id, and the private key."""

    key_id: str
    private: Ed25519PrivateKey

    @classmethod
    def generate(cls, key_id: str) -> SigningKey:
        return cls(key_id, Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, key_id: str, seed_hex: str) -> SigningKey:
        return cls(key_id, Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex)))

    @property
    def public(self) -> str:
        """The public key as ``manage.py signing_keys public`` prints it."""
        return b64url(self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def trusted(self) -> dict[str, str]:
        """``trusted_keys`` for a client trusting this key alone."""
        return {self.key_id: self.public}

    def sign(
        self, document: dict[str, Any], *, key_id: str | None = None, signed_at: str = SIGNED_AT
    ) -> dict[str, Any]:
        """A copy of ``document`` carrying this key's signature (under ``key_id`` if given:
        a key presented under another key's id)."""
        signed = copy.deepcopy(document)
        signed["signature"] = {"alg": SIGNATURE_ALGORITHM, "key_id": key_id or self.key_id, "signed_at": signed_at}
        signed["signature"]["value"] = b64url(self.private.sign(signed_content(signed)))
        return signed
