"""Applying fetched documents: refuse invalid ones, ignore stale ones, apply newer ones once."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest


def _step(provider: str, model: str, timeout_ms: object = 20000) -> dict:
    return {"provider": provider, "model": model, "timeout_ms": timeout_ms}


def _with(**fields: object):
    return lambda doc: json.dumps(dict(doc, **fields)).encode()


INVALID = [
    pytest.param(
        _with(chain=[_step("vendor_z", "large")]),
        "unknown provider 'vendor_z'",
        id="unknown-provider",
    ),
    pytest.param(_with(chain=[_step("vendor_a", "huge")]), "unknown model 'huge'", id="unknown-model"),
    pytest.param(
        _with(
            chain=[
                _step("vendor_a", "large"),
                _step("vendor_a", "small"),
                _step("vendor_b", "large"),
                _step("vendor_b", "small"),
                _step("self_hosted", "8b"),
            ]
        ),
        "1..4 steps, got 5",
        id="five-steps",
    ),
    pytest.param(_with(chain=[]), "1..4 steps, got 0", id="no-steps"),
    pytest.param(
        _with(chain=[_step("vendor_a", "large"), _step("vendor_a", "large", 10000)]),
        "duplicate step vendor_a/large",
        id="duplicate-step",
    ),
    pytest.param(_with(chain=[_step("vendor_a", "large", 499)]), "timeout_ms 499", id="timeout-499"),
    pytest.param(_with(chain=[_step("vendor_a", "large", 120001)]), "timeout_ms 120001", id="timeout-120001"),
    pytest.param(_with(reason="   "), "'reason' must not be blank", id="blank-reason"),
    pytest.param(_with(updated_by=""), "'updated_by' must not be blank", id="blank-updated-by"),
    pytest.param(_with(version="5"), "'version' must be a non-negative integer", id="version-as-string"),
    pytest.param(_with(is_default="no"), "'is_default' must be a boolean", id="is-default-as-string"),
    pytest.param(_with(chain={"provider": "vendor_a"}), "'chain' must be a list", id="chain-as-object"),
    pytest.param(
        _with(chain=[_step("vendor_a", "large", "20000")]),
        "timeout_ms must be an integer",
        id="timeout-as-string",
    ),
    pytest.param(
        _with(chain=[_step("vendor_a", "large", True)]),
        "timeout_ms must be an integer",
        id="timeout-as-bool",
    ),
    pytest.param(_with(marking="degraded"), "'marking' must be an object", id="marking-as-string"),
    pytest.param(_with(name="incident-summary"), "for chain 'incident-summary'", id="other-chain"),
    pytest.param(lambda doc: json.dumps([doc]).encode(), "must be a JSON object", id="a-list"),
    pytest.param(lambda doc: b"<html>502 Bad Gateway</html>", "not JSON", id="not-json"),
    pytest.param(lambda doc: json.dumps(doc).encode()[:-10], "not JSON", id="truncated-json"),
]


@pytest.mark.parametrize(("body", "why"), INVALID)
def test_an_invalid_document_is_refused_counted_and_logged_and_the_chain_kept(
    make_client, control_plane, eventually, document, caplog, body, why
):
    caplog.set_level(logging.INFO, logger="chainclient")
    changes = []
    control_plane.reply_document(document(4, "pin_secondary"))
    control_plane.reply(200, body(document(5, "local_only")), headers={"ETag": '"5"'})
    control_plane.always(304)
    client = make_client(on_change=changes.append).start()

    eventually(lambda: client.health()["rejected"] == 1)
    eventually(lambda: control_plane.count() >= 4)  # it kept polling afterwards

    assert client.current().version == 4
    assert client.current().preset == "pin_secondary"
    assert [change.version for change in changes] == [4]
    refusals = [r.getMessage() for r in caplog.records if "refused document" in r.getMessage()]
    assert len(refusals) == 1
    assert why in refusals[0]
    assert "keeping v4 pin_secondary" in refusals[0]


def test_a_refused_document_is_not_asked_for_again(make_client, control_plane, eventually, document):
    bad = document(5, chain=[_step("vendor_z", "large")])
    control_plane.reply_document(bad)
    control_plane.always(304)
    client = make_client().start()

    eventually(lambda: control_plane.count() >= 3)

    # Its ETag is sent back, so a real server answers 304 until something newer exists.
    assert control_plane.requests[-1].headers["If-None-Match"] == '"5"'
    assert control_plane.requests[-1].headers["X-Chain-Applied-Version"] == "0"
    assert client.health()["rejected"] == 1


def test_a_server_repeating_a_refused_document_is_logged_once(make_client, control_plane, eventually, document, caplog):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.always(200, document(5, reason=""))  # no ETag, so it comes back every poll
    client = make_client().start()

    eventually(lambda: client.health()["rejected"] >= 4)

    refusals = [r for r in caplog.records if "refused document" in r.getMessage()]
    assert len(refusals) == 1


def test_versions_served_out_of_order_apply_only_newer_ones(make_client, control_plane, eventually, document):
    changes = []
    for version in (3, 2, 3, 4):
        control_plane.reply_document(document(version, f"preset_v{version}"))
    control_plane.always(304)
    client = make_client(on_change=changes.append).start()

    eventually(lambda: control_plane.count() >= 6)

    assert [change.version for change in changes] == [3, 4]
    assert client.current().version == 4
    assert client.current().preset == "preset_v4"
    assert client.health()["changes"] == 2
    assert client.health()["rejected"] == 0


def test_after_a_restart_it_stays_at_the_saved_version_while_the_server_serves_an_older_one(
    make_client, control_plane, eventually, document, saved_version
):
    for version in (3, 2, 3, 4):
        control_plane.reply_document(document(version))
    control_plane.always(304)
    before = make_client().start()
    eventually(lambda: saved_version() == 4)
    before.stop()

    control_plane.always_document(document(2))
    changes = []
    after = make_client(on_change=changes.append).start()
    requests_before = control_plane.count()
    eventually(lambda: control_plane.count() >= requests_before + 3)

    assert after.current().version == 4
    assert after.current().source == "disk"
    assert changes == []


def test_a_change_is_logged_in_one_line_with_from_to_by_and_reason(
    make_client, control_plane, eventually, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.reply_document(document(3, "pin_secondary"))
    control_plane.reply_document(document(4, "normal", updated_by="bob", reason="vendor_a healthy again, INC-4411"))
    control_plane.always(304)
    client = make_client().start()

    eventually(lambda: client.current().version == 4)

    lines = [r.getMessage() for r in caplog.records if "->" in r.getMessage()]
    assert lines == [
        "chain chat: v0 compiled-default -> v3 pin_secondary by alice: change number 3",
        "chain chat: v3 pin_secondary -> v4 normal by bob: vendor_a healthy again, INC-4411",
    ]


def test_an_on_change_that_raises_is_logged_and_polling_goes_on(
    make_client, control_plane, eventually, document, caplog
):
    seen = []

    def on_change(doc):
        seen.append(doc.version)
        raise RuntimeError("listener bug")

    control_plane.reply_document(document(3))
    control_plane.reply_document(document(4))
    control_plane.always(304)
    client = make_client(on_change=on_change).start()

    eventually(lambda: len(seen) == 2 and control_plane.count() >= 3)

    assert seen == [3, 4]
    assert client.current().version == 4
    assert client.health()["running"] is True
    failures = [r for r in caplog.records if "on_change raised" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].exc_info is not None


def test_the_document_handed_out_is_frozen(make_client, control_plane, eventually, document):
    control_plane.always_document(document(3))
    client = make_client().start()
    eventually(lambda: client.current().version == 3)

    with pytest.raises(AttributeError):
        client.current().version = 99  # type: ignore[misc]
    assert isinstance(client.current().chain, tuple)


def test_a_failure_policy_this_client_cannot_apply_is_said_once_fetched_and_again_read_back(
    make_client: Any, control_plane: Any, eventually: Any, document: Any, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.publish(document(2, failure_policy={"commit": "later"}))
    client = make_client(report_usage=False).start()
    eventually(lambda: client.current().version == 2)
    polls = control_plane.count()
    eventually(lambda: control_plane.count() >= polls + 10)  # the same document, again and again
    client.stop()
    assert client.current().failure_policy is None

    make_client(report_usage=False)  # a restart reads the state file
    said = [r.getMessage() for r in caplog.records if "ignoring the failure policy" in r.getMessage()]
    why = 'failure_policy.commit "later" is not one this client knows; the document itself is applied'
    assert said[0] == f"chain chat: ignoring the failure policy in v2: {why}"
    assert said[1].startswith("chain chat: ignoring the failure policy in v2 from ") and said[1].endswith(why)
    assert len(said) == 2
