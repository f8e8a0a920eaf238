"""The signing keys' private halves, sealed with a key kept outside the database.

A database dump (a backup, a replica, a support bundle) must not be enough to sign documents
every service trusts, so ``SigningKey.sealed_private_key`` holds the raw Ed25519 private key
encrypted with AES-256-GCM under a *sealing key* the database never holds:

- ``SIGNING_KEYS_SECRET`` (or the file ``SIGNING_KEYS_SECRET_FILE`` names), when set;
- else a key derived from ``SECRET_KEY``, itself kept outside the database (the environment
  or ``var/secret_key``), so ``make run`` and existing deployments need nothing new.

The sealing key is HKDF-SHA256 of the secret (a different ``info`` for each kind), and so is
its *fingerprint* (12 hex digits, from bits independent of the key's): each row stores the
fingerprint it was sealed with (``sealed_with``), so a process given another secret says
which one it needs instead of failing to decrypt. The key id is the ciphertext's associated
data: a sealed key copied into another key's row does not open.

Secrets listed in ``SIGNING_KEYS_SECRET_FALLBACKS`` (an old ``SIGNING_KEYS_SECRET``, or an old
``SECRET_KEY`` the keys were sealed with a key derived from) still open keys; ``manage.py
signing_keys reseal`` seals every key anew with the current one.

No models here: the migration that sealed the keys stored in clear imports this module.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

NONCE_BYTES = 12
FROM_SIGNING_KEYS_SECRET = b"controlplane signing keys sealed with SIGNING_KEYS_SECRET, v1"
FROM_SECRET_KEY = b"controlplane signing keys sealed with a key derived from SECRET_KEY, v1"


class SealedKeyError(Exception):
    """A signing key this process cannot open: sealed with a secret it does not have, or
    altered. The message says which secret it needs."""


@dataclass(frozen=True)
class SealingKey:
    """A key private signing keys are sealed with, where it comes from, and its fingerprint."""

    key: bytes
    fingerprint: str
    # Where the secret comes from, in words: "SIGNING_KEYS_SECRET", "a key derived from SECRET_KEY", ...
    source: str

    def __str__(self) -> str:
        return f"{self.source} (fingerprint {self.fingerprint})"


def _derive(secret: str, *, info: bytes, source: str) -> SealingKey:
    material = HKDF(algorithm=SHA256(), length=38, salt=None, info=info).derive(secret.encode("utf-8"))
    return SealingKey(key=material[:32], fingerprint=material[32:].hex(), source=source)


def sealing_key() -> SealingKey:
    """The key this process seals with: ``SIGNING_KEYS_SECRET``'s, else ``SECRET_KEY``'s."""
    if settings.SIGNING_KEYS_SECRET:
        source = (
            f"SIGNING_KEYS_SECRET_FILE {settings.SIGNING_KEYS_SECRET_FILE}"
            if settings.SIGNING_KEYS_SECRET_FILE
            else "SIGNING_KEYS_SECRET"
        )
        return _derive(settings.SIGNING_KEYS_SECRET, info=FROM_SIGNING_KEYS_SECRET, source=source)
    return _derive(settings.SECRET_KEY, info=FROM_SECRET_KEY, source="a key derived from SECRET_KEY")


def opening_keys() -> list[SealingKey]:
    """Every key this process can open sealed keys with, the one it seals with first: then each
    of ``SIGNING_KEYS_SECRET_FALLBACKS`` (as an old ``SIGNING_KEYS_SECRET`` and as an old
    ``SECRET_KEY``), and ``SECRET_KEY``'s own when a ``SIGNING_KEYS_SECRET`` seals now."""
    current = sealing_key()
    keys = [current]
    for number, old in enumerate(settings.SIGNING_KEYS_SECRET_FALLBACKS, start=1):
        entry = f"SIGNING_KEYS_SECRET_FALLBACKS entry {number}"
        keys.append(_derive(old, info=FROM_SIGNING_KEYS_SECRET, source=entry))
        keys.append(_derive(old, info=FROM_SECRET_KEY, source=f"a key derived from {entry} (an old SECRET_KEY)"))
    if settings.SIGNING_KEYS_SECRET:
        keys.append(_derive(settings.SECRET_KEY, info=FROM_SECRET_KEY, source="a key derived from SECRET_KEY"))
    return keys


def _associated_data(key_id: str) -> bytes:
    return b"controlplane signing key " + key_id.encode("utf-8")


def seal(private_key: bytes, *, key_id: str, with_key: SealingKey | None = None) -> tuple[str, str]:
    """``private_key`` (raw bytes) sealed for the row of ``key_id``: (the sealed text, base64url
    without padding, and the fingerprint of the key that sealed it)."""
    sealing = with_key or sealing_key()
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + AESGCM(sealing.key).encrypt(nonce, private_key, _associated_data(key_id))
    return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii"), sealing.fingerprint


def opening_key(sealed_with: str) -> SealingKey | None:
    """The key of this process that has fingerprint ``sealed_with`` (None: it has none)."""
    return next((key for key in opening_keys() if key.fingerprint == sealed_with), None)


def unseal(sealed: str, *, sealed_with: str, key_id: str) -> bytes:
    """The raw private key of ``key_id``; raises SealedKeyError, saying which secret it needs,
    when this process has no key with fingerprint ``sealed_with`` or the sealed text does not
    open (altered, or copied from another key's row)."""
    key = opening_key(sealed_with)
    if key is None:
        raise SealedKeyError(
            f"signing key {key_id} was sealed with secret fingerprint {sealed_with}, this process has "
            f"{sealing_key().fingerprint} ({sealing_key().source}); set SIGNING_KEYS_SECRET to the one it was "
            "sealed with (or SECRET_KEY, if no SIGNING_KEYS_SECRET sealed it), or list that secret in "
            "SIGNING_KEYS_SECRET_FALLBACKS and run manage.py signing_keys reseal"
        )
    raw = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
    try:
        return AESGCM(key.key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated_data(key_id))
    except (InvalidTag, ValueError):
        raise SealedKeyError(
            f"signing key {key_id} does not open with {key}, the secret it was sealed with: its row was "
            "altered or copied from another key's; create and activate a new key"
        ) from None


def describe(sealed_with: str) -> str:
    """The secret of fingerprint ``sealed_with`` in words, as this process knows it."""
    key = opening_key(sealed_with)
    return str(key) if key is not None else f"an unknown secret (fingerprint {sealed_with})"


def where_sealed(sealed_with: str) -> str:
    """Where a key's private half is kept, for ``manage.py signing_keys list``."""
    current = sealing_key()
    if sealed_with == current.fingerprint:
        return f"sealed with {current}"
    if opening_key(sealed_with) is None:
        return f"sealed with {describe(sealed_with)}: this process cannot sign with it"
    return f"sealed with {describe(sealed_with)}: manage.py signing_keys reseal seals it with {current}"
