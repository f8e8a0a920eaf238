"""Private signing keys sealed outside the database (issue 53): a real ``pg_dump`` holds no key
that signs; keys stored in clear before migration 0013 are sealed by it and keep signing under
the public keys services already trust (and the migration goes back); a process given another
secret says which one it needs, answers 503 on /readyz and on reads instead of sending
documents unsigned, and changes nothing; ``signing_keys reseal`` seals every key with a new
secret (an old SIGNING_KEYS_SECRET or SECRET_KEY in SIGNING_KEYS_SECRET_FALLBACKS)."""

from __future__ import annotations

import base64
import binascii
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from presets import key_sealing, signing
from presets.models import AccessChange, SigningKey
from tests.conftest import needs
from tests.settings_env import load_settings
from tests.test_read_front import auth
from tests.test_signing import keys, trusted, verify

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

SECRET_A = "a" * 8 + "-first-signing-keys-secret-0123456789"
SECRET_B = "b" * 8 + "-second-signing-keys-secret-987654321"
BEFORE, AFTER = ("presets", "0012_token_evidence"), ("presets", "0013_signing_keys_sealed")


def clear_private(key: SigningKey) -> bytes:
    """The raw private half, opened the way the control plane opens it."""
    return signing.private_key_of(key).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def read(token: str) -> Any:
    return Client(headers=auth(token)).get("/api/v1/chains/chat")


@pytest.fixture
def secret(settings: Any) -> Iterator[Any]:
    """Settings whose sealing secrets a test changes; the signer read again after each change."""
    signing.forget_signer()
    yield settings
    signing.forget_signer()


def use(settings: Any, *, secret: str = "", fallbacks: list[str] | None = None, secret_key: str = "") -> None:
    settings.SIGNING_KEYS_SECRET = secret
    settings.SIGNING_KEYS_SECRET_FILE = ""
    settings.SIGNING_KEYS_SECRET_FALLBACKS = fallbacks or []
    if secret_key:
        settings.SECRET_KEY = secret_key
    signing.forget_signer()


# --- a database dump cannot sign ------------------------------------------------------------------


def _pg_dump() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"))
    program = found[-1] if found else shutil.which("pg_dump")
    if program is None:
        needs("needs PostgreSQL's pg_dump")
    return program


def _candidates(text: str) -> Iterator[bytes]:
    """Every byte string a value of the dump could be read as: itself, and its base64url,
    base64 and hex decodings."""
    yield text.encode()
    for decode in (
        lambda t: base64.urlsafe_b64decode(t + "=" * (-len(t) % 4)),
        lambda t: base64.b64decode(t + "=" * (-len(t) % 4)),
        bytes.fromhex,
    ):
        try:
            yield decode(text)
        except (ValueError, binascii.Error):
            pass


