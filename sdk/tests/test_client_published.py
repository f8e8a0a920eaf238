"""Published documents (``published=True``): a client polling a static host or a bucket asks
with plain GETs every poll_interval and the host's own ETag, never holds a long poll or sends
usage reports, needs no token, requires trusted_keys, applies only what verifies and never an
older (epoch, version)."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import pytest

pytest.importorskip("cryptography")

from conftest import Recorded, Reply  # noqa: E402
from document_signing import SigningKey  # noqa: E402

KEY = SigningKey.generate("2026-12-04-3f9a")
NEXT = SigningKey.generate("2027-03-01-b7c2")
STRANGER = SigningKey.generate("2027-01-01-ffff")


class StaticHost:
    """What nginx or an object store does with one file: its bytes, an ETag of its own making
    (not the version), 304 when If-None-Match names it, and no notion of ``?wait=``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._body: bytes | None = None

    def put(self, document: dict[str, Any]) -> None:
        with self._lock:
            self._body = json.dumps(document, separators=(",", ":")).encode()

    @property
    def etag(self) -> str:
        with self._lock:
            assert self._body is not None
            return '"' + hashlib.md5(self._body).hexdigest() + '"'

    def __call__(self, request: Recorded) -> Reply:
        with self._lock:
            body = self._body
        if body is None:
            return Reply(404, b"<html>404 Not Found</html>", headers={"Content-Type": "text/html"})
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        if request.headers.get("If-None-Match") == etag:
            return Reply(304, headers={"ETag": etag})
        return Reply(200, body, headers={"ETag": etag, "Content-Type": "application/json"})


@pytest.fixture
def host(control_plane: Any) -> StaticHost:
    static = StaticHost()
    control_plane.script(static)
    return static


@pytest.fixture
def published_client(make_client: Any) -> Any:
    """A client of published documents, as a service would build one: no token, long polls
    left at their default (on), the key it trusts."""

    def build(**overrides: Any) -> Any:
        options: dict[str, Any] = {"token": None, "published": True, "long_poll": True, "trusted_keys": KEY.trusted()}
        return make_client(**(options | overrides))

    return build


# --- the option --------------------------------------------------------------------------------


def test_published_without_trusted_keys_refuses_to_construct(make_client: Any) -> None:
    """A published copy comes from a host that is not the control plane: without keys to check
    it against, the client is not built."""
    with pytest.raises(ValueError) as refused:
        make_client(token=None, published=True)
    assert str(refused.value).startswith("published=True needs trusted_keys")
    assert "manage.py signing_keys public" in str(refused.value)


def test_a_client_of_the_control_plane_still_needs_its_token(make_client: Any) -> None:
    """Only published=True makes the token optional; the control plane's API needs one."""
    with pytest.raises(ValueError) as refused:
        make_client(token=None)
    assert str(refused.value).startswith("token is required")


# --- polling -----------------------------------------------------------------------------------------


