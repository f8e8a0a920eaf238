"""The relay's parts that need no server: its settings' errors, the order in which documents on
disk replace one another, the token verdicts its worker processes share, and what it believes
(its trusted keys, a kept document that does not verify, a degraded chain's reasons)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from presets.document_signatures import BAD_SIGNATURE, UNTRUSTED_KEY, PublicKeys, Refusal
from presets.wire import SIGNATURE_ALGORITHM, signed_content
from relay import disk
from relay.config import ConfigError, from_env
from relay.evidence import Degradation, TrustedKeys


def document(version: int, *, epoch: int = 0, signed_at: str = "2026-12-04T10:00:00.000Z", key: str = "k1") -> bytes:
    return json.dumps(
        {
            "name": "chat",
            "epoch": epoch,
            "version": version,
            "expires_at": None,
            "signature": {"alg": "Ed25519", "key_id": key, "signed_at": signed_at, "value": "x"},
        },
        separators=(",", ":"),
    ).encode()


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({}, "RELAY_UPSTREAM must be the http(s) URL"),
        ({"RELAY_UPSTREAM": "ftp://x"}, "RELAY_UPSTREAM must be the http(s) URL"),
        ({"RELAY_UPSTREAM": "https://cp.example"}, "set RELAY_TOKEN"),
        ({"RELAY_UPSTREAM": "https://cp.example", "RELAY_TOKEN_FILE": "/nonexistent"}, "cannot be read"),
        (
            {"RELAY_UPSTREAM": "https://cp.example", "RELAY_TOKEN": "t", "RELAY_TOKEN_CACHE_SECONDS": "0"},
            "RELAY_TOKEN_CACHE_SECONDS must be within 1..300",
        ),
        (
            {"RELAY_UPSTREAM": "https://cp.example", "RELAY_TOKEN": "t", "RELAY_TOKEN_CACHE_SECONDS": "ten"},
            "RELAY_TOKEN_CACHE_SECONDS must be a whole number",
        ),
    ],
)
def test_a_wrong_setting_says_which_and_how_to_fix_it(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        from_env(environ)


def test_the_settings_default_to_a_short_token_cache() -> None:
    config = from_env({"RELAY_UPSTREAM": "https://cp.example/", "RELAY_TOKEN": "cpt_x"})
    assert (config.upstream, config.token_cache_s, config.documents_dir) == (
        "https://cp.example",
        10,
        Path("var/relay/api/v1/chains"),
    )


def test_an_older_document_never_replaces_a_newer_one_on_disk(tmp_path: Path) -> None:
    v5, v4 = disk.entry_of(document(5)), disk.entry_of(document(4))
    assert disk.keep_document(tmp_path, v5)
    assert not disk.keep_document(tmp_path, v4)
    assert (tmp_path / "chat").read_bytes() == document(5)
    # A raised epoch makes lower versions newer.
    restored = disk.entry_of(document(2, epoch=1))
    assert disk.keep_document(tmp_path, restored)
    assert [entry.order for entry in disk.kept_documents(tmp_path)] == [(1, 2)]


def test_the_same_version_signed_later_replaces_it_and_not_the_other_way(tmp_path: Path) -> None:
    first = disk.entry_of(document(5, signed_at="2026-12-04T10:00:00.000Z", key="k1"))
    again = disk.entry_of(document(5, signed_at="2026-12-05T10:00:00.000Z", key="k2"))
    assert disk.keep_document(tmp_path, first)
    assert disk.keep_document(tmp_path, again)
    assert not disk.keep_document(tmp_path, first)
    assert disk.kept_documents(tmp_path)[0].key_id == "k2"
    # The same key signing the same version again adds nothing (the publisher's rule).
    resigned = disk.entry_of(document(5, signed_at="2026-12-06T10:00:00.000Z", key="k2"))
    assert not disk.newer(resigned, again)
    assert not disk.keep_document(tmp_path, resigned)
    assert (tmp_path / "chat").read_bytes() == document(5, signed_at="2026-12-05T10:00:00.000Z", key="k2")


def test_what_is_not_a_chain_document_is_not_kept_or_loaded(tmp_path: Path) -> None:
    for body in (
        b"not json",
        b'{"name": "../etc", "version": 1}',
        b'{"version": 1}',
        b'{"name": "chat", "version": "1"}',
        b'{"name": "chat", "version": 1, "expires_at": "soon"}',
    ):
        with pytest.raises(disk.NotADocument):
            disk.entry_of(body)
    (tmp_path / "chat").write_bytes(b"{broken")
    assert disk.kept_documents(tmp_path) == []


def test_token_verdicts_merge_across_workers_and_the_latest_wins(tmp_path: Path) -> None:
    tokens = disk.TokenFile(tmp_path / "tokens.json")
    a, b = disk.token_digest("cpt_a"), disk.token_digest("cpt_b")
    tokens.merge({a: (True, 100.0), b: (True, 100.0)})
    tokens.merge({a: (False, 200.0)})  # another worker heard it was revoked
    tokens.merge({a: (True, 150.0)})  # a late, older verdict does not bring it back
    assert tokens.load() == {b: 100.0}
    assert "cpt_" not in (tmp_path / "tokens.json").read_text()  # digests, never the tokens


# --- evidence: what a relay believes ---------------------------------------------------------


def signed(version: int, private: Ed25519PrivateKey, *, key_id: str = "cp-1", name: str = "chat") -> bytes:
    """A chain document signed as the control plane signs it (``wire.signed_content``)."""
    signature = {"alg": SIGNATURE_ALGORITHM, "key_id": key_id, "signed_at": "2026-12-06T10:00:00.000Z"}
    document = {"name": name, "epoch": 0, "version": version, "expires_at": None, "signature": signature}
    value = private.sign(signed_content(document))
    signature["value"] = base64.urlsafe_b64encode(value).rstrip(b"=").decode()
    return json.dumps(document, separators=(",", ":")).encode()


def public(private: Ed25519PrivateKey) -> str:
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"RELAY_TRUSTED_KEYS": "{"}, "RELAY_TRUSTED_KEYS: not JSON"),
        ({"RELAY_TRUSTED_KEYS": "{}"}, "RELAY_TRUSTED_KEYS: no key given"),
        ({"RELAY_TRUSTED_KEYS": '{"cp-1": "short"}'}, "RELAY_TRUSTED_KEYS: key 'cp-1' is not an Ed25519 public key"),
        ({"RELAY_TRUSTED_KEYS_FILE": "/nonexistent/keys.json"}, "RELAY_TRUSTED_KEYS_FILE '/nonexistent/keys.json'"),
        ({"RELAY_TRUSTED_KEYS": '{"a": "b"}', "RELAY_TRUSTED_KEYS_FILE": "/k"}, "not both"),
    ],
    ids=["not-json", "empty", "short-key", "missing-file", "both"],
)
def test_a_wrong_key_setting_stops_the_relay_saying_what_is_wrong(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        from_env({"RELAY_UPSTREAM": "https://cp.example", "RELAY_TOKEN": "t", **environ})


def test_a_keys_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({"cp-1": public(first)}))
    config = from_env(
        {"RELAY_UPSTREAM": "https://cp.example", "RELAY_TOKEN": "t", "RELAY_TRUSTED_KEYS_FILE": str(keys_file)}
    )
    trust = TrustedKeys(config.trusted_keys, config.trusted_keys_file)
    assert trust.refusal(signed(5, first)) is None
    refusal = trust.refusal(signed(6, second, key_id="cp-2"))
    assert refusal is not None and refusal.kind == UNTRUSTED_KEY
    keys_file.write_text(json.dumps({"cp-1": public(first), "cp-2": public(second)}))  # the rotation
    assert trust.refusal(signed(6, second, key_id="cp-2")) is None
    keys_file.write_text("{half a file")  # a mistake: the keys before stay, and it is said
    assert trust.refusal(signed(7, second, key_id="cp-2")) is None
    assert "not JSON" in trust.described()["trusted_keys_error"]


def test_without_keys_the_relay_says_verification_is_off() -> None:
    trust = TrustedKeys(None)
    assert trust.refusal(b"anything") is None
    assert trust.described()["verification"].startswith("off: no RELAY_TRUSTED_KEYS")


def test_a_kept_document_that_does_not_verify_is_not_loaded_and_does_not_block_the_next(tmp_path: Path) -> None:
    genuine_key, intruder = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trust = TrustedKeys(PublicKeys.parse({"cp-1": public(genuine_key)}, where="test"))
    (tmp_path / "chat").write_bytes(signed(99999, intruder))  # a forged, higher version
    assert disk.kept_documents(tmp_path) != []  # without keys it would be served
    assert disk.kept_documents(tmp_path, refusal=trust.refusal) == []
    genuine = disk.entry_of(signed(6, genuine_key))
    assert not disk.keep_document(tmp_path, genuine)  # the publisher's rule alone: "older"
    assert disk.keep_document(tmp_path, genuine, counts=trust.counts)
    assert (tmp_path / "chat").read_bytes() == genuine.body
    assert [entry.version for entry in disk.kept_documents(tmp_path, refusal=trust.refusal)] == [6]


def test_a_degraded_chain_says_its_latest_reason_and_logs_each_reason_once() -> None:
    degradation = Degradation(UNTRUSTED_KEY, "first")
    assert degradation.refuse(Refusal(UNTRUSTED_KEY, "signed by key 'x'"))
    assert not degradation.refuse(Refusal(UNTRUSTED_KEY, "signed by key 'x'"))
    assert degradation.refuse(Refusal(BAD_SIGNATURE, "does not verify"))
    assert degradation.header == (b"x-chain-degraded", b"bad_signature")
    assert degradation.refused == 3


@pytest.mark.system
def test_a_relay_worker_holds_no_more_connections_than_it_may_open_files() -> None:
    """granian's --backpressure is the connections a worker holds, each an open file: past the
    files the process may open, accepting would fail where it should wait. With 500 files
    allowed (1,000 at most) the relay raises its limit to 1,000 and holds 936 connections a
    worker, keeping 64 files for its own."""
    script = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (500, 1000)); "
        "from relay.__main__ import connection_limit; "
        "print(connection_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["936", "1000"]


def test_a_token_verdict_holds_for_one_environment_and_chain(tmp_path: Path) -> None:
    """A verdict given before the relay knew its environment (asked without one), or for another
    chain, is never taken for this one: a token may be of another environment or bound to
    other chains."""
    from relay.app import TokenChecks

    checks = TokenChecks(upstream=None, ttl=60, tokens=disk.TokenFile(tmp_path / "tokens.json"))  # type: ignore[arg-type]
    keys = {
        checks.key("cpt_x", "chat", ""),
        checks.key("cpt_x", "chat", "production"),
        checks.key("cpt_x", "chat", "staging"),
        checks.key("cpt_x", "summaries", "production"),
        checks.key("cpt_x", None, "production"),
    }
    assert len(keys) == 5
    checks.verdicts[checks.key("cpt_x", "chat", "")] = (True, time.time())
    assert checks.fresh_until("cpt_x", "chat", "production") is None
