"""Ahead of the server: after a database restore the control plane serves lower versions than
this instance holds. That must be visible (health, a log line, usage reports), not silent."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from chainclient.testing import FakeClock

START = 1_795_932_184.0  # 2026-11-29T06:03:04Z


def restored(make_client, write_state_file, document, **options: Any):
    """A client holding v1071 (saved before the restore), on a clock the test moves."""
    write_state_file(document(1071, "pin_secondary"))
    client = make_client(ahead_after_s=30.0, **options)
    clock = FakeClock(start=START)
    client._clock = clock.now
    return client, clock


def ahead_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "restored database?" in r.getMessage()]


def test_an_older_answer_that_lasts_ahead_after_s_makes_the_instance_ahead_of_the_server(
    make_client, control_plane, write_state_file, eventually, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.always_document(document(1022))
    client, clock = restored(make_client, write_state_file, document)
    client.start()
    eventually(lambda: control_plane.count() >= 2)
    clock.advance(29.999)
    assert client.health()["ahead_of_server"] is None

    clock.advance(0.001)
    eventually(lambda: control_plane.count() >= 5)  # several polls see it meanwhile

    assert client.health()["ahead_of_server"] == {
        "server_epoch": 0,
        "server_version": 1022,
        "since": START,
    }
    assert client.current().version == 1071  # kept: only an operator can settle it
    assert ahead_lines(caplog) == [
        "chain chat: the control plane serves v1022 but this instance holds v1071 (epoch 0); "
        "restored database? keeping v1071 until an operator raises the epoch "
        "(manage.py raise_epoch)"
    ]


def test_an_older_answer_from_a_lagging_replica_alone_is_not_ahead(
    make_client, control_plane, write_state_file, eventually, document
):
    control_plane.reply_document(document(1022))
    control_plane.always(304)  # the other replicas hold v1071, as this instance does
    client, clock = restored(make_client, write_state_file, document)
    client.start()
    eventually(lambda: control_plane.count() >= 3)

    clock.advance(3600)

    assert client.health()["ahead_of_server"] is None


@pytest.mark.parametrize(
    ("answer", "version"),
    [
        pytest.param({"status": 304}, 1071, id="server-serves-the-held-version-again"),
        pytest.param({"epoch": 1, "version": 1022}, 1022, id="operator-raised-the-epoch"),
    ],
)
def test_being_ahead_is_cleared_with_a_log_line_when_the_server_catches_up(
    make_client, control_plane, write_state_file, eventually, document, caplog, answer, version
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.always_document(document(1022))
    client, clock = restored(make_client, write_state_file, document)
    client.start()
    eventually(lambda: control_plane.count() >= 2)
    clock.advance(30)
    eventually(lambda: client.health()["ahead_of_server"] is not None)

    if "status" in answer:
        control_plane.always(answer["status"])
    else:
        control_plane.always_document(document(answer["version"], epoch=answer["epoch"]))
    eventually(lambda: client.health()["ahead_of_server"] is None)
    # The line is written just after the state is cleared (outside the lock): wait for it too.
    eventually(lambda: any("no longer ahead" in r.getMessage() for r in caplog.records))

    assert client.current().version == version
    assert len([m for m in (r.getMessage() for r in caplog.records) if "no longer ahead" in m]) == 1


def test_while_ahead_a_usage_report_is_sent_each_interval_with_nothing_served(
    make_client, control_plane, write_state_file, eventually, document
):
    control_plane.always_document(document(1022))
    client, clock = restored(make_client, write_state_file, document, usage_interval=0.05)
    client.start()
    eventually(lambda: control_plane.count() >= 6)  # several usage intervals, not ahead yet
    assert control_plane.report_count() == 0  # nothing to report: no empty reports

    clock.advance(30)
    eventually(lambda: len(control_plane.accepted_reports()) >= 2)

    report = control_plane.accepted_reports()[0]
    assert report["ahead_of_server"] == {
        "server_epoch": 0,
        "server_version": 1022,
        "since": "2026-11-29T06:03:04Z",
    }
    assert report["applied_version"] == 1071
    assert report["providers"] == {}


def test_a_usage_report_leaves_ahead_of_server_out_when_not_ahead(make_client, control_plane, eventually, document):
    control_plane.publish(document(3))
    client = make_client(usage_interval=0.05).start()
    client.record_served("vendor_a")

    eventually(lambda: len(control_plane.accepted_reports()) >= 1)

    assert "ahead_of_server" not in control_plane.accepted_reports()[0]


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf")])
def test_it_refuses_an_ahead_after_s_that_is_not_a_positive_number(make_client, seconds):
    with pytest.raises(ValueError, match="ahead_after_s"):
        make_client(ahead_after_s=seconds)
