"""A relay believes only documents the control plane signed, as systems: the control plane ->
relay A -> a tampering proxy -> relay B -> relay C, every one a real process (the proxy a small
HTTP server in this process).

The promises: a document changed on the way (its version raised, its steps changed, its
signature stripped, signed by a key nobody trusts) is refused by relay B, which keeps serving
the last good document byte for byte, says it is degraded (``/healthz``, ``X-Chain-Degraded``
on every read), asks its upstream no faster than it polls, and passes nothing of it on (relay
C); the next genuine change is taken and the mark clears. A relay restarted on a disk holding a
forged document discards it and ends with the genuine one on disk. A rotation is a rewrite of
RELAY_TRUSTED_KEYS_FILE, picked up without a restart; a wrong key setting stops the relay at
start, saying what is wrong.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings

from presets.document_signatures import BAD_SIGNATURE, UNSIGNED, UNTRUSTED_KEY
from presets.wire import SIGNATURE_ALGORITHM, signed_content
from tests.servers import RelayProcess, Stack, require_tools, running_stack, select, wait_for

pytestmark = pytest.mark.postgres

PRESETS = ("pin_secondary", "drop_vendor_b")
CHAT = "/api/v1/chains/chat"
# Relay B's long polls upstream: short, so that a tampering switched on is met within seconds
# (a poll held before it is answered untouched).
B_WAIT_S = 3
# How long relay B is watched while refused, and the most chain reads a second it may send
# upstream meanwhile: its normal rate is one long poll per B_WAIT_S, a relay spinning on what
# it refuses sent ~19 a second.
WATCHED_S = 4.0
POLLS_PER_S_MAX = 2.5


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    require_tools("relay system tests")


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


INTRUDER = Ed25519PrivateKey.generate()
INTRUDER_PUBLIC = _b64url(INTRUDER.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def signed_by_intruder(document: dict[str, Any]) -> dict[str, Any]:
    signature = {"alg": SIGNATURE_ALGORITHM, "key_id": "intruder-1", "signed_at": "2026-12-06T12:00:00.000Z"}
    forged = {**document, "signature": signature}
    signature["value"] = _b64url(INTRUDER.sign(signed_content(forged)))
    return forged


def tampered(how: str, body: bytes) -> tuple[bytes, str | None]:
    """``body`` (a chain document) changed as ``how`` says; the ETag the proxy then claims."""
    document = json.loads(body)
    etag = None
    if how == "version_raised":
        document["version"], etag = 99999, '"99999"'
    elif how == "steps_changed":
        document["chain"][0]["provider"] = "attacker"
    elif how == "signature_stripped":
        del document["signature"]
    elif how == "unknown_key":
        document = signed_by_intruder({**document, "version": document["version"] + 1})
    else:
        raise AssertionError(how)
    return json.dumps(document, separators=(",", ":")).encode(), etag


class TamperingProxy:
    """An HTTP proxy in front of ``upstream_port``: passes everything through until ``tamper``
    is set; then a chain read is sent on without its ``If-None-Match`` and ``wait`` (answered at
    once) and its 200 is rewritten. Counts the chain reads it is sent (token checks aside)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.tamper: str | None = None
        self.polls = 0
        self.tampered = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

            def do_GET(self) -> None:  # noqa: N802 - the base's name
                proxy.forward(self)

            def do_POST(self) -> None:  # noqa: N802 - the base's name
                proxy.forward(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else None
        path = handler.path
        headers = {
            key: value
            for key, value in handler.headers.items()
            if key.lower() not in ("host", "connection", "keep-alive", "content-length")
        }
        poll = handler.command == "GET" and path.split("?")[0] == CHAT and handler.headers.get("if-none-match") != "*"
        how = self.tamper if poll else None
        if poll:
            with self._lock:
                self.polls += 1
        if how is not None:
            headers = {key: value for key, value in headers.items() if key.lower() != "if-none-match"}
            path = CHAT
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=90)
        try:
            upstream.request(handler.command, path, body=body, headers=headers)
            response = upstream.getresponse()
            status, answer = response.status, response.read()
            answered = [(k, v) for k, v in response.getheaders() if k.lower() not in ("content-length", "connection")]
        finally:
            upstream.close()
        if how is not None and status == 200:
            answer, etag = tampered(how, answer)
            if etag is not None:
                answered = [(k, v) for k, v in answered if k.lower() != "etag"] + [("ETag", etag)]
            with self._lock:
                self.tampered += 1
        handler.send_response(status)
        for key, value in answered:
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        handler.wfile.write(answer)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Relays:
    """The stack, relay A following it, the proxy in front of A, relay B behind the proxy and
    relay C behind B; every relay with the control plane's keys."""

    def __init__(self, stack: Stack, root: Path, trusted: dict[str, str]) -> None:
        self.stack, self.root, self.trusted = stack, root, trusted
        self.turn = 0
        self.a = self.relay("a", stack.url)
        self.proxy = TamperingProxy(self.a.port)
        self.b = self.relay("b", self.proxy.url, RELAY_UPSTREAM_WAIT_SECONDS=str(B_WAIT_S))
        self.c = self.relay("c", self.b.url)

    def relay(self, name: str, upstream: str, **env: str) -> RelayProcess:
        (self.root / name).mkdir()
        relay = RelayProcess(
            upstream, self.stack.relay_token, self.root / name / "cache", env=env, trusted_keys=self.trusted
        )
        relay.start()
        return relay

    def change(self) -> int:
        """Select the next preset on the control plane; the new version."""
        self.turn += 1
        status, _, body = select(self.stack, "chat", PRESETS[self.turn % 2])
        assert status == 200, body
        return int(json.loads(body)["version"])

    def stop(self) -> None:
        for relay in (self.c, self.b, self.a):
            relay.stop()
        self.proxy.close()


