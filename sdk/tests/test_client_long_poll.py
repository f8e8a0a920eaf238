"""Long polling (``?wait=``), its fallback to plain polling, and stopping mid-request."""

from __future__ import annotations

import logging
import time

import chainclient.client


def test_a_long_poll_sends_wait_with_if_none_match(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    make_client(long_poll=True, wait_s=5).start()

    eventually(lambda: control_plane.count() >= 2)

    for request in control_plane.requests:
        assert request.query == {"wait": "5"}
        assert "If-None-Match" in request.headers


def test_plain_polling_sends_no_wait(make_client, control_plane, eventually):
    control_plane.always(304)
    make_client(long_poll=False).start()

    eventually(lambda: control_plane.count() >= 2)

    assert all(request.query == {} for request in control_plane.requests)


def test_a_change_arrives_promptly_during_a_held_long_poll(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    # A poll interval this long means only the held request can deliver the change in time.
    client = make_client(long_poll=True, wait_s=20, poll_interval=30).start()
    eventually(lambda: client.current().version == 1)
    eventually(lambda: control_plane.count() >= 2)  # the second request is being held

    published = time.monotonic()
    control_plane.publish(document(2, "pin_secondary"))
    eventually(lambda: client.current().version == 2, timeout=3.0)

    assert time.monotonic() - published < 3.0
    assert control_plane.requests[1].headers["If-None-Match"] == '"1"'
    assert control_plane.count() <= 4


def test_against_a_server_ignoring_wait_it_polls_at_the_interval_instead_of_spinning(
    make_client, control_plane, eventually, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.honour_wait = False
    control_plane.publish(document(1))
    client = make_client(long_poll=True, wait_s=5, poll_interval=0.05).start()
    eventually(lambda: client.current().version == 1)
    eventually(lambda: control_plane.count() >= 2)  # past the pause that follows a change
    first = control_plane.count()

    time.sleep(0.5)

    # About 10 polls fit in half a second at 0.05 s; a spinning client would make hundreds.
    assert 3 <= control_plane.count() - first <= 20
    assert client.health()["consecutive_failures"] == 0
    notes = [r for r in caplog.records if "answered a long poll at once" in r.getMessage()]
    assert len(notes) == 1


def test_a_400_to_wait_turns_long_polling_off_with_one_log_line(
    make_client, control_plane, eventually, document, caplog
):
    caplog.set_level(logging.INFO, logger="chainclient")
    control_plane.reply(400, {"error": {"code": "validation_error", "message": "wait: unknown"}})
    control_plane.always_document(document(2))
    client = make_client(long_poll=True, wait_s=5).start()

    eventually(lambda: client.current().version == 2)
    eventually(lambda: control_plane.count() >= 4)

    assert control_plane.requests[0].query == {"wait": "5"}
    assert all(request.query == {} for request in control_plane.requests[1:])
    assert client.health()["long_poll"] is False
    assert client.health()["consecutive_failures"] == 0
    lines = [r.getMessage() for r in caplog.records if "?wait=" in r.getMessage()]
    assert len(lines) == 1
    assert "wait: unknown" in lines[0]


def test_a_held_long_poll_that_never_answers_times_out_after_wait_plus_margin(make_client, control_plane, eventually):
    control_plane.always(hang=True)
    client = make_client(long_poll=True, wait_s=0.3, timeout=0.2).start()

    eventually(lambda: client.health()["consecutive_failures"] >= 1)

    assert client.health()["last_error"] == "timed out"
    assert client.current().source == "default"


def test_stop_returns_promptly_during_a_hanging_request(make_client, control_plane, eventually):
    control_plane.always(hang=True)
    client = make_client(long_poll=False, timeout=30).start()
    eventually(lambda: control_plane.count() >= 1)

    started = time.monotonic()
    client.stop()
    elapsed = time.monotonic() - started

    assert elapsed < 1.0
    assert client.health()["running"] is False
    assert client.health()["consecutive_failures"] == 0  # being stopped is not a failure


def test_stop_returns_promptly_during_a_held_long_poll(make_client, control_plane, eventually, document):
    control_plane.publish(document(1))
    client = make_client(long_poll=True, wait_s=30, timeout=30).start()
    eventually(lambda: client.current().version == 1)
    eventually(lambda: control_plane.count() >= 2)

    started = time.monotonic()
    client.stop()

    assert time.monotonic() - started < 1.0
    assert client.health()["running"] is False


def test_a_stopped_client_keeps_serving_its_last_value_and_can_start_again(
    make_client, control_plane, eventually, document
):
    control_plane.publish(document(1))
    client = make_client(long_poll=True, wait_s=30).start()
    eventually(lambda: client.current().version == 1)
    client.stop()

    assert client.current().version == 1

    client.start()
    control_plane.publish(document(2))
    eventually(lambda: client.current().version == 2)


def test_after_a_change_a_fleet_spreads_its_next_long_polls_over_a_short_pause(
    make_client, control_plane, eventually, document
):
    control_plane.publish(document(1))
    clients = [make_client(long_poll=True, wait_s=20, instance=f"web-{i}", state_dir=None) for i in range(8)]
    published = time.monotonic()
    for client in clients:
        client.start()
    eventually(lambda: control_plane.count() >= 16)  # each applied v1 and asked again

    repolls = [r.at for r in control_plane.requests if r.headers["If-None-Match"] == '"1"']
    assert len(repolls) == 8
    # Without the pause all eight would re-ask within a few milliseconds of each other.
    assert max(repolls) - min(repolls) > 0.05
    assert max(repolls) - published < chainclient.client.REPOLL_SPREAD_S + 1.0


def test_a_change_made_during_the_pause_after_a_change_is_fetched_when_it_ends(
    make_client, control_plane, eventually, document
):
    control_plane.publish(document(1))
    client = make_client(long_poll=True, wait_s=20, poll_interval=30).start()
    eventually(lambda: client.current().version == 1)

    control_plane.publish(document(2, "pin_secondary"))

    eventually(lambda: client.current().version == 2, timeout=chainclient.client.REPOLL_SPREAD_S + 1.0)
    assert control_plane.requests[1].headers["If-None-Match"] == '"1"'
