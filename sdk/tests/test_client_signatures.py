"""Signed chain documents: a client given trusted_keys applies, and starts from its state
file, only documents whose Ed25519 signature verifies with one of them; everything else is
refused, counted, reported and logged, and the last valid document is kept and said so."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")

from conftest import REGISTRY, drill_json  # noqa: E402
from document_signing import SigningKey, b64url  # noqa: E402

from chainclient import ChainDocument  # noqa: E402
from chainclient.testing import FakeClock  # noqa: E402

SDK = Path(__file__).resolve().parents[1]

OLD = SigningKey.generate("2026-06-01-aa01")
NEW = SigningKey.generate("2026-12-04-3f9a")
STRANGER = SigningKey.generate("2027-01-01-ffff")


def _signatures(client: Any) -> dict[str, Any]:
    signatures: dict[str, Any] = client.health()["signatures"]
    return signatures


# --- the option ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted_keys", "error", "says"),
    [
        pytest.param(NEW.public, TypeError, "trusted_keys must be a mapping", id="a-string"),
        pytest.param({}, ValueError, "trusted_keys is empty", id="empty"),
        pytest.param({"": NEW.public}, ValueError, "key id '' must be a non-empty string", id="blank-key-id"),
        pytest.param({"k1": b"raw bytes"}, ValueError, "trusted_keys['k1'] must be a string", id="bytes"),
        pytest.param({"k1": "not base64!"}, ValueError, "trusted_keys['k1'] is not base64url", id="not-base64url"),
        pytest.param({"k1": b64url(b"x" * 16)}, ValueError, "trusted_keys['k1'] is 16 bytes", id="too-short"),
        pytest.param(
            {NEW.key_id: NEW.public, "k2": NEW.public + "AAAA"}, ValueError, "trusted_keys['k2'] is 35 bytes", id="long"
        ),
    ],
)
def test_bad_trusted_keys_refuse_to_construct_naming_the_key(make_client, trusted_keys, error, says):
    with pytest.raises(error) as raised:
        make_client(trusted_keys=trusted_keys)
    assert says in str(raised.value)


def test_a_padded_or_pasted_key_is_accepted(make_client):
    client = make_client(trusted_keys={NEW.key_id: f" {NEW.public}=\n"})
    assert _signatures(client)["required"] is True


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(SDK)),
    )


CLIENT = """
    from chainclient import ChainClient, Provider, Registry, Step
    registry = Registry({"a": Provider(destination="d", models={"m": {"text"}})})
    def client(**options):
        return ChainClient("http://127.0.0.1:9", chain="chat", token="t", registry=registry,
                           default=[Step("a", "m", 1000)], state_dir=None, report_usage=False, **options)