@pytest.fixture(scope="module")
def relays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relays]:
    root = tmp_path_factory.mktemp("evidence")
    with running_stack("evidence") as stack:
        stack.manage("signing_keys", "create", "--activate")
        trusted = stack.public_keys()
        stack.kill_web()  # the web process reads the new key at start
        stack.start_web()
        relays = Relays(stack, root, trusted)
        try:
            yield relays
        finally:
            relays.stop()


def get(url: str, path: str, token: str | None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()
    except OSError:
        return 0, {}, b""


def serves(relay: RelayProcess, token: str, version: int) -> bool:
    status, headers, body = get(relay.url, CHAT, token)
    return status == 200 and json.loads(body)["version"] == version and "x-chain-degraded" not in headers


def degraded_kind(relay: RelayProcess) -> str | None:
    chain = relay.health()["degraded_chains"].get("chat")
    return None if chain is None else str(chain["kind"])


def log_of(relay: RelayProcess) -> str:
    return (relay.cache_dir.parent / f"relay-{relay.port}.log").read_text(errors="replace")


@pytest.mark.parametrize(
    ("how", "kind"),
    [
        ("version_raised", BAD_SIGNATURE),
        ("steps_changed", BAD_SIGNATURE),
        ("signature_stripped", UNSIGNED),
        ("unknown_key", UNTRUSTED_KEY),
    ],
    ids=["version-raised-to-99999", "steps-changed", "signature-stripped", "signed-by-an-unknown-key"],
)
def test_a_tampered_document_is_refused_and_the_last_good_one_kept_served(relays: Relays, how: str, kind: str) -> None:
    """Each case takes about 8 s of wall clock, on purpose: WATCHED_S (4 s) of paced reads to
    count how often relay B asks the proxy (a rate cannot be counted in less time), then the
    genuine change, which relay B takes after its backoff (up to BACKOFF_MAX_S) because the
    tampering proxy answers at once instead of holding the poll."""
    token = relays.stack.read_token
    version = relays.change()
    assert wait_for(lambda: serves(relays.b, token, version) and serves(relays.c, token, version), 20)
    _, good_headers, good = get(relays.b.url, CHAT, token)
    refused_before = relays.b.health()["refused"][kind]

    relays.proxy.tamper = how
    try:
        assert wait_for(lambda: degraded_kind(relays.b) == kind, B_WAIT_S + 10), relays.b.health()
        polls, began = relays.proxy.polls, time.monotonic()
        while time.monotonic() - began < WATCHED_S:
            status, headers, body = get(relays.b.url, CHAT, token)
            assert (status, body, headers["etag"]) == (200, good, good_headers["etag"])
            assert headers["x-chain-degraded"] == kind
            # Relay C, behind B, only ever gets what B verified, and is not degraded itself.
            status, headers, body = get(relays.c.url, CHAT, token)
            assert (status, body) == (200, good) and "x-chain-degraded" not in headers
            time.sleep(0.2)  # paced reads for the watched seconds; no condition waited for
        asked = relays.proxy.polls - polls
        watched = time.monotonic() - began
        print(f"relay B, refusing ({how}): {asked} chain reads upstream in {watched:.1f} s")
        assert asked <= POLLS_PER_S_MAX * watched, f"{asked} chain reads upstream in {watched:.1f} s"
        assert relays.proxy.tampered >= 1
        health = relays.b.health()
        assert health["status"] == "degraded"
        assert health["chains"]["chat"]["version"] == version and health["chains"]["chat"]["degraded"] == kind
        assert health["degraded_chains"]["chat"]["reason"]
        assert health["refused"][kind] > refused_before
        assert (relays.b.cache_dir / "api" / "v1" / "chains" / "chat").read_bytes() == good
        assert f"refused what the upstream sent ({kind}" in log_of(relays.b)
    finally:
        relays.proxy.tamper = None

    version = relays.change()
    assert wait_for(lambda: serves(relays.b, token, version), 30), relays.b.health()
    assert wait_for(lambda: relays.b.health()["status"] == "ok", 10), relays.b.health()
    assert wait_for(lambda: serves(relays.c, token, version), 10)


def test_a_relay_restarted_on_a_forged_document_discards_it_and_keeps_the_genuine_one(
    relays: Relays, tmp_path: Path
) -> None:
    token = relays.stack.read_token
    version = relays.change()
    assert wait_for(lambda: serves(relays.a, token, version), 10)
    _, _, genuine = get(relays.a.url, CHAT, token)
    forged = json.loads(genuine)
    forged["version"] = 99999  # the old signature: it no longer verifies
    kept = tmp_path / "cache" / "api" / "v1" / "chains"
    kept.mkdir(parents=True)
    (kept / "chat").write_bytes(json.dumps(forged, separators=(",", ":")).encode())

    relay = RelayProcess(relays.a.url, token, tmp_path / "cache", trusted_keys=relays.trusted)
    relay.start()
    try:
        assert wait_for(lambda: serves(relay, token, version), 20), relay.health()
        assert wait_for(lambda: (kept / "chat").read_bytes() == genuine, 10)
        assert "does not verify (bad_signature" in log_of(relay)
        assert relay.health()["status"] == "ok"
    finally:
        relay.stop()


def test_a_rotation_is_a_rewrite_of_the_keys_file_picked_up_without_a_restart(relays: Relays, tmp_path: Path) -> None:
    """The relay trusts only a key the control plane does not sign with (as one whose file has
    not been given the new key yet): it refuses every document and says so; the file rewritten
    with the control plane's keys, it serves the chain, not degraded, still the same process."""
    token = relays.stack.read_token
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({"retired-1": INTRUDER_PUBLIC}))
    relay = RelayProcess(
        relays.a.url,
        token,
        tmp_path / "cache",
        env={"RELAY_TRUSTED_KEYS_FILE": str(keys_file), "RELAY_RELIST_SECONDS": "2"},
    )
    relay.start()
    try:
        assert wait_for(lambda: degraded_kind(relay) == UNTRUSTED_KEY, 10), relay.health()
        status, headers, _ = get(relay.url, CHAT, token)
        assert status == 503 and headers["x-chain-degraded"] == UNTRUSTED_KEY
        assert relay.health()["trusted_keys"] == ["retired-1"]
        assert relay.process is not None
        pid = relay.process.pid

        keys_file.write_text(json.dumps({"retired-1": INTRUDER_PUBLIC, **relays.trusted}))
        version = json.loads(get(relays.a.url, CHAT, token)[2])["version"]
        assert wait_for(lambda: serves(relay, token, version), 20), relay.health()
        health = relay.health()
        assert health["status"] == "ok" and health["degraded_chains"] == {}
        assert health["trusted_keys"] == sorted(["retired-1", *relays.trusted])
        assert relay.process.pid == pid
    finally:
        relay.stop()


