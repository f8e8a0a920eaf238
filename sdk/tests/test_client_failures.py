"""A failing control plane changes nothing: current() keeps answering, at once, forever."""

from __future__ import annotations

import logging
import time

import pytest

# The client's timeout is part of each case. An answer that fails by its status gets a
# timeout no busy machine can reach, so the first (good) answer can never time out instead
# (that once made the http-401 case flaky at 0.2 s). A slow answer must outlast the timeout:
# it is held until the test ends, so only the client's timeout decides, however loaded. Those
# two wait out the real 2 s timeout twice (two failures in a row): slow, on purpose.
FAILURES = [
    pytest.param(
        {"status": 500, "body": {"error": {"code": "x", "message": "boom"}}},
        10.0,
        "HTTP 500: boom",
        id="http-500",
    ),
    pytest.param({"status": 503, "body": "<html>maintenance</html>"}, 10.0, "HTTP 503", id="http-503-html"),
    pytest.param(
        {"status": 401, "body": {"error": {"code": "unauthorized", "message": "bad token"}}},
        10.0,
        "HTTP 401: bad token",
        id="http-401",
    ),
    pytest.param({"status": 404}, 10.0, "HTTP 404", id="http-404"),
    pytest.param({"status": 200, "delay": 600.0}, 2.0, "timed out", id="slow-answer", marks=pytest.mark.slow),
    pytest.param({"hang": True}, 2.0, "timed out", id="never-answers", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("reply", "timeout", "logged"), FAILURES)
def test_a_failing_control_plane_leaves_the_live_chain_in_place(
    make_client, control_plane, eventually, document, caplog, reply, timeout, logged
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.reply_document(document(3, "pin_secondary"))
    control_plane.always(**reply)
    client = make_client(timeout=timeout).start()

    eventually(lambda: client.health()["consecutive_failures"] >= 2, timeout=30.0)

    assert client.current().version == 3
    assert client.current().source == "live"
    assert client.health()["last_success_at"] is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage, not per poll
    assert logged in warnings[0]
    assert "keeping v3 pin_secondary" in warnings[0]


def test_refused_connections_leave_the_last_known_good_chain_in_place(
    make_client, refused_url, write_state_file, eventually, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    write_state_file(document(8, "local_only"))
    client = make_client(base_url=refused_url).start()

    eventually(lambda: client.health()["consecutive_failures"] >= 3)

    assert (client.current().version, client.current().source) == (8, "disk")
    health = client.health()
    assert health["last_success_at"] is None
    assert "ConnectionRefusedError" in health["last_error"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1


def test_current_answers_at_once_while_the_poller_is_stuck(make_client, control_plane, eventually, document):
    control_plane.reply_document(document(3))
    control_plane.always(hang=True)
    client = make_client(timeout=5.0).start()
    eventually(lambda: client.current().version == 3)
    eventually(lambda: control_plane.count() >= 2)  # the second request now hangs

    started = time.perf_counter()
    seen = {client.current().version for _ in range(100_000)}
    elapsed = time.perf_counter() - started

    assert seen == {3}
    assert client.health()["consecutive_failures"] == 0  # still waiting on the hung request
    assert elapsed < 5.0  # very generous: it is microseconds per call, not a network wait


def test_the_value_never_expires_during_an_outage(make_client, control_plane, eventually, document):
    # Only a pin carries an expiry (test_client_expiry.py); any other value stays for good.
    control_plane.reply_document(document(3, "local_only", is_default=False))
    control_plane.always(500)
    client = make_client().start()

    eventually(lambda: client.health()["consecutive_failures"] >= 5)

    assert client.current().version == 3
    assert client.current().preset == "local_only"
    assert client.health()["expired_pin"] is None


def test_recovery_is_logged_once_and_resets_the_failure_count(make_client, control_plane, eventually, document, caplog):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.reply(500, times=3)
    control_plane.reply_document(document(2))
    control_plane.always(304)
    client = make_client().start()

    eventually(lambda: client.current().version == 2)
    eventually(lambda: control_plane.count() >= 6)

    health = client.health()
    assert health["consecutive_failures"] == 0
    assert health["last_failure_at"] is not None
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "poll failed" in m]) == 1
    assert len([m for m in messages if "answers again after 3 failed polls" in m]) == 1


def test_failures_back_off_instead_of_hammering(make_client, control_plane, eventually):
    control_plane.always(500)
    client = make_client(poll_interval=0.05, max_backoff=0.4).start()

    eventually(lambda: client.health()["consecutive_failures"] >= 3)
    time.sleep(0.5)

    # Plain polling at 0.05 s would be ~10 requests in that half second; backoff allows fewer.
    assert client.health()["consecutive_failures"] <= 10


def test_a_server_closing_idle_connections_is_not_an_outage(make_client, control_plane, eventually, document):
    control_plane.reply_document(document(2), drop=True)
    control_plane.always(304, drop=True)
    client = make_client().start()

    eventually(lambda: control_plane.count() >= 6)

    assert client.current().version == 2
    assert client.health()["consecutive_failures"] == 0
    assert client.health()["last_error"] is None


def test_retry_after_is_respected_on_503(make_client, control_plane, eventually, document):
    control_plane.reply(503, headers={"Retry-After": "0.4"})
    control_plane.always_document(document(2))
    client = make_client(max_backoff=1.0).start()

    eventually(lambda: client.current().version == 2)

    first, second = control_plane.requests[:2]
    assert second.at - first.at >= 0.35


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), ("0.5", 0.5), ("inf", None), ("nan", None), ("-1", None), ("soon", None), (None, None)],
    ids=["seconds", "fraction", "infinite", "nan", "negative", "words", "absent"],
)
def test_a_retry_after_is_read_as_finite_seconds_or_ignored(value: str | None, expected: float | None) -> None:
    from chainclient.transport import retry_after_value

    assert retry_after_value(value) == expected


def test_a_retry_after_given_as_an_http_date_is_the_seconds_until_then() -> None:
    from email.utils import formatdate

    from chainclient.transport import retry_after_value

    waited = retry_after_value(formatdate(time.time() + 30, usegmt=True))
    assert waited is not None and 28 <= waited <= 31
