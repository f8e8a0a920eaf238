"""Signed chain documents end to end, with real processes (docs/sdk.md, "Signed documents"): the
production web process (granian, 2 workers) signs every document it serves, and real
ChainClients given ``trusted_keys`` read it through a relay this test controls
(``TamperingProxy``, a compromised CDN or proxy between the control plane and a service).
Whatever such a relay changes is refused, counted and explained in ``health()``, the last
valid document keeps being served, a state file is verified again at start, and a key
rotation leaves no gap for services that trust the new key.

Timing makes or breaks these tests. The signing keys are made before the web process
starts, as the release step (``manage.py bootstrap``) makes the first one: each process
keeps the key it read for up to ``SIGNER_CACHE_S``, so a process that looked before the key
existed would serve unsigned documents for that long. For the same reason a rotation's
change is made only once every web process is sure to sign with the new key
(``_every_process_signs_with``): a process still holding the old one would sign the change,
and its notification is what every process serves. And a test begins only once both web
workers have started (``production_server`` waits for it), or stopping the server may hang.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from chainclient import ChainClient, ChainDocument
from chainclient.state_file import DIGEST_MISMATCH
from presets import signing
from presets.models import SigningKey
from presets.wire import MAX_WAIT_S
from tests.test_sdk_integration import REGISTRY, follow, select, wait_for
from tests.test_sdk_integration import production_server as production_server  # used through getfixturevalue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced"), pytest.mark.postgres]

CHAIN_PATH = "/api/v1/chains/chat"
# Not the control plane's: what a forger signs with.
STRANGER = Ed25519PrivateKey.generate()
UNKNOWN_KEY_ID = "2099-12-31-ffffff"
# Each tampering test's changes, in turn: never the preset already live (that answers 400).
# Both lead with a vendor, so one letter of the first step's provider names the other one.
PRESETS = ("pin_secondary", "drop_vendor_b")


# --- the relay ----------------------------------------------------------------------------------

Tamper = Callable[[bytes, list[bytes]], bytes]
"""What a compromised relay sends instead of a chain document: ``tamper(body, relayed)``,
``relayed`` being the documents it passed on unchanged before, oldest first."""

# Per hop, or recomputed here.
_NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
)
_NOT_ANSWERED = _NOT_FORWARDED | {"date", "server"}  # http.server writes its own


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client stopped in the middle of a poll: nothing to report
        super().handle_error(request, client_address)


class TamperingProxy:
    """A relay in front of the control plane: honest (every answer passed on as it came) until
    told to ``tamper``; then every chain document it relays is replaced by what the tamper
    function makes of it. GETs only, long polls included (each held upstream on a connection
    of its own, by a thread of its own)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (str(parts.hostname), parts.port)
        self._lock = threading.Lock()
        self._tamper: Tamper | None = None
        self._held: set[http.client.HTTPConnection] = set()
        self._closed = False
        self.relayed: list[bytes] = []
        """Every chain document passed on unchanged, in order."""
        self.tampered: list[tuple[bytes, bytes]] = []
        """Every chain document replaced: (what the control plane sent, what went on instead)."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection expects

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                proxy._relay(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> TamperingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # A long poll still held upstream would keep the web process from stopping for its
        # whole wait: cut those held now, and forward nothing more (a client stopped just
        # now may have sent one more poll that a thread is only now reading).
        with self._lock:
            self._closed = True
            held = list(self._held)
        for upstream in held:
            try:
                upstream.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.shutdown()
        self._server.server_close()

    def tamper(self, tamper: Tamper) -> None:
        with self._lock:
            self._tamper = tamper

    def honest(self) -> None:
        with self._lock:
            self._tamper = None

    def _relay(self, handler: BaseHTTPRequestHandler) -> None:
        headers = {name: value for name, value in handler.headers.items() if name.lower() not in _NOT_FORWARDED}
        upstream = http.client.HTTPConnection(*self._upstream, timeout=MAX_WAIT_S + 10)
        try:
            upstream.connect()  # before it is listed: every connection listed has a socket to cut
            with self._lock:
                if self._closed:
                    raise ConnectionAbortedError("the proxy is closed")
                self._held.add(upstream)
            upstream.request("GET", handler.path, headers=headers)
            response = upstream.getresponse()
            status, body = response.status, response.read()
            answer = [(name, value) for name, value in response.getheaders() if name.lower() not in _NOT_ANSWERED]
        except (OSError, http.client.HTTPException):
            handler.close_connection = True  # the control plane went away: so does the client's connection
            return
        finally:
            with self._lock:
                self._held.discard(upstream)
            upstream.close()
        if status == 200 and urlsplit(handler.path).path == CHAIN_PATH:
            body = self._pass_on(body)
        try:
            handler.send_response(status)
            for name, value in answer:
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:
            handler.close_connection = True

    def _pass_on(self, body: bytes) -> bytes:
        """The chain document to send on: as it came, or tampered with."""
        with self._lock:
            tamper, relayed = self._tamper, list(self.relayed)
            if tamper is None:
                self.relayed.append(body)
                return body
        sent = tamper(body, relayed)
        with self._lock:
            self.tampered.append((body, sent))
        return sent


# --- what a compromised relay does ---------------------------------------------------------------


def _encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def flip_one_byte(body: bytes, relayed: list[bytes]) -> bytes:
    """One letter of the first step's provider changed (vendor_a <-> vendor_b): still JSON,
    still a chain the service can route, and traffic goes to the other vendor."""
    provider = b'"provider":"vendor_'
    at = body.index(provider, body.index(b'"chain":[')) + len(provider)
    other = {ord("a"): ord("b"), ord("b"): ord("a")}[body[at]]
    return body[:at] + bytes([other]) + body[at + 1 :]


def swap_two_steps(body: bytes, relayed: list[bytes]) -> bytes:
    document = json.loads(body)
    chain = document["chain"]
    chain[0], chain[1] = chain[1], chain[0]
    return _encode(document)


def _unsigned(body: bytes) -> Any:  # a document as presets.signing signs it
    document = json.loads(body)
    del document["signature"]
    return document


def strip_the_signature(body: bytes, relayed: list[bytes]) -> bytes:
    return _encode(_unsigned(body))


def sign_again_as_the_real_key(body: bytes, relayed: list[bytes]) -> bytes:
    """Signed again by a key of the forger's, under the control plane's own key id."""
    key_id = json.loads(body)["signature"]["key_id"]
    return _encode(dict(signing.Signer(key_id, STRANGER).sign(_unsigned(body))))


def sign_with_an_unknown_key(body: bytes, relayed: list[bytes]) -> bytes:
    return _encode(dict(signing.Signer(UNKNOWN_KEY_ID, STRANGER).sign(_unsigned(body))))


def replay_the_oldest(body: bytes, relayed: list[bytes]) -> bytes:
    """The oldest document it relayed: genuinely signed, and older than what the client holds."""
    return relayed[0]


# The reason health() gives, "{key_id}" standing for the control plane's key id; None: not a
# signature's fault (an older document is ignored like any older answer, and said so).
TAMPERINGS = [
    pytest.param(flip_one_byte, "the signature does not verify with trusted key '{key_id}'", id="one-byte-flipped"),
    pytest.param(swap_two_steps, "the signature does not verify with trusted key '{key_id}'", id="steps-swapped"),
    pytest.param(strip_the_signature, "unsigned: the document carries no signature", id="signature-stripped"),
    pytest.param(
        sign_again_as_the_real_key,
        "the signature does not verify with trusted key '{key_id}'",
        id="signed-by-another-key-as-the-real-key-id",
    ),
    pytest.param(
        sign_with_an_unknown_key,
        f"signed by key '{UNKNOWN_KEY_ID}', which this client does not trust (trusted: '{{key_id}}')",
        id="unknown-key-id",
    ),
    pytest.param(replay_the_oldest, None, id="older-version-replayed"),
]


# --- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture
def key(synced: None) -> SigningKey:
    """The control plane's signing key (the first one signs at once)."""
    return signing.create_key(actor="test")