def test_a_relay_without_keys_runs_and_says_it_verifies_nothing(relays: Relays, tmp_path: Path) -> None:
    relay = RelayProcess(relays.a.url, relays.stack.relay_token, tmp_path / "cache")
    relay.start()
    try:
        assert relay.health()["verification"].startswith("off: no RELAY_TRUSTED_KEYS")
        assert wait_for(lambda: "verification off: no RELAY_TRUSTED_KEYS" in log_of(relay), 10)
        assert log_of(relay).count("verification off") == 1
    finally:
        relay.stop()


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"RELAY_TRUSTED_KEYS": '{"cp-1": "not-a-key"}'}, "RELAY_TRUSTED_KEYS: key 'cp-1' is not an Ed25519"),
        ({"RELAY_TRUSTED_KEYS": "cp-1=abc"}, "RELAY_TRUSTED_KEYS: not JSON"),
        ({"RELAY_TRUSTED_KEYS_FILE": "/nonexistent/keys.json"}, "cannot be read"),
    ],
    ids=["not-a-key", "not-json", "no-file"],
)
def test_a_wrong_key_setting_stops_the_relay_at_start_saying_what_is_wrong(environ: dict[str, str], says: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "RELAY_UPSTREAM": "http://127.0.0.1:9", "RELAY_TOKEN": "cpt_x", **environ}
    done = subprocess.run(
        [sys.executable, "-m", "relay", "--port", "9"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert says in done.stderr
