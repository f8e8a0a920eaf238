"""Signed chain documents: every document a service reads carries an Ed25519 signature
(DESIGN §14), so a relay, cache, static host or proxy that alters one is refused by services
that trust the control plane's keys.

What a signature covers is written once, in the SDK's wire module (``wire.signed_content``:
the whole document, the signature's ``alg``, ``key_id`` and ``signed_at`` included). Keys:
``create_key`` adds one (the first signs at once; a later one waits to be activated, so
services can be told to trust it first), ``activate_key`` makes it the one that signs and
keeps the one it replaces trusted for the overlap (``SIGNING_KEY_OVERLAP_HOURS``), and
``retire_key`` ends a key's trust. Each is recorded in the access history with its actor.
``manage.py signing_keys`` runs them.

Documents are signed where they are made for services: the change's notification (so a
change is signed once, in its transaction, and every web process serves those bytes) and
the read path's and API's own reads. Each process keeps the signing key for
``SIGNER_CACHE_S`` before it reads it again, so an activated key signs everywhere within
that (the read path then signs its held documents again). Without any key, documents go
out unsigned, as before keys existed.

Private keys are stored sealed (``presets/key_sealing.py``). A process that cannot open the
key that signs (another ``SIGNING_KEYS_SECRET`` than the one it was sealed with) never sends
a document unsigned in its place: signing raises ``SealedKeyError`` (the API answers 503,
a change is refused with nothing written, the read front keeps what it holds) and
``/readyz`` answers 503 with the same words, so the process is taken out of rotation and the
deploy stops there. ``reseal_keys`` (``manage.py signing_keys reseal``) seals every key with
this process's secret, after a rotation of ``SIGNING_KEYS_SECRET`` or ``SECRET_KEY``.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from presets import events, key_sealing
from presets.access_history import record_access_change
from presets.documents import ChainDocument, SignatureDocument, format_instant, format_time
from presets.exceptions import InvalidInput, NotFound
from presets.expiry import has_passed
from presets.key_sealing import SealedKeyError
from presets.models import AccessAction, SigningKey
from presets.wire import SIGNATURE_ALGORITHM, signed_content

SIGNER_CACHE_S = 5.0


def encode(raw: bytes) -> str:
    """base64url without padding, as keys and signatures are written."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- signing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signer:
    """The key that signs now."""

    key_id: str
    private_key: Ed25519PrivateKey

    def sign(self, document: ChainDocument, *, now: datetime | None = None) -> ChainDocument:
        """``document`` with its signature (a copy; the given one is left as it is)."""
        signed = document.copy()
        signed["signature"] = SignatureDocument(
            alg=SIGNATURE_ALGORITHM, key_id=self.key_id, signed_at=format_instant(now or timezone.now()), value=""
        )
        signed["signature"]["value"] = encode(self.private_key.sign(signed_content(signed)))
        return signed


_lock = threading.Lock()
_cached: tuple[float, Signer | SealedKeyError | None] | None = None


def current_signer() -> Signer | None:
    """The key that signs now (None when there is none), read from the database at most every
    ``SIGNER_CACHE_S`` by each process. Raises SealedKeyError (kept as long) when this process
    cannot open it: never None in its place, which would send documents unsigned."""
    global _cached
    cached = _cached
    if cached is None or time.monotonic() - cached[0] >= SIGNER_CACHE_S:
        try:
            found: Signer | SealedKeyError | None = signer_now()
        except SealedKeyError as exc:
            found = exc
        with _lock:
            _cached = cached = (time.monotonic(), found)
    if isinstance(cached[1], SealedKeyError):
        raise cached[1]
    return cached[1]


def signer_now() -> Signer | None:
    """The key that signs, read from the database now, not from this process's cache: for work
    that must sign with a key activated by another process a moment ago (publishing). Raises
    SealedKeyError when this process cannot open it."""
    key = signing_key()
    return None if key is None else Signer(key.key_id, private_key_of(key))