"""


@pytest.mark.system
def test_without_the_verify_extra_trusted_keys_refuse_to_construct() -> None:
    result = _run(
        "import sys\nsys.modules['cryptography'] = None  # import cryptography... raises ImportError\n"
        + textwrap.dedent(CLIENT)
        + f"client(trusted_keys={{{NEW.key_id!r}: {NEW.public!r}}})\n"
    )
    assert result.returncode != 0
    assert "ValueError: trusted_keys needs the verify extra: pip install 'chainclient[verify]'" in result.stderr


@pytest.mark.system
def test_without_trusted_keys_cryptography_is_never_imported() -> None:
    result = _run(
        CLIENT
        + f"""
    import sys
    watched = ("cryptography", "chainclient.integrations.verify")
    plain = client()
    plain.health()
    print(sorted(m for m in watched if m in sys.modules))
    client(trusted_keys={{{NEW.key_id!r}: {NEW.public!r}}})
    print(sorted(m for m in watched if m in sys.modules))
    """
    )
    assert result.returncode == 0, result.stderr
    without, with_keys = result.stdout.splitlines()
    assert without == "[]"
    assert with_keys == "['chainclient.integrations.verify', 'cryptography']"


# --- fetched documents ------------------------------------------------------------------------


def test_without_trusted_keys_nothing_is_verified(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))  # unsigned
    client = make_client().start()

    eventually(lambda: client.current().version == 1)
    assert _signatures(client) == {"required": False, "key_id": None, "refused": 0, "last_refused": None}


def test_a_signed_document_is_applied_and_health_names_its_key(make_client, control_plane, eventually, document):
    signed = NEW.sign(document(3, "pin_secondary"))
    control_plane.publish(signed)
    client = make_client(trusted_keys=NEW.trusted()).start()

    eventually(lambda: client.current().version == 3)

    assert client.current().signature is not None
    assert client.current().signature.key_id == NEW.key_id
    assert client.current().to_json() == signed
    assert _signatures(client) == {"required": True, "key_id": NEW.key_id, "refused": 0, "last_refused": None}
    assert client.health()["rejected"] == 0


def _flip_one_byte(signed: dict[str, Any]) -> dict[str, Any]:
    # vendor_b -> vendor_a: one byte, and still a chain this service can route.
    signed["chain"][0]["provider"] = "vendor_a"
    return signed


def _swap_steps(signed: dict[str, Any]) -> dict[str, Any]:
    signed["chain"].reverse()
    return signed


def _strip(signed: dict[str, Any]) -> dict[str, Any]:
    del signed["signature"]
    return signed


def _set(path: str, value: Any) -> Any:
    def change(signed: dict[str, Any]) -> dict[str, Any]:
        if value is _DELETE:
            del signed["signature"][path]
        else:
            signed["signature"][path] = value
        return signed

    return change


_DELETE = object()

TAMPERED = [
    pytest.param(_flip_one_byte, "does not verify with trusted key '2026-12-04-3f9a'", id="one-byte-flipped"),
    pytest.param(_swap_steps, "does not verify", id="steps-swapped"),
    pytest.param(lambda doc: STRANGER.sign(_strip(doc)), "signed by key '2027-01-01-ffff'", id="unknown-key"),
    pytest.param(lambda doc: STRANGER.sign(_strip(doc), key_id=NEW.key_id), "does not verify", id="forged-key-id"),
    pytest.param(_strip, "unsigned: the document carries no signature", id="signature-stripped"),
    pytest.param(lambda doc: {**doc, "signature": None}, "unsigned", id="signature-null"),
    pytest.param(lambda doc: {**doc, "signature": "c2lnbmVk"}, "'signature' must be an object", id="not-an-object"),
    pytest.param(_set("alg", "rsa-pss"), "algorithm 'rsa-pss' is not ed25519", id="other-algorithm"),
    pytest.param(_set("key_id", _DELETE), "signature.key_id must be a non-empty string", id="no-key-id"),
    pytest.param(_set("signed_at", 1764867000), "signature.signed_at must be a non-empty string", id="bad-signed-at"),
    pytest.param(_set("value", "AAAA"), "base64url (no padding) of a 64-byte", id="short-value"),
    pytest.param(_set("value", "!" * 86), "base64url (no padding) of a 64-byte", id="value-not-base64url"),
]


@pytest.mark.parametrize(("tamper", "why"), TAMPERED)
def test_a_tampered_document_is_refused_and_the_last_valid_one_kept(
    make_client, control_plane, eventually, document, caplog, tamper, why
):
    caplog.set_level(logging.INFO, logger="chainclient")
    changes: list[ChainDocument] = []
    control_plane.reply_document(NEW.sign(document(4, "pin_secondary")))
    tampered = tamper(NEW.sign(document(5, "local_only")))
    # What a relay or proxy sends would be applied but for the signature: it is a valid
    # document for this service.
    ChainDocument.from_json(tampered, registry=REGISTRY)
    control_plane.always_document(tampered)
    client = make_client(trusted_keys=NEW.trusted(), on_change=changes.append).start()

    eventually(lambda: client.health()["rejected"] >= 2)

    assert (client.current().version, client.current().preset) == (4, "pin_secondary")
    assert [change.version for change in changes] == [4]
    health = client.health()
    assert health["signatures"]["required"] is True
    assert health["signatures"]["key_id"] == NEW.key_id  # the held document's
    assert health["signatures"]["refused"] == health["rejected"]
    assert why in health["signatures"]["last_refused"]
    refusals = [r.getMessage() for r in caplog.records if "refused document" in r.getMessage()]
    assert len(refusals) == 1, refusals  # once per document, not per poll
    assert "refused document v5" in refusals[0] and why in refusals[0]
    assert "keeping v4 pin_secondary" in refusals[0]


def test_after_a_copy_damaged_on_the_way_a_later_poll_brings_the_genuine_document(
    make_client, control_plane, eventually, document
):
    genuine = NEW.sign(document(5, "local_only"))
    control_plane.reply_document(NEW.sign(document(4, "pin_secondary")))
    control_plane.reply_document(_swap_steps(NEW.sign(document(5, "local_only"))))  # same ETag, "5"
    control_plane.publish(genuine)  # what the control plane really serves, to any If-None-Match but "5"
    client = make_client(trusted_keys=NEW.trusted(), poll_interval=0.2, max_backoff=1).start()

    eventually(lambda: client.current().version == 5)

    assert client.current().to_json() == genuine
    assert _signatures(client)["refused"] == 1
    # The refused copy's ETag was sent back (whoever holds that copy answers 304), until a
    # poll two intervals after the refusal asked for anything but v4 again.
    sent = [r.headers["If-None-Match"] for r in control_plane.requests]
    assert sent[:3] == ['"0"', '"4"', '"5"'], sent
    assert sent[sent.index('"5"') :].count('"4"') == 1, sent


def test_a_forger_always_on_the_way_costs_one_full_answer_a_max_backoff(
    make_client, control_plane, eventually, document
):
    """A proxy that alters every copy but keeps its ETag: the client serves what it holds, and
    asks for a genuine copy two intervals after the first refusal, then twice as long after
    each refusal in a row, up to max_backoff; in between its polls send the forged copy's ETag."""
    clock = FakeClock()
    forged = _swap_steps(NEW.sign(document(5, "local_only")))
    control_plane.publish(forged)  # to any If-None-Match but "5"; a 304 to that
    client = make_client(trusted_keys=NEW.trusted(), poll_interval=10, max_backoff=60, long_poll=True, clock=clock.now)

    asked: list[tuple[float, str]] = []
    for _ in range(40):
        before = control_plane.count()
        client.poll_once()
        [request] = control_plane.requests[before:]
        asked.append((clock.now(), request.headers["If-None-Match"]))
        # A poll sending the forged copy's ETag is not held: a long poll would wait for the
        # next change, past the time to ask for a genuine copy again.
        assert ("wait" in request.query) == (request.headers["If-None-Match"] != '"5"'), request.query
        clock.advance(5)

    full = [at for at, tag in asked if tag != '"5"']
    assert client.current().version == 0 and _signatures(client)["refused"] == len(full)
    # Asked for anything but the held document at 0 s, then 20, 40, 60 and 60 s after each refusal.
    assert [b - a for a, b in zip(full, full[1:], strict=False)] == [20, 40, 60, 60], asked