@pytest.mark.system
@pytest.mark.postgres
def test_a_pg_dump_of_the_database_holds_no_private_key_that_signs(tmp_path: Path, secret: Any) -> None:
    keys("create")
    keys("create")
    keys("create", "--activate")
    stored = list(SigningKey.objects.order_by("id"))
    assert len(stored) == 3
    clear = {key.key_id: clear_private(key) for key in stored}

    db = connection.settings_dict
    dump = subprocess.run(
        [_pg_dump(), "-h", db["HOST"] or "127.0.0.1", "-p", str(db["PORT"] or 5432), "-U", db["USER"], db["NAME"]],
        env={**os.environ, "PGPASSWORD": db.get("PASSWORD") or ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    table = re.search(r"^COPY public\.presets_signingkey \((.*?)\) FROM stdin;\n(.*?)^\\\.$", dump, re.M | re.S)
    assert table is not None, "the dump has no presets_signingkey table"
    columns = table.group(1).split(", ")
    assert "private_key" not in columns and {"sealed_private_key", "sealed_with"} <= set(columns)
    rows = [line.split("\t") for line in table.group(2).splitlines()]
    assert {row[columns.index("key_id")] for row in rows} == set(clear)

    for raw in clear.values():  # the clear key, however written, is nowhere in the dump
        for written in (signing.encode(raw), base64.b64encode(raw).decode(), raw.hex()):
            assert written not in dump

    # Whatever the table's values are read as, no 32 bytes of them (at any offset) sign a
    # message that any of the public keys verifies.
    publics = [Ed25519PublicKey.from_public_bytes(signing.decode(row[columns.index("public_key")])) for row in rows]
    message = b"a chain document an attacker would like services to trust"
    tried = 0
    for row in rows:
        for value in row:
            for candidate in _candidates(value):
                for start in range(max(len(candidate) - 31, 0)):
                    forged = Ed25519PrivateKey.from_private_bytes(candidate[start : start + 32]).sign(message)
                    tried += 1
                    for public in publics:
                        with pytest.raises(InvalidSignature):
                            public.verify(forged, message)
    assert tried > 100  # the sealed values were among them


def test_keys_are_sealed_rotate_and_sign_as_before(read_token: str, secret: Any) -> None:
    out = keys("create")
    first = SigningKey.objects.get()
    derived = key_sealing.sealing_key()
    assert derived.source == "a key derived from SECRET_KEY"
    assert first.sealed_with == derived.fingerprint and len(derived.fingerprint) == 12
    assert signing.encode(clear_private(first)) not in first.sealed_private_key
    assert f"sealed with a key derived from SECRET_KEY (fingerprint {derived.fingerprint})" in keys("list")
    assert "created signing key" in out

    use(secret, secret=SECRET_A)
    keys("create")
    second = SigningKey.objects.exclude(pk=first.pk).get()
    sealed_a = key_sealing.sealing_key().fingerprint
    assert second.sealed_with == sealed_a != derived.fingerprint
    listed = keys("list")
    assert (
        f"{second.key_id}  created" in listed and f"sealed with SIGNING_KEYS_SECRET (fingerprint {sealed_a})" in listed
    )
    # The first key still opens (SECRET_KEY's), and says how to seal it with the new secret.
    assert "manage.py signing_keys reseal seals it with SIGNING_KEYS_SECRET" in listed
    assert verify(read(read_token).json(), trusted()) == first.key_id

    keys("activate", second.key_id)
    assert verify(read(read_token).json(), trusted()) == second.key_id
    keys("retire", first.key_id)
    assert set(trusted()) == {second.key_id}
    assert verify(read(read_token).json(), trusted()) == second.key_id


# --- keys stored in clear before migration 0013 -----------------------------------------------------


@pytest.fixture
def executor() -> Iterator[MigrationExecutor]:
    """Migrations run back and forth; the database is left fully migrated whatever happens."""
    yield MigrationExecutor(connection)
    latest = MigrationExecutor(connection)
    latest.migrate(latest.loader.graph.leaf_nodes())


@pytest.mark.system
def test_migration_0013_seals_clear_keys_that_keep_verifying_and_goes_back(
    executor: MigrationExecutor, read_token: str, secret: Any
) -> None:
    executor.migrate([BEFORE])
    old_model = executor.loader.project_state([BEFORE]).apps.get_model("presets", "SigningKey")
    private = Ed25519PrivateKey.generate()
    raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    old_model.objects.create(
        key_id="2026-12-01-0ld0ld",
        public_key=signing.encode(public),
        private_key=signing.encode(raw),
        activated_at=timezone.now(),
    )
    trusted_before = {"2026-12-01-0ld0ld": signing.encode(public)}

    forward = MigrationExecutor(connection)
    forward.migrate([AFTER])
    key = SigningKey.objects.get()
    assert (key.key_id, key.public_key) == ("2026-12-01-0ld0ld", signing.encode(public))
    assert key.sealed_with == key_sealing.sealing_key().fingerprint
    assert signing.encode(raw) not in key.sealed_private_key and clear_private(key) == raw
    signing.forget_signer()
    assert trusted() == trusted_before
    # Serving reads the whole schema: bring the later migrations in before reading.
    latest = MigrationExecutor(connection)
    latest.migrate(latest.loader.graph.leaf_nodes())
    assert verify(read(read_token).json(), trusted_before) == "2026-12-01-0ld0ld"

    # Back: the key in clear again, as it was.
    back = MigrationExecutor(connection)
    back.migrate([BEFORE])
    old_model = back.loader.project_state([BEFORE]).apps.get_model("presets", "SigningKey")
    assert old_model.objects.get().private_key == signing.encode(raw)


# --- another secret than the one a key was sealed with ---------------------------------------------


def test_a_wrong_secret_says_which_one_it_needs_and_never_signs_with_nothing(
    read_token: str, write_token: str, secret: Any, is_postgres: bool, oncall: Client
) -> None:
    use(secret, secret=SECRET_A)
    keys("create")
    key = SigningKey.objects.get()
    sealed_a = key.sealed_with
    verify(read(read_token).json(), trusted())

    use(secret, secret=SECRET_B)
    has = key_sealing.sealing_key().fingerprint
    expected = (
        f"signing key {key.key_id} was sealed with secret fingerprint {sealed_a}, this process has {has} "
        "(SIGNING_KEYS_SECRET); set SIGNING_KEYS_SECRET to the one it was sealed with"
    )
    with pytest.raises(key_sealing.SealedKeyError) as raised:
        signing.current_signer()
    assert str(raised.value).startswith(expected)
    with pytest.raises(key_sealing.SealedKeyError):  # kept, not a crash nor None meanwhile
        signing.sign({"name": "chat"})  # type: ignore[typeddict-item]

    ready = Client().get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["message"] == f"cannot sign chain documents: {raised.value}"
    answer = read(read_token)  # never a document unsigned in place of a signed one
    assert answer.status_code == 503 and "signature" not in answer.content.decode()
    assert answer.json()["error"]["code"] == "unavailable"
    assert f"sealed with an unknown secret (fingerprint {sealed_a}): this process cannot sign with it" in keys("list")
    if is_postgres:  # a change signs its notification in its transaction: refused, nothing written
        changed = Client(headers=auth(write_token)).post(
            "/api/v1/chains/chat/select",
            {"preset": "pin_secondary", "reason": "INC-9", "expected_version": 1},
            content_type="application/json",
        )
        assert changed.status_code == 503, changed.content
        page = oncall.post(
            "/chains/chat/select",
            {
                "preset": "pin_secondary",
                "reason": "INC-9",
                "duration_minutes": "60",
                "expected_version": "1",
                "confirmed": "yes",
            },
        )
        assert page.status_code == 503  # a page that says so, never a 500
        assert "This control plane process cannot sign chain documents" in page.content.decode()

    # The right secret back: ready, and signing with the same key as before; nothing changed.
    use(secret, secret=SECRET_A)
    assert Client().get("/readyz").status_code == 200
    document = read(read_token).json()
    assert verify(document, trusted()) == key.key_id and document["version"] == 1


def test_a_sealed_key_copied_into_another_row_does_not_open(secret: Any) -> None:
    keys("create")
    keys("create")
    first, second = SigningKey.objects.order_by("id")
    SigningKey.objects.filter(pk=second.pk).update(sealed_private_key=first.sealed_private_key)
    second.refresh_from_db()
    with pytest.raises(key_sealing.SealedKeyError, match=f"signing key {second.key_id} does not open with"):
        signing.private_key_of(second)


# --- resealing with a new secret ------------------------------------------------------------------


def test_reseal_with_a_new_signing_keys_secret(read_token: str, secret: Any) -> None:
    use(secret, secret=SECRET_A)
    keys("create")
    keys("create")
    before = {key.key_id: clear_private(key) for key in SigningKey.objects.all()}
    public = trusted()

    use(secret, secret=SECRET_B)
    with pytest.raises(CommandError, match="nothing resealed: signing key .* was sealed with secret fingerprint"):
        keys("reseal")
    assert not AccessChange.objects.filter(action="key_resealed").exists()

    use(secret, secret=SECRET_B, fallbacks=[SECRET_A])
    new = key_sealing.sealing_key()
    assert verify(read(read_token).json(), public)  # a fallback still opens it
    assert "sealed with SIGNING_KEYS_SECRET_FALLBACKS entry 1" in keys("list")
    out = keys("reseal")
    for key_id in before:
        assert f"{key_id}: resealed with SIGNING_KEYS_SECRET (fingerprint {new.fingerprint}) (was " in out
    assert "already sealed" in keys("reseal")  # twice: nothing more to do
    resealed = AccessChange.objects.filter(action="key_resealed").order_by("id")
    assert sorted(change.subject for change in resealed) == sorted(before)
    assert resealed[0].details["resealed_with"] == new.fingerprint

    use(secret, secret=SECRET_B)  # the old secret no longer needed
    assert {key.key_id: clear_private(key) for key in SigningKey.objects.all()} == before
    assert trusted() == public
    assert verify(read(read_token).json(), public)


def test_reseal_after_a_secret_key_rotation(read_token: str, secret: Any) -> None:
    old_secret_key = secret.SECRET_KEY
    keys("create")
    public = trusted()
    use(secret, secret_key="a-new-secret-key-" + "k" * 40 + "0123456789")
    with pytest.raises(key_sealing.SealedKeyError, match="this process has .* \\(a key derived from SECRET_KEY\\)"):
        signing.current_signer()
    use(secret, fallbacks=[old_secret_key])
    assert "(an old SECRET_KEY)" in keys("list")
    assert "resealed with a key derived from SECRET_KEY" in keys("reseal")
    use(secret)
    assert verify(read(read_token).json(), public)


# --- the settings ---------------------------------------------------------------------------------


def test_the_sealing_secret_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear = ("SIGNING_KEYS_",)
    assert load_settings(monkeypatch, {}, clear=clear)["SIGNING_KEYS_SECRET"] == ""
    assert load_settings(monkeypatch, {"SIGNING_KEYS_SECRET": SECRET_A}, clear=clear)["SIGNING_KEYS_SECRET"] == SECRET_A
    path = tmp_path / "signing_keys_secret"
    path.write_text(SECRET_B + "\n")
    loaded = load_settings(monkeypatch, {"SIGNING_KEYS_SECRET_FILE": str(path)}, clear=clear)
    assert (loaded["SIGNING_KEYS_SECRET"], loaded["SIGNING_KEYS_SECRET_FILE"]) == (SECRET_B, str(path))
    loaded = load_settings(monkeypatch, {"SIGNING_KEYS_SECRET_FALLBACKS": f"{SECRET_A}, {SECRET_B}"}, clear=clear)
    assert loaded["SIGNING_KEYS_SECRET_FALLBACKS"] == [SECRET_A, SECRET_B]

    refused = {
        "SIGNING_KEYS_SECRET is too short (5 characters, fewer than 32)": {"SIGNING_KEYS_SECRET": "short"},
        "SIGNING_KEYS_SECRET and SIGNING_KEYS_SECRET_FILE are both set": {
            "SIGNING_KEYS_SECRET": SECRET_A,
            "SIGNING_KEYS_SECRET_FILE": str(path),
        },
        f"SIGNING_KEYS_SECRET_FILE='{tmp_path / 'nope'}' cannot be read": {
            "SIGNING_KEYS_SECRET_FILE": str(tmp_path / "nope")
        },
        "an entry of SIGNING_KEYS_SECRET_FALLBACKS is too short": {"SIGNING_KEYS_SECRET_FALLBACKS": f"{SECRET_A},x"},
    }
    for message, environment in refused.items():
        with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
            load_settings(monkeypatch, environment, clear=clear)
    path.write_text("too short\n")
    with pytest.raises(ImproperlyConfigured, match="the secret in SIGNING_KEYS_SECRET_FILE=.* is too short"):
        load_settings(monkeypatch, {"SIGNING_KEYS_SECRET_FILE": str(path)}, clear=clear)


def test_the_command_reseal_is_documented_with_its_settings() -> None:
    from django.conf import settings

    configuration = (Path(settings.BASE_DIR) / "docs" / "configuration.md").read_text()
    for name in ("SIGNING_KEYS_SECRET", "SIGNING_KEYS_SECRET_FILE", "SIGNING_KEYS_SECRET_FALLBACKS"):
        assert f"`{name}`" in configuration
    assert "signing_keys reseal" in configuration
    out = StringIO()
    call_command("signing_keys", "reseal", stdout=out, stderr=StringIO())
    assert out.getvalue() == "no signing key yet: nothing to reseal\n"