@pytest.fixture
def next_key(key: SigningKey) -> SigningKey:
    """A second key, created to sign next: it waits to be activated."""
    return signing.create_key(actor="test")


@pytest.fixture
def server(request: pytest.FixtureRequest, key: SigningKey) -> str:
    """The production web process, started once ``key`` exists."""
    return _every_worker_started(request)


@pytest.fixture
def rotating_server(request: pytest.FixtureRequest, key: SigningKey, next_key: SigningKey) -> str:
    """The production web process, started once ``key`` signs and ``next_key`` waits."""
    return _every_worker_started(request)


def _every_worker_started(request: pytest.FixtureRequest) -> str:
    """``production_server``'s URL (it answers once each of its workers has started)."""
    return str(request.getfixturevalue("production_server"))


def trusting(*keys: SigningKey) -> dict[str, str]:
    """``trusted_keys`` for these keys, as ``manage.py signing_keys public`` prints them."""
    return {key.key_id: key.public_key for key in keys}


def served(url: str, token: str) -> dict[str, Any]:
    """The chain document the control plane serves now, read on a new connection (each may
    reach either web process)."""
    request = urllib.request.Request(f"{url}{CHAIN_PATH}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        document: dict[str, Any] = json.load(response)
    return document


def without_signature(document: dict[str, Any]) -> dict[str, Any]:
    """What a document says: each web process signs the documents it loads itself, at its own
    instant, so two copies of one version can differ in ``signed_at`` and ``value`` alone."""
    return {name: value for name, value in document.items() if name != "signature"}


def signatures(client: ChainClient) -> dict[str, Any]:
    seen: dict[str, Any] = client.health()["signatures"]
    return seen


# --- relays and proxies on the way -----------------------------------------------------------------


@pytest.mark.system
@pytest.mark.parametrize(("tamper", "why"), TAMPERINGS)
def test_a_relay_that_alters_a_document_is_refused_and_the_last_valid_one_kept(
    server: str, key: SigningKey, read_token: str, write_token: str, tamper: Tamper, why: str | None
) -> None:
    """A document changed on the way (one byte, two steps swapped, its signature stripped or
    forged) is refused, counted and explained in health(); an older document genuinely signed
    and replayed does not take the client back. Either way the client keeps serving the last
    valid document, and follows the next real change once the relay is honest again."""
    changes: list[ChainDocument] = []
    with TamperingProxy(server) as proxy:
        client = follow(
            proxy.url,
            read_token,
            trusted_keys=trusting(key),
            state_dir=None,
            poll_interval=0.2,
            wait_s=10,
            ahead_after_s=0.5,
            report_usage=False,
            service="signed-documents",
            on_change=changes.append,
        )
        with client:
            assert wait_for(lambda: client.current().version == 1, 10)
            held = select(server, write_token, PRESETS[0], "INC-40 vendor_a degraded")
            assert wait_for(lambda: client.current().version == held["version"] == 2, 10)
            last_valid = client.current().to_json()
            assert signatures(client) == {"required": True, "key_id": key.key_id, "refused": 0, "last_refused": None}

            proxy.tamper(tamper)
            changed = select(server, write_token, PRESETS[1], "INC-41 vendor_b leaking data")
            if why is None:
                # The replayed document is older than the one held: ignored, and health()
                # says the answers are older than what the client holds.
                assert wait_for(lambda: (client.health()["ahead_of_server"] or {}).get("server_version") == 1, 10)
                assert signatures(client)["refused"] == 0 and signatures(client)["last_refused"] is None
            else:
                assert wait_for(lambda: signatures(client)["refused"] >= 1, 10)
                assert why.format(key_id=key.key_id) in signatures(client)["last_refused"]
                assert client.health()["rejected"] >= 1
            assert changed["version"] == 3  # the control plane moved on ...
            assert client.current().to_json() == last_valid  # ... the client kept the last valid document
            assert client.current().version == 2 and client.current().preset == PRESETS[0]
            assert signatures(client)["key_id"] == key.key_id
            # What the relay sent would be routed by this service but for its signature.
            original, sent = proxy.tampered[0]
            assert sent != original
            ChainDocument.from_json(json.loads(sent), registry=REGISTRY)
            if tamper is flip_one_byte:
                assert len(sent) == len(original)
                assert sum(a != b for a, b in zip(sent, original, strict=True)) == 1

            proxy.honest()
            # The change it was kept from, genuine at last; then no tampered answer is on its way.
            assert wait_for(lambda: client.current().version == 3, 10)
            refused = signatures(client)["refused"]
            following = select(server, write_token, PRESETS[0], "INC-41 resolved")
            assert wait_for(lambda: client.current().version == following["version"] == 4, 10)
            assert without_signature(client.current().to_json()) == without_signature(served(server, read_token))
            assert client.current().chain[0].provider == "vendor_b"  # pin_secondary's, as selected
            assert signatures(client)["refused"] == refused
            assert client.health()["ahead_of_server"] is None

    # Every document the client ever applied is one the control plane signed and sent.
    genuine = [json.loads(body) for body in proxy.relayed]
    assert [change.version for change in changes] == [1, 2, 3, 4]
    assert all(change.to_json() in genuine for change in changes)


# --- the state file ------------------------------------------------------------------------------


def _with_digest(payload: dict[str, Any]) -> dict[str, Any]:
    """The state file's digest recomputed, as whoever can write the file can: sha256 over the
    rest as canonical JSON (``chainclient.state_file``)."""
    content = {name: value for name, value in payload.items() if name != "digest"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**content, "digest": "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()}


def _swap_saved_steps(payload: dict[str, Any]) -> dict[str, Any]:
    chain = payload["document"]["chain"]
    chain[0], chain[1] = chain[1], chain[0]
    return payload


def _strip_saved_signature(payload: dict[str, Any]) -> dict[str, Any]:
    del payload["document"]["signature"]
    return payload


@pytest.mark.system
def test_a_state_file_edited_after_the_client_wrote_it_is_refused_at_start(
    server: str, key: SigningKey, read_token: str, write_token: str, tmp_path: Path
) -> None:
    """The state file holds the document exactly as the control plane signed it, and a client
    given trusted_keys verifies it again at start: an edit is refused (a stale digest, or with
    the digest recomputed, the signature), health() says why and the client starts from its
    compiled-in default; its first poll brings the real document and writes the file anew.
    (sdk/tests/test_client_signatures.py covers every kind of refusal; this is the same
    promise on a file a client wrote from the real control plane.)"""
    state_dir = tmp_path / "state"
    path = state_dir / "chat.json"
    with TamperingProxy(server) as proxy:

        def client(**options: Any) -> ChainClient:
            settings = {"state_dir": state_dir, "poll_interval": 0.2, "wait_s": 10, "report_usage": False}
            return follow(proxy.url, read_token, **{**settings, **options})

        writer = client(trusted_keys=trusting(key))
        with writer:
            select(server, write_token, "pin_secondary", "INC-42 vendor_a degraded")
            assert wait_for(lambda: path.exists() and json.loads(path.read_text())["document"]["version"] == 2, 10)
        written = json.loads(path.read_text())
        assert written["document"]["signature"]["key_id"] == key.key_id

        restarted = client(trusted_keys=trusting(key))  # constructed only: it reads the file
        assert (restarted.current().source, restarted.current().version) == ("disk", 2)
        assert restarted.health()["state_file_refused"] is None

        edits = [
            (_swap_saved_steps, False, DIGEST_MISMATCH),
            (
                _swap_saved_steps,
                True,
                f"its document is refused: the signature does not verify with trusted key {key.key_id!r}",
            ),
            (_strip_saved_signature, True, "unsigned: its document carries no signature"),
        ]
        for edit, recompute, why in edits:
            edited = edit(json.loads(json.dumps(written)))
            path.write_text(json.dumps(_with_digest(edited) if recompute else edited))
            refusing = client(trusted_keys=trusting(key))
            assert (refusing.current().source, refusing.current().version) == ("default", 0), why
            assert why in refusing.health()["state_file_refused"]
            if recompute:
                # The digest was right: a client that verifies no signature believes the edit.
                believing = client()
                assert (believing.current().source, believing.current().version) == ("disk", 2)
                assert believing.current().to_json() == edited["document"]

        # The file left as the last edit made it; a verifying client replaces it from the server.
        recovering = client(trusted_keys=trusting(key))
        assert recovering.health()["state_file_refused"] is not None
        with recovering:
            assert wait_for(lambda: recovering.health()["state_file_refused"] is None, 10)
        assert recovering.current().version == 2
        saved = json.loads(path.read_text())["document"]
        assert saved["signature"]["key_id"] == key.key_id
        assert without_signature(saved) == without_signature(written["document"])


# --- key rotation --------------------------------------------------------------------------------


def _every_process_signs_with(url: str, token: str, key_id: str, *, activated_at: float) -> bool:
    """Whether every web process signs with ``key_id`` now: several reads on new connections
    all name it (the documents the processes hold were signed again), and ``SIGNER_CACHE_S``
    has passed since the activation committed, after which no process can still hold the old
    key. Reads alone cannot tell: a read does not say which process answered it, and new
    connections often reach the same one many times in a row (runs of 8 were seen while the
    other still signed with the old key), so a change made on their word alone was signed
    with the old key about one run in ten."""
    if time.monotonic() < activated_at + signing.SIGNER_CACHE_S + 1.0:
        return False
    return all(served(url, token)["signature"]["key_id"] == key_id for _ in range(8))


@pytest.mark.system
def test_a_key_rotation_has_no_gap_for_clients_that_trust_the_new_key(
    rotating_server: str, key: SigningKey, next_key: SigningKey, read_token: str, write_token: str, tmp_path: Path
) -> None:
    """Rotation without a gap: a client given both keys before the new one is activated
    follows the first change signed by it; a client that trusts only the old key keeps its
    last valid document and says which key it does not trust; each restarts from its state
    file ("disk"), which holds the last document it accepted."""
    with TamperingProxy(rotating_server) as proxy:

        def client(name: str, *keys: SigningKey) -> ChainClient:
            return follow(
                proxy.url,
                read_token,
                trusted_keys=trusting(*keys),
                state_dir=tmp_path / name,
                poll_interval=0.2,
                wait_s=10,
                report_usage=False,
                service="signed-documents",
                instance=name,
            )

        both, old_only = client("both", key, next_key), client("old-only", key)
        with both, old_only:
            assert wait_for(lambda: both.current().version == old_only.current().version == 1, 10)
            assert signatures(both)["key_id"] == signatures(old_only)["key_id"] == key.key_id

            signing.activate_key(key_id=next_key.key_id, actor="test")
            activated_at = time.monotonic()
            assert wait_for(
                lambda: _every_process_signs_with(
                    rotating_server, read_token, next_key.key_id, activated_at=activated_at
                ),
                signing.SIGNER_CACHE_S * 4,
            ), "the web processes did not all sign with the new key"
            # Signed again, the same version answered no long poll.
            assert signatures(both)["key_id"] == signatures(old_only)["key_id"] == key.key_id

            changed = select(rotating_server, write_token, "pin_secondary", "INC-43 vendor_a degraded")
            assert changed["signature"]["key_id"] == next_key.key_id
            assert wait_for(lambda: both.current().version == 2, 10)
            assert wait_for(lambda: signatures(old_only)["refused"] >= 1, 10)

            assert both.current().preset == "pin_secondary"
            assert signatures(both) == {"required": True, "key_id": next_key.key_id, "refused": 0, "last_refused": None}
            assert (old_only.current().version, old_only.current().preset) == (1, "normal")
            assert signatures(old_only)["key_id"] == key.key_id
            assert signatures(old_only)["last_refused"].startswith(
                f"signed by key {next_key.key_id!r}, which this client does not trust (trusted: {key.key_id!r})"
            )

    # Restarted with the control plane out of reach (the proxy is gone): from the file.
    both_again, old_only_again = client("both", key, next_key), client("old-only", key)
    assert (both_again.current().source, both_again.current().version) == ("disk", 2)
    assert signatures(both_again)["key_id"] == next_key.key_id
    assert (old_only_again.current().source, old_only_again.current().version) == ("disk", 1)
    assert signatures(old_only_again)["key_id"] == key.key_id
    assert both_again.health()["state_file_refused"] is None and old_only_again.health()["state_file_refused"] is None
