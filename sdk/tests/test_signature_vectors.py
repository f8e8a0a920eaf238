"""The signed-document test vectors every client shares (tests/vectors/signed_documents.json):
what the signature covers (``wire.signed_content``, byte for byte), the signatures, and each
case's verdict, checked against this SDK.

Ed25519 signatures are deterministic, so the file is exactly what ``build_vectors()`` makes;
after changing a case, rewrite it with ``VECTORS_WRITE=1 python -m pytest
sdk/tests/test_signature_vectors.py``. The checks below do not trust the builder: each case
is verified from the file alone.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from document_signing import SigningKey, b64url  # noqa: E402

from chainclient.signatures import BAD_SIGNATURE, MALFORMED, UNSIGNED, UNTRUSTED_KEY, TrustedKeys  # noqa: E402
from chainclient.wire import SIGNATURE_CONTEXT, signed_content  # noqa: E402

VECTORS = Path(__file__).resolve().parent / "vectors" / "signed_documents.json"

# RFC 8032, section 7.1: TEST 1 and TEST 2 (secret key, public key).
RFC8032_TEST_1 = (
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
)
RFC8032_TEST_2 = (
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
)
VALID = "valid"


def _pin() -> dict[str, Any]:
    return {
        "name": "chat",
        "epoch": 0,
        "version": 7,
        "preset": "pin_secondary",
        "is_default": False,
        "chain": [
            {"provider": "vendor_b", "model": "large", "timeout_ms": 20000},
            {"provider": "self_hosted", "model": "8b", "timeout_ms": 10000},
        ],
        "marking": {"degraded": True, "note": "vendor_a is down"},
        "updated_by": "alice",
        # Non-ASCII on purpose: the canonical encoding escapes it (\u2014).
        "reason": "vendor_a outage \u2014 failing over to vendor_b",
        "updated_at": "2026-12-04T16:49:59.870Z",
        "expires_at": "2026-12-04T17:49:59.870Z",
        "default": {
            "preset": "normal",
            "chain": [
                {"provider": "vendor_a", "model": "large", "timeout_ms": 20000},
                {"provider": "vendor_b", "model": "large", "timeout_ms": 20000},
            ],
            "marking": {"degraded": False, "note": ""},
        },
    }


def _normal() -> dict[str, Any]:
    document = _pin()
    document.update(
        epoch=2,
        version=12,
        preset="normal",
        is_default=True,
        chain=copy.deepcopy(document["default"]["chain"]),
        marking={"degraded": False, "note": ""},
        reason="vendor_a is back",
        expires_at=None,
    )
    return document


def build_vectors() -> dict[str, Any]:
    """The vectors file's content, made with the two RFC 8032 keys."""
    trusted = SigningKey.from_seed("test-1", RFC8032_TEST_1[0])
    other = SigningKey.from_seed("test-2", RFC8032_TEST_2[0])
    signed = trusted.sign(_pin())

    def changed(document: dict[str, Any], change: Any) -> dict[str, Any]:
        document = copy.deepcopy(document)
        change(document)
        return document

    def case(name: str, description: str, document: dict[str, Any], verdict: str) -> dict[str, Any]:
        return {
            "name": name,
            "description": description,
            "document": document,
            "signed_content": signed_content(document).decode("ascii"),
            "verdict": verdict,
        }

    unsigned = _pin()
    cases = [
        case("valid-pin", "A pin signed by the trusted key.", signed, VALID),
        case(
            "valid-default-epoch-2",
            "A default preset (expires_at null) after an epoch raise, signed by the trusted key.",
            trusted.sign(_normal(), signed_at="2026-12-05T09:00:00Z"),
            VALID,
        ),
        case(
            "valid-unknown-fields",
            "Fields this SDK does not know yet (top level and nested) are covered like the rest.",
            trusted.sign(
                {
                    **_pin(),
                    "issued_at": "2026-12-04T16:50:00.100Z",
                    "marking": {"degraded": True, "note": "vendor_a is down", "ticket": "INC-1"},
                }
            ),
            VALID,
        ),
        case(
            "tampered-one-byte",
            "chain[0].provider vendor_b -> vendor_a after signing (one byte).",
            changed(signed, lambda d: d["chain"][0].update(provider="vendor_a")),
            BAD_SIGNATURE,
        ),
        case(
            "tampered-steps-swapped",
            "The chain's two steps swapped after signing.",
            changed(signed, lambda d: d["chain"].reverse()),
            BAD_SIGNATURE,
        ),
        case(
            "tampered-expiry",
            "expires_at moved an hour later after signing.",
            changed(signed, lambda d: d.update(expires_at="2026-12-04T18:49:59.870Z")),
            BAD_SIGNATURE,
        ),
        case(
            "tampered-signed-at",
            "signature.signed_at changed: it is covered too.",
            changed(signed, lambda d: d["signature"].update(signed_at="2026-12-04T16:50:01.123Z")),
            BAD_SIGNATURE,
        ),
        case(
            "tampered-signature-value",
            "The signature's first byte changed (still 64 bytes of base64url).",
            changed(signed, lambda d: d["signature"].update(value=b64url(_flip_first_byte(d["signature"]["value"])))),
            BAD_SIGNATURE,
        ),
        case(
            "unknown-key",
            "Signed by a key the client does not trust (test-2).",
            other.sign(_pin()),
            UNTRUSTED_KEY,
        ),
        case(
            "wrong-key-under-trusted-id",
            "Signed by test-2's key but naming test-1.",
            other.sign(_pin(), key_id="test-1"),
            BAD_SIGNATURE,
        ),
        case("unsigned", "No signature at all (stripped).", unsigned, UNSIGNED),
        case("signature-null", "signature: null.", {**_pin(), "signature": None}, UNSIGNED),
        case(
            "malformed-not-an-object",
            "signature is a string.",
            {**_pin(), "signature": signed["signature"]["value"]},
            MALFORMED,
        ),
        case(
            "malformed-algorithm",
            "alg is not ed25519: refused before any key is tried.",
            changed(signed, lambda d: d["signature"].update(alg="rsa-pss")),
            MALFORMED,
        ),
        case(
            "malformed-missing-key-id",
            "No key_id.",
            changed(signed, lambda d: d["signature"].pop("key_id")),
            MALFORMED,
        ),
        case(
            "malformed-padded-value",
            "The value with base64 padding, which signatures are written without.",
            changed(signed, lambda d: d["signature"].update(value=d["signature"]["value"] + "==")),
            MALFORMED,
        ),
        case(
            "malformed-short-value",
            "The value decodes to 63 bytes.",
            changed(signed, lambda d: d["signature"].update(value=d["signature"]["value"][:84])),
            MALFORMED,
        ),
    ]
    return {
        "description": (
            "Signed chain documents, shared by every chainclient. signed_content is what the signature "
            "covers: the context line, then the document (the signature's value left out) as canonical JSON: "
            "keys sorted at every level, no spaces, non-ASCII escaped as \\uXXXX. Signatures are Ed25519 "
            "(RFC 8032), base64url without padding; keys are RFC 8032 section 7.1 TEST 1 (test-1) and "
            "TEST 2 (test-2). A client trusting trusted_keys must reach each case's verdict: valid, "
            "unsigned, malformed (the signature object's shape or algorithm), untrusted_key, or "
            "bad_signature. The kinds are checked in that order."
        ),
        "algorithm": "ed25519",
        "context": SIGNATURE_CONTEXT.decode("ascii"),
        "keys": {
            key.key_id: {"seed_hex": seed, "public": key.public}
            for key, seed in ((trusted, RFC8032_TEST_1[0]), (other, RFC8032_TEST_2[0]))
        },
        "trusted_keys": trusted.trusted(),
        "cases": cases,
    }