def private_key_of(key: SigningKey) -> Ed25519PrivateKey:
    """``key``'s private half, opened; raises SealedKeyError when this process cannot open it
    or it is not the private half of the key's public one."""
    raw = key_sealing.unseal(key.sealed_private_key, sealed_with=key.sealed_with, key_id=key.key_id)
    try:
        private = Ed25519PrivateKey.from_private_bytes(raw)
    except ValueError:
        private = None
    if private is None or encode(_public_bytes(private)) != key.public_key:
        raise SealedKeyError(f"signing key {key.key_id}'s sealed private half does not match its public key")
    return private


def signing_problem() -> str | None:
    """Why this process cannot sign now (for /readyz), or None when it can (or has no key)."""
    try:
        current_signer()
    except SealedKeyError as exc:
        return str(exc)
    return None


def _public_bytes(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _private_bytes(private: Ed25519PrivateKey) -> bytes:
    return private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def forget_signer(*_: Any, **__: Any) -> None:
    """Read the signing key again at the next signature (after a key changed in this process;
    a ``post_save`` and ``post_delete`` receiver for ``SigningKey``)."""
    global _cached
    with _lock:
        _cached = None


post_save.connect(forget_signer, sender=SigningKey, dispatch_uid="presets.signing.forget_signer.save")
post_delete.connect(forget_signer, sender=SigningKey, dispatch_uid="presets.signing.forget_signer.delete")


def sign(document: ChainDocument) -> ChainDocument:
    """``document`` signed by the current key, or as it is when there is no key; raises
    SealedKeyError when there is one this process cannot open."""
    signer = current_signer()
    return document if signer is None else signer.sign(document)


def signed_by(document: ChainDocument) -> str | None:
    """The key id a document was signed with (None: unsigned)."""
    signature = document.get("signature")
    return signature["key_id"] if signature else None


# --- keys -----------------------------------------------------------------------------------


def signing_key() -> SigningKey | None:
    return (
        SigningKey.objects.filter(activated_at__isnull=False, retires_at__isnull=True)
        .order_by("-activated_at", "-id")
        .first()
    )


def trusted_keys(*, now: datetime | None = None) -> list[SigningKey]:
    """The keys services should trust now: the one that signs, any created to sign next, and
    those replaced whose overlap has not ended."""
    now = now or timezone.now()
    return [key for key in SigningKey.objects.all() if key.retires_at is None or not has_passed(key.retires_at, now)]


def state_of(key: SigningKey, *, now: datetime, signing: SigningKey | None) -> str:
    """A key's state in words: "signs", "next", "trusted until ...", "retired ..."."""
    if signing is not None and key.pk == signing.pk:
        return "signs"
    if key.retires_at is not None:
        if has_passed(key.retires_at, now):
            return f"retired {format_time(key.retires_at)}"
        return f"trusted until {format_time(key.retires_at)} (overlap)"
    return "next: trust it, then activate it"


def _new_key_id(now: datetime) -> str:
    return f"{now:%Y-%m-%d}-{secrets.token_hex(3)}"


def create_key(*, actor: str, activate: bool = False) -> SigningKey:
    """Add a key. The first one signs at once; a later one signs only once activated (or at
    once with ``activate``, which leaves services that do not trust it yet refusing documents
    until they do)."""
    now = timezone.now()
    private = Ed25519PrivateKey.generate()
    key_id = _new_key_id(now)
    sealed, sealed_with = key_sealing.seal(_private_bytes(private), key_id=key_id)
    with transaction.atomic():
        keys = list(SigningKey.objects.select_for_update().order_by("id"))
        key = SigningKey.objects.create(
            key_id=key_id,
            public_key=encode(_public_bytes(private)),
            sealed_private_key=sealed,
            sealed_with=sealed_with,
            created_at=now,
        )
        record_access_change(
            actor=actor, action=AccessAction.KEY_CREATED, subject=key.key_id, details={"public_key": key.public_key}
        )
        if activate or not any(k.activated_at is not None for k in keys):
            _activate(key, keys=keys, actor=actor, now=now)
    return key


def activate_key(*, key_id: str, actor: str) -> SigningKey:
    """Make ``key_id`` the key that signs; the one it replaces stays trusted for the overlap."""
    now = timezone.now()
    with transaction.atomic():
        keys = list(SigningKey.objects.select_for_update().order_by("id"))
        key = _find(keys, key_id)
        if key.retires_at is not None:
            raise InvalidInput("key_id", f"key {key_id!r} was retired; create a new key instead")
        signing = signing_key()
        if signing is not None and signing.pk == key.pk:
            raise InvalidInput("key_id", f"key {key_id!r} already signs")
        _activate(key, keys=keys, actor=actor, now=now)
    return key


def retire_key(*, key_id: str, actor: str) -> SigningKey:
    """Stop listing ``key_id`` as trusted now (services given the list drop it; documents it
    signed are refused by those that do). The key that signs cannot be retired."""
    now = timezone.now()
    with transaction.atomic():
        keys = list(SigningKey.objects.select_for_update().order_by("id"))
        key = _find(keys, key_id)
        signing = signing_key()
        if signing is not None and signing.pk == key.pk:
            raise InvalidInput(
                "key_id", f"key {key_id!r} signs the documents: activate another key first, then retire this one"
            )
        if key.retires_at is not None and has_passed(key.retires_at, now):
            raise InvalidInput("key_id", f"key {key_id!r} was already retired at {format_time(key.retires_at)}")
        key.retires_at = now
        key.save(update_fields=["retires_at"])
        record_access_change(actor=actor, action=AccessAction.KEY_RETIRED, subject=key.key_id)
    return key


@dataclass(frozen=True)
class Resealed:
    """What ``reseal_keys`` did to one key."""

    key: SigningKey
    # The secret it was sealed with, in words (``key_sealing.describe``), and whether it was
    # sealed anew.
    was: str
    resealed: bool


def reseal_keys(*, actor: str) -> list[Resealed]:
    """Seal every key with this process's sealing key (``SIGNING_KEYS_SECRET``, or the one
    derived from ``SECRET_KEY``), opening each with the key it was sealed with (the current
    one, a ``SIGNING_KEYS_SECRET_FALLBACKS`` entry, or ``SECRET_KEY``'s). All or nothing: a
    key still trusted that does not open raises SealedKeyError and nothing changes; a retired
    one that does not open is left as it is (it signs nothing again). Each key sealed anew is
    recorded in the access history."""
    now = timezone.now()
    current = key_sealing.sealing_key()
    done: list[Resealed] = []
    with transaction.atomic():
        for key in SigningKey.objects.select_for_update().order_by("id"):
            was = key_sealing.describe(key.sealed_with)
            if key.sealed_with == current.fingerprint:
                done.append(Resealed(key, was, resealed=False))
                continue
            try:
                private = private_key_of(key)
            except SealedKeyError:
                if key.retires_at is not None and has_passed(key.retires_at, now):
                    done.append(Resealed(key, was, resealed=False))
                    continue
                raise
            previous = key.sealed_with
            key.sealed_private_key, key.sealed_with = key_sealing.seal(
                _private_bytes(private), key_id=key.key_id, with_key=current
            )
            key.save(update_fields=["sealed_private_key", "sealed_with"])
            record_access_change(
                actor=actor,
                action=AccessAction.KEY_RESEALED,
                subject=key.key_id,
                details={"sealed_with": previous, "resealed_with": current.fingerprint},
            )
            done.append(Resealed(key, was, resealed=True))
    return done


def _find(keys: list[SigningKey], key_id: str) -> SigningKey:
    for key in keys:
        if key.key_id == key_id:
            return key
    raise NotFound(f"no signing key {key_id!r} (manage.py signing_keys list lists them)", details={"key_id": key_id})


def _activate(key: SigningKey, *, keys: list[SigningKey], actor: str, now: datetime) -> None:
    overlap_until = now + timedelta(hours=settings.SIGNING_KEY_OVERLAP_HOURS)
    replaced = [k for k in keys if k.activated_at is not None and k.retires_at is None and k.pk != key.pk]
    for old in replaced:
        old.retires_at = overlap_until
        old.save(update_fields=["retires_at"])
    key.activated_at = now
    key.save(update_fields=["activated_at"])
    events.signing_key_activated.send(sender=SigningKey, key=key)
    record_access_change(
        actor=actor,
        action=AccessAction.KEY_ACTIVATED,
        subject=key.key_id,
        details={"replaces": [k.key_id for k in replaced], "replaced_trusted_until": format_time(overlap_until)},
    )
