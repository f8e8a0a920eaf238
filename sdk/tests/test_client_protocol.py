"""What the client sends on each poll: identity, conditional requests, and 304 handling."""

from __future__ import annotations

import platform

import chainclient


def test_the_first_poll_identifies_the_client_and_its_applied_version(make_client, control_plane, eventually):
    control_plane.always(304)
    make_client(service="checkout", instance="web-7").start()

    eventually(lambda: control_plane.count() >= 1)
    request = control_plane.requests[0]

    assert request.path == "/api/v1/chains/chat"
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.headers["X-Chain-Client"] == "checkout/web-7"
    assert request.headers["X-Chain-Applied-Version"] == "0"
    assert request.headers["If-None-Match"] == '"0"'
    assert request.headers["User-Agent"] == (
        f"chainclient/{chainclient.__version__} python/{platform.python_version()}"
    )


def test_the_default_instance_is_host_and_pid(make_client, control_plane, eventually):
    control_plane.always(304)
    make_client(instance=None).start()

    eventually(lambda: control_plane.count() >= 1)

    service, instance = control_plane.requests[0].headers["X-Chain-Client"].split("/")
    assert service == "checkout"
    assert instance.rsplit("-", 1)[1].isdigit()


def test_after_a_change_it_sends_the_new_etag_and_applied_version(make_client, control_plane, eventually, document):
    control_plane.reply_document(document(3))
    control_plane.always(304)
    make_client().start()

    eventually(lambda: control_plane.count() >= 3)

    later = control_plane.requests[-1].headers
    assert later["If-None-Match"] == '"3"'
    assert later["X-Chain-Applied-Version"] == "3"


def test_it_starts_from_the_saved_version_in_if_none_match(
    make_client, control_plane, write_state_file, eventually, document
):
    write_state_file(document(9))
    control_plane.always(304)
    make_client().start()

    eventually(lambda: control_plane.count() >= 1)

    assert control_plane.requests[0].headers["If-None-Match"] == '"9"'
    assert control_plane.requests[0].headers["X-Chain-Applied-Version"] == "9"


def test_a_304_is_a_successful_poll_that_changes_nothing(make_client, control_plane, eventually, document):
    changes = []
    control_plane.reply_document(document(3))
    control_plane.always(304)
    client = make_client(on_change=changes.append).start()

    eventually(lambda: control_plane.count() >= 5)

    health = client.health()
    assert client.current().version == 3
    assert health["consecutive_failures"] == 0
    assert health["last_success_at"] is not None
    assert health["polls"] >= 4
    assert len(changes) == 1


def test_a_base_url_with_a_path_prefix_is_kept(make_client, control_plane, eventually):
    control_plane.always(304)
    make_client(base_url=control_plane.url + "/control/").start()

    eventually(lambda: control_plane.count() >= 1)

    assert control_plane.requests[0].path == "/control/api/v1/chains/chat"


def test_it_matches_the_real_apis_conditional_get(make_client, control_plane, eventually, document):
    control_plane.publish(document(5))
    client = make_client().start()

    eventually(lambda: client.current().version == 5)
    count = control_plane.count()
    eventually(lambda: control_plane.count() >= count + 3)

    assert client.health()["changes"] == 1
    assert client.health()["consecutive_failures"] == 0
