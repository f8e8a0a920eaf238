"""The relay's parts that need no server: its settings' errors, the order in which documents on
disk replace one another, and the token verdicts its worker processes share."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from relay import disk
from relay.config import ConfigError, from_env


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