def test_a_refused_signature_is_in_the_usage_report(make_client, control_plane, eventually, document):
    control_plane.always_document(STRANGER.sign(document(6)))
    client = make_client(trusted_keys=NEW.trusted(), poll_interval=0.02, usage_interval=0.1).start()

    eventually(lambda: control_plane.report_count() >= 1)

    [refusal] = control_plane.reports[0].body["rejected"]
    assert refusal["version"] == 6
    assert refusal["reason"].startswith("signed by key '2027-01-01-ffff', which this client does not trust")
    assert "trusted: '2026-12-04-3f9a'" in refusal["reason"]
    assert client.health()["signatures"]["refused"] >= 1


def test_an_older_signed_document_replayed_is_not_applied(make_client, control_plane, eventually, document):
    older = NEW.sign(document(7, "pin_secondary"))
    control_plane.reply_document(NEW.sign(document(8, "normal")))
    control_plane.always_document(older)  # genuinely signed, and older
    client = make_client(trusted_keys=NEW.trusted()).start()

    eventually(lambda: control_plane.count() >= 4)

    assert (client.current().version, client.current().preset) == (8, "normal")
    assert client.health()["changes"] == 1
    # Not a signature problem: ordered out like any older answer.
    assert _signatures(client)["refused"] == 0
    assert client.health()["rejected"] == 0