def _flip_first_byte(value: str) -> bytes:
    raw = bytearray(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    raw[0] ^= 0x01
    return bytes(raw)


def _load() -> dict[str, Any]:
    """The file (written first with VECTORS_WRITE=1); read when the tests are collected."""
    if os.environ.get("VECTORS_WRITE") == "1":
        VECTORS.parent.mkdir(exist_ok=True)
        VECTORS.write_text(json.dumps(build_vectors(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    loaded: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    return _load()


def test_the_file_is_what_the_builder_makes(vectors: dict[str, Any]) -> None:
    assert vectors == build_vectors(), "stale: rewrite it with VECTORS_WRITE=1 (see this module's docstring)"


def test_the_keys_are_rfc_8032s(vectors: dict[str, Any]) -> None:
    for (seed, public_hex), key_id in ((RFC8032_TEST_1, "test-1"), (RFC8032_TEST_2, "test-2")):
        key = vectors["keys"][key_id]
        assert key["seed_hex"] == seed
        assert key["public"] == b64url(bytes.fromhex(public_hex))
    assert vectors["trusted_keys"] == {"test-1": vectors["keys"]["test-1"]["public"]}


def test_every_verdict_is_covered(vectors: dict[str, Any]) -> None:
    verdicts = {case["verdict"] for case in vectors["cases"]}
    assert verdicts == {VALID, UNSIGNED, MALFORMED, UNTRUSTED_KEY, BAD_SIGNATURE}


@pytest.mark.parametrize("case", [pytest.param(case, id=case["name"]) for case in _load()["cases"]])
def test_each_case_encodes_and_verifies_as_the_file_says(vectors: dict[str, Any], case: dict[str, Any]) -> None:
    document = case["document"]
    content = signed_content(document)
    assert content.decode("ascii") == case["signed_content"]
    assert content.startswith(vectors["context"].encode("ascii"))

    refused = TrustedKeys.load(vectors["trusted_keys"]).refusal(document)

    assert (refused.kind if refused is not None else VALID) == case["verdict"], refused
    if case["verdict"] == VALID:
        # Deterministic: the trusted key's signature of the content is the value, exactly.
        seed = bytes.fromhex(vectors["keys"][document["signature"]["key_id"]]["seed_hex"])
        signature = Ed25519PrivateKey.from_private_bytes(seed).sign(case["signed_content"].encode("ascii"))
        assert b64url(signature) == document["signature"]["value"]
