"""Which chain a client serves before (and without) the control plane: default < disk < live."""

from __future__ import annotations

import json
import logging
import os

import pytest
from conftest import state_file_digest

from chainclient import ChainClient, DocumentInvalid, Step


def test_with_no_file_and_the_server_down_it_serves_the_compiled_default(make_client, refused_url, default_steps):
    client = make_client(base_url=refused_url).start()

    document = client.current()

    assert document.source == "default"
    assert document.version == 0
    assert list(document.chain) == default_steps
    assert client.health()["source"] == "default"


def test_with_the_server_down_it_serves_the_last_known_good_file_at_once(
    make_client, refused_url, write_state_file, document
):
    write_state_file(document(7, "pin_secondary"))

    client = make_client(base_url=refused_url).start()
    current = client.current()

    assert (current.source, current.version, current.preset) == ("disk", 7, "pin_secondary")
    assert [str(step) for step in current.chain] == ["vendor_b/large", "self_hosted/8b"]


def test_the_file_is_read_at_construction_before_any_network(make_client, refused_url, write_state_file, document):
    write_state_file(document(3))

    client = make_client(base_url=refused_url)  # never started

    assert client.current().version == 3
    assert client.health()["running"] is False


def _truncated(document: dict) -> bytes:
    whole = _wrapped(document)
    return whole[: len(whole) // 2]


def _wrapped(document: dict, **fields: object) -> bytes:
    """A state file with a digest that matches: whatever is wrong with it is in ``fields``."""
    payload: dict[str, object] = {
        "format": "chainclient-state/2",
        "chain": "chat",
        "document": document,
    }
    payload.update(fields)
    payload["digest"] = state_file_digest(payload)
    return json.dumps(payload).encode()


def _edited(document: dict, **changes: object) -> bytes:
    """A good state file whose document was then changed, the digest left as it was."""
    payload = json.loads(_wrapped(document))
    payload["document"].update(changes)
    return json.dumps(payload).encode()


def _without_digest(document: dict) -> bytes:
    payload = json.loads(_wrapped(document))
    del payload["digest"]
    return json.dumps(payload).encode()


BAD_FILES = [
    pytest.param(_truncated, "ignoring state file", id="truncated"),
    pytest.param(lambda doc: b"\x00\xff\xfe garbage \x01", "ignoring state file", id="corrupted"),
    pytest.param(lambda doc: b"", "ignoring state file", id="empty"),
    pytest.param(lambda doc: _wrapped(doc, chain="incident-summary"), "belongs to chain", id="other-chain"),
    pytest.param(
        lambda doc: _wrapped(dict(doc, name="incident-summary")),
        "for chain",
        id="other-chain-document",
    ),
    pytest.param(lambda doc: json.dumps(doc).encode(), "not a chainclient-state/2 file", id="bare-document"),
    pytest.param(
        lambda doc: _wrapped(doc, format="something-else/9"),
        "not a chainclient-state",
        id="wrong-format",
    ),
    pytest.param(
        lambda doc: _wrapped(dict(doc, chain=[{"provider": "vendor_z", "model": "large", "timeout_ms": 20000}])),
        "unknown provider",
        id="provider-no-longer-compiled-in",
    ),
    pytest.param(lambda doc: _edited(doc, version=99991004), "digest mismatch", id="version-raised-by-hand"),
    pytest.param(
        lambda doc: _edited(doc, chain=[{"provider": "vendor_a", "model": "small", "timeout_ms": 20000}]),
        "digest mismatch",
        id="steps-edited-by-hand",
    ),
    pytest.param(_without_digest, "no digest", id="digest-deleted"),
]


@pytest.mark.parametrize(("content", "logged"), BAD_FILES)
def test_a_bad_state_file_is_ignored_with_one_log_line(
    make_client, refused_url, state_dir, document, caplog, content, logged
):
    state_dir.mkdir(parents=True)
    (state_dir / "chat.json").write_bytes(content(document(5)))
    caplog.set_level(logging.DEBUG, logger="chainclient")

    client = make_client(base_url=refused_url)

    assert client.current().source == "default"
    assert client.current().version == 0
    records = [r for r in caplog.records if r.name.startswith("chainclient")]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert logged in records[0].getMessage()
    assert client.health()["state_file_refused"] is not None


def test_a_change_is_saved_atomically_with_its_version(
    make_client, control_plane, state_dir, eventually, document, saved_version
):
    control_plane.reply_document(document(3))
    served = document(
        4,
        "pin_secondary",
        epoch=2,
        expires_at="2999-11-29T06:03:04.123Z",
        default={
            "preset": "normal",
            "chain": [{"provider": "vendor_a", "model": "large", "timeout_ms": 20000}],
            "marking": {"degraded": False, "note": ""},
        },
    )
    control_plane.always_document(served)
    make_client().start()

    eventually(lambda: saved_version() == 4)

    # No temp file left behind, and the lock that orders writers is removed once released.
    eventually(lambda: sorted(os.listdir(state_dir)) == ["chat.json"])
    saved = json.loads((state_dir / "chat.json").read_text())
    assert saved["format"] == "chainclient-state/2"
    assert saved["chain"] == "chat"
    assert saved["document"] == served
    assert saved["digest"] == state_file_digest(saved)


def test_the_saved_file_is_what_the_next_run_starts_from(
    make_client, control_plane, refused_url, eventually, document, saved_version
):
    control_plane.always_document(document(6, "drop_vendor_b"))
    first = make_client().start()
    eventually(lambda: saved_version() == 6)
    first.stop()

    second = make_client(base_url=refused_url)

    assert (second.current().source, second.current().version) == ("disk", 6)
    assert second.current().preset == "drop_vendor_b"
    assert second.health()["state_file_refused"] is None


def test_without_a_state_dir_no_file_is_kept(make_client, control_plane, state_dir, eventually, document):
    control_plane.always_document(document(2))
    client = make_client(state_dir=None).start()

    eventually(lambda: client.current().version == 2)

    assert not state_dir.exists()
    assert client.health()["state_file"] is None


def test_a_change_still_applies_when_the_file_cannot_be_written(
    make_client, control_plane, tmp_path, eventually, document, caplog
):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    control_plane.always_document(document(2))
    client = make_client(state_dir=not_a_folder / "state").start()

    eventually(lambda: client.current().version == 2)

    assert client.current().source == "live"
    eventually(lambda: any("could not save v2" in r.getMessage() for r in caplog.records))


def test_an_unroutable_compiled_default_fails_at_construction(make_client):
    with pytest.raises(DocumentInvalid, match="unknown model"):
        make_client(default=[Step("vendor_a", "gigantic", 20000)])


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"poll_interval": 0}, "poll_interval"),
        ({"timeout": float("inf")}, "timeout"),
        ({"wait_s": 61}, "wait_s"),
        ({"token": "abc\r\nX-Evil: 1"}, "token"),
        ({"base_url": "ftp://example.com"}, "base_url"),
        ({"chain": " "}, "chain"),
    ],
    ids=[
        "zero-interval",
        "infinite-timeout",
        "wait-above-60",
        "header-injection",
        "not-http",
        "blank-chain",
    ],
)
def test_bad_settings_fail_at_construction(make_client, overrides, error):
    with pytest.raises(ValueError, match=error):
        make_client(**overrides)


def test_it_is_a_context_manager(make_client, control_plane, eventually, document):
    control_plane.always_document(document(3))

    with make_client() as client:
        assert isinstance(client, ChainClient)
        eventually(lambda: client.current().version == 3)
        assert client.health()["running"] is True

    assert client.health()["running"] is False