# --- key rotation -----------------------------------------------------------------------------


def test_during_a_rotation_a_client_trusting_both_keys_follows_the_new_one(
    make_client, control_plane, eventually, document
):
    control_plane.publish(OLD.sign(document(1)))
    client = make_client(trusted_keys={**OLD.trusted(), **NEW.trusted()}).start()
    eventually(lambda: client.current().version == 1)
    assert _signatures(client)["key_id"] == OLD.key_id

    control_plane.publish(NEW.sign(document(2, "pin_secondary")))

    eventually(lambda: client.current().version == 2)
    assert _signatures(client) == {"required": True, "key_id": NEW.key_id, "refused": 0, "last_refused": None}


def test_a_client_trusting_only_the_retired_key_keeps_its_document_and_says_why(
    make_client, control_plane, eventually, document
):
    control_plane.publish(OLD.sign(document(1)))
    client = make_client(trusted_keys=OLD.trusted()).start()
    eventually(lambda: client.current().version == 1)

    control_plane.publish(NEW.sign(document(2, "pin_secondary")))

    eventually(lambda: client.health()["rejected"] >= 1)
    assert client.current().version == 1
    signatures = _signatures(client)
    assert signatures["key_id"] == OLD.key_id
    assert signatures["last_refused"] == (
        "signed by key '2026-12-04-3f9a', which this client does not trust (trusted: '2026-06-01-aa01'); "
        "if the control plane rotated its signing key, add the new public key to trusted_keys "
        "(manage.py signing_keys public prints it)"
    )


# --- the state file ---------------------------------------------------------------------------


def test_a_signed_document_is_saved_as_signed_and_verified_again_on_load(
    make_client, control_plane, eventually, document, state_dir, caplog
):
    # A field this SDK does not know yet is signed too, so it must survive the file.
    signed = NEW.sign(document(3, "pin_secondary", issued_at="2026-12-04T16:50:00.100Z"))
    control_plane.publish(signed)
    first = make_client(trusted_keys=NEW.trusted()).start()
    eventually(lambda: first.current().version == 3)
    first.stop()

    saved = json.loads((state_dir / "chat.json").read_text())
    assert saved["document"] == signed

    caplog.set_level(logging.INFO, logger="chainclient")
    restarted = make_client(trusted_keys=NEW.trusted(), base_url="http://127.0.0.1:9")  # never started
    assert (restarted.current().source, restarted.current().version) == ("disk", 3)
    assert restarted.health()["state_file_refused"] is None
    assert _signatures(restarted)["key_id"] == NEW.key_id
    assert any("starting from v3 pin_secondary" in r.getMessage() for r in caplog.records)


def test_an_edited_state_file_with_its_digest_recomputed_is_refused(make_client, write_state_file, document, caplog):
    caplog.set_level(logging.INFO, logger="chainclient")
    forged = NEW.sign(document(3, "normal"))
    forged["version"] = 99_991_004  # the forger raises the version ...
    path = write_state_file(forged)  # ... and writes a digest that matches

    client = make_client(trusted_keys=NEW.trusted(), base_url="http://127.0.0.1:9")

    assert (client.current().source, client.current().version) == ("default", 0)
    refused = client.health()["state_file_refused"]
    assert refused.startswith("its document is refused: the signature does not verify with trusted key")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"chain chat: ignoring state file {path}: {refused}"]
    # Without keys the same file is believed: the digest alone cannot tell.
    assert make_client(base_url="http://127.0.0.1:9").current().version == 99_991_004


def test_an_unsigned_state_file_is_refused_when_keys_are_set(make_client, write_state_file, document):
    write_state_file(document(5))

    client = make_client(trusted_keys=NEW.trusted(), base_url="http://127.0.0.1:9")

    assert client.current().source == "default"
    assert client.health()["state_file_refused"].startswith("unsigned: its document carries no signature")
    assert make_client(base_url="http://127.0.0.1:9").current().version == 5  # the control


