"""Ed25519 on the ``cryptography`` library: what checks a chain document's signature.

``pip install "chainclient[verify]"``. The core never imports this module unless a client is
given ``trusted_keys`` (``chainclient.signatures`` loads it then), so a service that does not
verify signatures imports no third-party library. Which bytes a signature covers, what a
well-formed signature object is and which keys are trusted are decided in the core
(``chainclient.wire.signed_content``, ``chainclient.signatures``); this module only does
the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
except ImportError as exc:  # pragma: no cover - tests run this in a subprocess without cryptography
    raise ImportError(
        'chainclient.integrations.verify needs the cryptography library: pip install "chainclient[verify]"'
    ) from exc

Check = Callable[[bytes, bytes], bool]
"""``check(signature, message)``: whether ``signature`` is the key's signature of ``message``."""


def public_key(raw: bytes) -> Check:
    """The check for the raw 32-byte Ed25519 public key ``raw``; ValueError if it is not one.

    The key is loaded once, here, so verifying a document costs one signature check.
    """
    key = Ed25519PublicKey.from_public_bytes(raw)

    def check(signature: bytes, message: bytes) -> bool:
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    return check


__all__ = ["Check", "public_key"]