def test_it_follows_a_static_host_with_plain_gets_and_the_hosts_etag(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """Each poll is a plain GET of the document's path (no ?wait=, no Authorization), sent
    with the ETag the host gave; an unchanged file costs a 304, a changed one is applied."""
    host.put(KEY.sign(document(1)))
    client = published_client().start()
    eventually(lambda: client.current().version == 1)
    first_etag = host.etag
    eventually(lambda: any(r.headers.get("If-None-Match") == first_etag for r in control_plane.requests))

    host.put(KEY.sign(document(2, "pin_secondary")))
    eventually(lambda: client.current().version == 2)
    assert client.current().preset == "pin_secondary"
    eventually(lambda: control_plane.requests[-1].headers.get("If-None-Match") == host.etag)

    requests = list(control_plane.requests)
    assert {r.path for r in requests} == {"/api/v1/chains/chat"}
    assert all(r.query == {} for r in requests), "a static host was sent ?wait="
    assert all("Authorization" not in r.headers for r in requests)
    health = client.health()
    assert (health["published"], health["long_poll"], health["signatures"]["required"]) == (True, False, True)


def test_a_static_host_answering_at_once_is_polled_every_interval_not_in_a_loop(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """A static host answers every request at once: the client waits poll_interval between
    polls (with its jitter of 10 %), whatever long_poll says."""
    host.put(KEY.sign(document(1)))
    client = published_client(poll_interval=0.2).start()
    eventually(lambda: control_plane.count() >= 5, timeout=10)

    at = [r.at for r in control_plane.requests[:5]]
    gaps = [later - earlier for earlier, later in zip(at[:-1], at[1:], strict=True)]
    assert min(gaps) >= 0.2 * 0.9 - 0.01, gaps
    assert client.health()["polls"] >= 4


def test_a_token_when_given_is_sent(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """A host behind an authenticating proxy gets the token as the control plane would."""
    host.put(KEY.sign(document(1)))
    client = published_client(token="s3cret").start()
    eventually(lambda: client.current().version == 1)
    assert control_plane.requests[0].headers.get("Authorization") == "Bearer s3cret"


def test_no_usage_reports_are_sent(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """Nothing on a static host takes a usage report: none is sent, even when asked for."""
    host.put(KEY.sign(document(1)))
    client = published_client(report_usage=True, usage_interval=0.05).start()
    client.record_served("vendor_b")
    eventually(lambda: client.current().version == 1 and control_plane.count() >= 3)
    client.stop()
    assert control_plane.report_count() == 0


# --- what is applied ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("served", "why"),
    [
        pytest.param(lambda d: d, "unsigned", id="unsigned"),
        pytest.param(STRANGER.sign, "which this client does not trust", id="a-strangers-key"),
        pytest.param(lambda d: KEY.sign(d) | {"reason": "edited on the host"}, "does not verify", id="edited"),
    ],
)
def test_only_a_document_whose_signature_verifies_is_applied(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any, served: Any, why: str
) -> None:
    """Whoever can write the host's files cannot steer traffic: an unsigned, foreign or edited
    document is refused and the held one served, until the genuine one is published."""
    host.put(KEY.sign(document(1)))
    client = published_client().start()
    eventually(lambda: client.current().version == 1)

    host.put(served(document(2, "pin_secondary")))
    eventually(lambda: client.health()["signatures"]["refused"] >= 1)
    assert client.current().version == 1
    assert why in client.health()["signatures"]["last_refused"]

    host.put(KEY.sign(document(3, "pin_secondary")))
    eventually(lambda: client.current().version == 3)


def test_an_older_document_is_never_applied(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """A host that goes back (an old backup restored, a stale replica of a bucket) serves an
    older (epoch, version), genuinely signed: the client keeps the newer one it holds."""
    host.put(KEY.sign(document(5, "pin_secondary", epoch=1)))
    client = published_client().start()
    eventually(lambda: client.current().version == 5)

    older = [KEY.sign(document(6, "normal", epoch=0)), KEY.sign(document(4, "normal", epoch=1))]
    for stale in older:
        host.put(stale)
        polls = client.health()["polls"]
        eventually(lambda polls=polls: client.health()["polls"] >= polls + 2)
        assert (client.current().epoch, client.current().version) == (1, 5)

    host.put(KEY.sign(document(6, "normal", epoch=1)))
    eventually(lambda: client.current().version == 6)


def test_a_document_signed_anew_is_fetched_once_then_answered_304(
    published_client: Any, control_plane: Any, host: StaticHost, document: Any, eventually: Any
) -> None:
    """After a key's activation the host holds the same version signed by the new key: new
    bytes, a new ETag. The client fetches it once and asks with that ETag afterwards, rather
    than fetching the whole document again at every poll."""
    host.put(KEY.sign(document(1)))
    client = published_client(trusted_keys=KEY.trusted() | NEXT.trusted()).start()
    eventually(lambda: client.current().version == 1)

    host.put(NEXT.sign(document(1), signed_at="2027-03-01T00:00:00.000Z"))
    resigned = host.etag
    eventually(lambda: any(r.headers.get("If-None-Match") == resigned for r in control_plane.requests))
    assert client.current().version == 1


# --- environments ------------------------------------------------------------------------------


def test_with_environment_another_environments_copy_is_refused(
    published_client: Any, host: StaticHost, document: Any, eventually: Any, caplog: Any
) -> None:
    """A published copy is read without a token: a host or path serving another environment's
    documents is refused (the field is signed: no host can relabel one), the held one served."""
    host.put(KEY.sign(document(1) | {"environment": "production"}))
    client = published_client(environment="production").start()
    eventually(lambda: client.current().version == 1)

    host.put(KEY.sign(document(2, "pin_secondary") | {"environment": "staging"}))
    eventually(lambda: client.health()["rejected"] >= 1)
    assert client.current().version == 1
    assert (
        "refused document v2 from the control plane: document is of the 'staging' environment, not 'production': "
        "point the client at that environment's documents; keeping v1 normal"
    ) in caplog.text


def test_with_environment_a_state_file_of_another_environment_is_refused(
    published_client: Any, write_state_file: Any, document: Any
) -> None:
    """A service moved to another environment with its state directory does not start from
    the other environment's last-known-good document (it would serve it for as long as it
    cannot reach its host)."""
    write_state_file(KEY.sign(document(5) | {"environment": "staging"}))

    moved = published_client(environment="production", base_url="http://127.0.0.1:9")  # never started
    assert (moved.current().source, moved.current().version) == ("default", 0)
    assert moved.health()["state_file_refused"] == (
        "its document is of the 'staging' environment, not 'production': "
        "point the client at that environment's documents"
    )
    assert published_client(environment="staging", base_url="http://127.0.0.1:9").current().version == 5


@pytest.mark.parametrize("environment", ["", " ", 7])
def test_an_empty_environment_is_refused_at_construction(published_client: Any, environment: Any) -> None:
    with pytest.raises(ValueError) as refused:
        published_client(environment=environment)
    assert str(refused.value) == "environment must be a non-empty string (e.g. 'production'), or None for any"