def test_a_state_file_signed_by_a_key_no_longer_trusted_is_refused(make_client, write_state_file, document):
    write_state_file(OLD.sign(document(5)))

    client = make_client(trusted_keys=NEW.trusted(), base_url="http://127.0.0.1:9")

    assert client.current().source == "default"
    assert "signed by key '2026-06-01-aa01', which this client does not trust" in client.health()["state_file_refused"]


def test_a_refused_state_file_is_replaced_by_the_next_signed_document(
    make_client, control_plane, write_state_file, eventually, document, state_dir
):
    forged = NEW.sign(document(3))
    forged["chain"].reverse()
    write_state_file({**forged, "version": 50})
    signed = NEW.sign(document(4, "pin_secondary"))
    control_plane.publish(signed)

    client = make_client(trusted_keys=NEW.trusted())
    assert client.health()["state_file_refused"] is not None
    client.start()

    # The forged version 50 holds nothing back: the file is taken for unusable on save too.
    eventually(lambda: client.health()["state_file_refused"] is None)
    assert json.loads((state_dir / "chat.json").read_text())["document"] == signed


def test_a_document_changed_in_code_is_written_from_its_fields_without_the_signature(document):
    parsed = ChainDocument.from_json(NEW.sign(document(3)), registry=REGISTRY)
    changed = dataclasses.replace(parsed, version=4)

    assert changed.signature is None
    assert "signature" not in changed.to_json() and changed.to_json()["version"] == 4
    # Each call is a fresh copy: what a caller does to one cannot change the document held.
    copy = parsed.to_json()
    copy["version"] = 5
    assert parsed.to_json()["version"] == 3


# --- a failover drill rides on the signature -----------------------------------------------------


def _drill(**changes: Any) -> dict[str, Any]:
    """A drill of every service on hop 1, a quarter of the requests, active for the next hour."""
    return drill_json(id=3, **changes)


def _drilled(client: Any, requests: int = 40) -> int:
    """How many of ``requests`` a Router over ``client`` drills."""
    from chainclient import Router
    from chainclient.testing import FakeProviders

    fakes = FakeProviders(providers=("vendor_a", "vendor_b", "self_hosted"))
    router = Router(client, transports=fakes.transports, breaker=None)
    results = [router.complete("hello") for _ in range(requests)]
    return sum(1 for result in results if any(a.drill is not None for a in result.receipt.attempts))


# Each forgery starts from a genuinely signed document: one without a drill, or one whose drill
# is a tenth of a percent of one other service's requests.
QUIET: dict[str, Any] = {}
NARROW: dict[str, Any] = {"drill": {"share_bp": 10, "services": ["ab" * 32]}}


@pytest.mark.parametrize(
    ("signed", "forge"),
    [
        pytest.param(QUIET, lambda d: {**d, "drill": _drill()}, id="drill-added-after-signing"),
        pytest.param(NARROW, lambda d: {**d, "drill": {**d["drill"], "share_bp": 2500}}, id="share-raised"),
        pytest.param(NARROW, lambda d: {**d, "drill": {**d["drill"], "services": []}}, id="services-widened"),
    ],
)
def test_a_drill_in_a_document_that_fails_verification_is_never_injected(
    make_client, control_plane, eventually, document, signed, forge
):
    """The attacker: a relay, proxy or cache between the control plane and a service, starting
    a drill (or widening one) to fail a share of the service's live traffic at will."""
    extra = {"drill": _drill(**signed["drill"])} if "drill" in signed else {}
    control_plane.reply_document(NEW.sign(document(3, "normal")))
    control_plane.always_document(forge(NEW.sign(document(4, "normal", **extra))))
    client = make_client(trusted_keys=NEW.trusted()).start()

    eventually(lambda: client.health()["rejected"] >= 1)

    assert client.current().version == 3 and client.current().drill is None
    assert _drilled(client) == 0


def test_a_signed_document_s_drill_is_applied_and_injected(make_client, control_plane, eventually, document):
    control_plane.always_document(NEW.sign(document(4, "normal", drill=_drill())))
    client = make_client(trusted_keys=NEW.trusted()).start()

    eventually(lambda: client.current().version == 4)

    assert client.current().drill is not None and client.current().drill.id == 3
    assert _drilled(client) == 10  # a quarter of 40, exactly
