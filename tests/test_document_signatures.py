"""The server's own check of a chain document's signature (presets/document_signatures.py),
which relays and the publisher apply to what they keep: the verdicts of the vectors every
client shares (sdk/tests/vectors/signed_documents.json), and the keys' setting read in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from presets.document_signatures import NOT_A_DOCUMENT, PublicKeys

VECTORS = json.loads(
    (Path(__file__).resolve().parent.parent / "sdk" / "tests" / "vectors" / "signed_documents.json").read_text()
)
KEYS = PublicKeys.parse(VECTORS["trusted_keys"], where="vectors")


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda case: case["name"])
def test_each_shared_vector_gets_the_clients_verdict(case) -> None:
    refusal = KEYS.refusal(case["document"])
    assert (refusal.kind if refusal else "valid") == case["verdict"]
    if case["document"] is not None and isinstance(case["document"], dict):
        body = json.dumps(case["document"]).encode()
        refusal = KEYS.refusal_of_body(body)
        assert (refusal.kind if refusal else "valid") == case["verdict"]


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b"null"], ids=["empty", "text", "list", "null"])
def test_bytes_that_are_no_document_are_refused_as_such(body) -> None:
    refusal = KEYS.refusal_of_body(body)
    assert refusal is not None and refusal.kind == NOT_A_DOCUMENT


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ([], "expected a JSON object"),
        ({}, "no key given"),
        ({"k": "short"}, "'k' is not an Ed25519 public key"),
        ({"k": 12}, "'k' is not an Ed25519 public key"),
        ({"": VECTORS["trusted_keys"]["test-1"]}, "must be a non-empty string"),
    ],
    ids=["list", "empty", "short", "number", "blank-id"],
)
def test_a_bad_key_setting_says_which_key_and_how(keys, words) -> None:
    with pytest.raises(ValueError, match=words) as raised:
        PublicKeys.parse(keys, where="RELAY_TRUSTED_KEYS")
    assert str(raised.value).startswith("RELAY_TRUSTED_KEYS: ")


def test_keys_as_signing_keys_public_prints_them_round_trip() -> None:
    text = json.dumps(VECTORS["trusted_keys"])
    keys = PublicKeys.parse_json(text, where="file")
    assert keys.encoded == VECTORS["trusted_keys"]
    with pytest.raises(ValueError, match="file: not JSON"):
        PublicKeys.parse_json("{", where="file")
