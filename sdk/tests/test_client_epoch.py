"""Documents are ordered by (epoch, version): after a database restore the operator raises the
epoch, and the restored server's lower versions become newer than anything a client saved."""

from __future__ import annotations

import json

import pytest

from chainclient import ChainDocument, DefaultChain, DocumentInvalid, Step
from chainclient.types import parse_time

NORMAL = {
    "preset": "normal",
    "chain": [{"provider": "vendor_a", "model": "large", "timeout_ms": 20000}],
    "marking": {"degraded": False, "note": ""},
}

# (epoch, version) answers in the order the control plane's replicas send them.
ORDERINGS = [
    pytest.param([(0, 3), (0, 2), (0, 4)], [(0, 3), (0, 4)], id="versions-within-an-epoch"),
    pytest.param([(0, 50), (1, 3)], [(0, 50), (1, 3)], id="higher-epoch-lower-version-is-newer"),
    pytest.param([(1, 3), (0, 99)], [(1, 3)], id="lower-epoch-is-older-whatever-its-version"),
    pytest.param([(1, 3), (1, 3), (1, 4)], [(1, 3), (1, 4)], id="same-pair-is-not-newer"),
    pytest.param([(2, 1), (1, 9), (2, 2)], [(2, 1), (2, 2)], id="lagging-replica-of-old-epoch"),
]


@pytest.mark.parametrize(("answers", "applied"), ORDERINGS)
def test_fetched_documents_apply_only_when_newer_by_epoch_then_version(
    make_client, control_plane, eventually, document, answers, applied
):
    for epoch, version in answers:
        control_plane.reply_document(document(version, epoch=epoch))
    control_plane.always(304)
    changes: list[ChainDocument] = []
    client = make_client(on_change=changes.append).start()

    eventually(lambda: control_plane.count() >= len(answers) + 2)

    assert [(change.epoch, change.version) for change in changes] == applied
    assert (client.current().epoch, client.current().version) == applied[-1]


def test_a_saved_document_of_a_higher_epoch_outranks_a_higher_version(
    make_client, control_plane, write_state_file, eventually, document
):
    write_state_file(document(3, epoch=1))
    control_plane.reply_document(document(99, epoch=0))
    control_plane.reply_document(document(4, epoch=1))
    control_plane.always(304)
    changes: list[ChainDocument] = []
    client = make_client(on_change=changes.append).start()

    eventually(lambda: control_plane.count() >= 4)

    assert [(change.epoch, change.version) for change in changes] == [(1, 4)]
    assert client.current().source == "live"


@pytest.mark.parametrize(
    ("epoch", "version", "tag"),
    [pytest.param(0, 9, '"9"', id="epoch-0"), pytest.param(2, 9, '"2.9"', id="raised-epoch")],
)
def test_without_a_server_etag_it_builds_if_none_match_as_the_server_does(
    make_client, control_plane, write_state_file, eventually, document, epoch, version, tag
):
    write_state_file(document(version, epoch=epoch))
    control_plane.always(304)
    make_client().start()

    eventually(lambda: control_plane.count() >= 1)

    assert control_plane.requests[0].headers["If-None-Match"] == tag


def test_a_document_answered_without_an_etag_is_asked_for_by_its_epoch_and_version(
    make_client, control_plane, eventually, document
):
    control_plane.reply(200, document(5, epoch=3), headers={"Content-Type": "application/json"})
    control_plane.always(304)
    client = make_client().start()

    eventually(lambda: control_plane.count() >= 3)

    assert client.current().order == (3, 5)
    assert control_plane.requests[-1].headers["If-None-Match"] == '"3.5"'


def test_with_a_raised_epoch_the_real_apis_conditional_get_answers_304_to_it(
    make_client, control_plane, eventually, document
):
    control_plane.publish(document(5, epoch=3))
    client = make_client().start()
    eventually(lambda: client.current().order == (3, 5))
    polls = control_plane.count()

    eventually(lambda: control_plane.count() >= polls + 3)

    assert client.health()["changes"] == 1  # every later poll was a 304 to "3.5"


# -- the document's new fields ---------------------------------------------------------


def test_older_servers_documents_mean_epoch_0_and_no_default(document, registry):
    data = document(4)
    data.pop("default", None)
    data.pop("epoch", None)

    parsed = ChainDocument.from_json(data, registry=registry)

    assert (parsed.epoch, parsed.default) == (0, None)


def test_a_chain_without_a_default_preset_sends_null_and_that_is_allowed(document, registry):
    assert ChainDocument.from_json(document(4, default=None), registry=registry).default is None


def test_the_default_is_parsed_into_steps(document, registry):
    parsed = ChainDocument.from_json(document(4, epoch=2, default=NORMAL), registry=registry)

    assert parsed.epoch == 2
    assert parsed.default == DefaultChain(
        "normal", (Step("vendor_a", "large", 20000),), {"degraded": False, "note": ""}
    )


@pytest.mark.parametrize(
    ("expires_at", "seconds"),
    [
        pytest.param("2026-11-29T06:03:04.123Z", 1795932184.123, id="milliseconds"),
        pytest.param("2026-11-29T06:03:04Z", 1795932184.0, id="whole-seconds"),
        pytest.param("2026-11-29T07:03:04.5+01:00", 1795932184.5, id="offset"),
        pytest.param(None, None, id="no-expiry"),
    ],
)
def test_expires_at_is_parsed_to_epoch_seconds_when_the_document_is_built(document, registry, expires_at, seconds):
    parsed = ChainDocument.from_json(document(4, expires_at=expires_at), registry=registry)

    assert parsed.expires_at == expires_at  # the text is kept as the server sent it
    if seconds is None:
        assert parsed.expires_at_s is None
    else:
        assert parsed.expires_at_s == pytest.approx(seconds, abs=1e-6)


def test_parse_time_does_not_depend_on_pythons_iso_format_parser():
    # 3.10's fromisoformat refuses "Z"; 3.11's accepts forms 3.10 does not: neither decides.
    assert parse_time("2026-11-29T06:03:04.123Z") == parse_time("2026-11-29T06:03:04.123+00:00")
    with pytest.raises(ValueError):
        parse_time("20261129T060304Z")


def _step(provider: str, model: str, timeout_ms: object = 20000) -> dict:
    return {"provider": provider, "model": model, "timeout_ms": timeout_ms}


INVALID = [
    pytest.param({"epoch": -1}, "'epoch' must be a non-negative integer", id="negative-epoch"),
    pytest.param({"epoch": "1"}, "'epoch' must be a non-negative integer", id="epoch-as-string"),
    pytest.param({"epoch": True}, "'epoch' must be a non-negative integer", id="epoch-as-bool"),
    pytest.param({"expires_at": "tomorrow"}, "'expires_at'", id="expires-at-not-a-time"),
    pytest.param({"expires_at": "2026-11-29T06:03:04"}, "'expires_at'", id="expires-at-no-zone"),
    pytest.param({"expires_at": "2026-13-29T06:03:04Z"}, "'expires_at'", id="expires-at-month-13"),
    pytest.param({"default": ["normal"]}, "default.", id="default-as-list"),
    pytest.param({"default": dict(NORMAL, preset=" ")}, "default.preset", id="blank-preset"),
    pytest.param(
        {"default": dict(NORMAL, chain=[_step("vendor_z", "large")])},
        "default.chain[0]: unknown provider 'vendor_z'",
        id="unknown-provider",
    ),
    pytest.param(
        {"default": dict(NORMAL, chain=[_step("vendor_a", "huge")])},
        "default.chain[0]: unknown model 'huge'",
        id="unknown-model",
    ),
    pytest.param({"default": dict(NORMAL, chain=[])}, "default.chain: a chain has 1..4 steps, got 0", id="no-steps"),
    pytest.param(
        {"default": dict(NORMAL, chain=[_step("vendor_a", "large", 499)])},
        "default.chain[0]: timeout_ms 499",
        id="timeout-499",
    ),
    pytest.param(
        {"default": dict(NORMAL, chain=[_step("vendor_a", "large", "20000")])},
        "default.chain[0]: timeout_ms must be an integer",
        id="timeout-as-string",
    ),
    pytest.param(
        {"default": dict(NORMAL, chain={"provider": "vendor_a"})}, "default.chain must be a list", id="chain-as-object"
    ),
    pytest.param(
        {"default": dict(NORMAL, marking="degraded")}, "default.marking must be an object", id="marking-as-string"
    ),
]


@pytest.mark.parametrize(("fields", "why"), INVALID)
def test_a_bad_epoch_expiry_or_default_makes_the_whole_document_invalid(document, registry, fields, why):
    with pytest.raises(DocumentInvalid) as raised:
        ChainDocument.from_json(document(4, **fields), registry=registry)

    assert why in str(raised.value)
    if "default" in fields:
        assert str(raised.value).startswith("default.")


def test_without_a_registry_the_default_is_still_checked_for_shape(document):
    with pytest.raises(DocumentInvalid, match=r"^default\.chain: duplicate step"):
        ChainDocument.from_json(document(4, default=dict(NORMAL, chain=[_step("vendor_a", "large")] * 2)))


def test_a_client_refuses_a_document_with_an_invalid_default_and_keeps_its_chain(
    make_client, control_plane, eventually, document
):
    control_plane.reply_document(document(3))
    control_plane.always_document(document(4, default=dict(NORMAL, chain=[_step("vendor_z", "large")])))
    client = make_client().start()

    eventually(lambda: client.health()["rejected"] >= 1)

    assert client.current().version == 3


def test_the_state_file_round_trips_epoch_default_and_expiry(document, registry):
    original = ChainDocument.from_json(
        document(4, epoch=2, default=NORMAL, expires_at="2026-11-29T06:03:04.123Z"),
        registry=registry,
    )

    again = ChainDocument.from_json(json.loads(json.dumps(original.to_json())), registry=registry)

    assert again == original
    assert again.expires_at_s == original.expires_at_s
