"""A real OpenID Connect provider for the single sign-on tests, run as a process of its own.

pyop (IdentityPython's provider library) does the protocol: the discovery document, the
authorization request's checks (client, redirect URI, scopes, PKCE), codes, the token
endpoint's client authentication and RS256-signed ID tokens, the userinfo endpoint. This file
adds only HTTP around it (over TLS, like any real provider: its issuer must be https) and a
sign-in form. Its directory of people is a JSON file read at every request:

    {"carol": {"password": "...", "claims": {"sub": "...", "preferred_username": "carol", "groups": [...]}}}

so a test changes what the provider says about someone by rewriting that file, as an
administrator changes a directory. A person's ``sub`` claim is their subject (the provider's
identifier for them, which the control plane links accounts to); two entries may carry the
same ``preferred_username`` or ``email`` with different subjects, as two people at a real
provider can.

    python -m tests.oidc_provider --port P --directory people.json --client-id ID
        --client-secret SECRET --redirect-uri URI [--redirect-uri URI] --certificate cert.pem --key key.pem
"""

from __future__ import annotations

import argparse
import html
import json
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from Cryptodome.PublicKey import RSA
from jwkest.jwk import RSAKey
from pyop.authz_state import AuthorizationState
from pyop.exceptions import InvalidAuthenticationRequest, OAuthError
from pyop.provider import Provider
from pyop.subject_identifier import HashBasedSubjectIdentifierFactory
from pyop.userinfo import Userinfo
from pyop.util import should_fragment_encode


class Directory:
    """The people file, read afresh at every lookup."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def people(self) -> dict[str, Any]:
        return dict(json.loads(self.path.read_text()))

    def __getitem__(self, username: str) -> dict[str, Any]:
        return dict(self.people()[username]["claims"])

    def __contains__(self, username: object) -> bool:
        return username in self.people()

    def password_matches(self, username: str, password: str) -> bool:
        person = self.people().get(username)
        return person is not None and person["password"] == password


def make_provider(
    *, issuer: str, directory: Directory, client_id: str, client_secret: str, redirect_uris: list[str]
) -> Any:
    configuration = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "userinfo_endpoint": f"{issuer}/userinfo",
        "jwks_uri": f"{issuer}/jwks",
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid", "email", "profile"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "grant_types_supported": ["authorization_code"],
        "code_challenge_methods_supported": ["S256"],
        "claims_supported": [
            "sub",
            "preferred_username",
            "email",
            "email_verified",
            "given_name",
            "family_name",
            "groups",
        ],
    }
    clients = {
        client_id: {
            "client_secret": client_secret,
            "redirect_uris": redirect_uris,
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
        }
    }
    signing_key = RSAKey(key=RSA.generate(2048), alg="RS256", use="sig", kid="test-provider-1")
    return Provider(
        signing_key,
        configuration,
        AuthorizationState(HashBasedSubjectIdentifierFactory("test-provider-salt")),
        clients,
        Userinfo(directory),
        extra_scopes={"groups": ["groups"]},
    )


SIGN_IN_FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Test provider</title></head>
<body><h1>Test provider: sign in</h1>{error}
<form method="post" action="/authorize">
<input type="hidden" name="request" value="{request}">
<label>Username <input name="username" autocomplete="username"></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button>
</form></body></html>"""


def handler_for(provider: Any, directory: Directory) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urlsplit(self.path)
            if url.path == "/.well-known/openid-configuration":
                self._json(200, provider.provider_configuration.to_dict())
            elif url.path == "/jwks":
                self._json(200, provider.jwks)
            elif url.path == "/authorize":
                self._authorize_form(url.query)
            elif url.path == "/userinfo":
                self._userinfo(url.query)
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            path = urlsplit(self.path).path
            if path == "/authorize":
                self._authorize(body)
            elif path == "/token":
                try:
                    answer = provider.handle_token_request(body, {"Authorization": self.headers.get("Authorization")})
                except OAuthError as exc:
                    self._json(400, {"error": exc.oauth_error, "error_description": str(exc)})
                    return
                self._json(200, answer.to_dict())
            else:
                self._json(404, {"error": "not_found"})

        def _authorize_form(self, query: str, error: str = "") -> None:
            try:
                provider.parse_authentication_request(query)
            except InvalidAuthenticationRequest as exc:
                self._html(400, f"<p>Bad authentication request: {html.escape(str(exc))}</p>")
                return
            self._html(200, SIGN_IN_FORM.format(request=html.escape(query, quote=True), error=error))

        def _authorize(self, body: str) -> None:
            form = {name: values[0] for name, values in parse_qs(body).items()}
            query = form.get("request", "")
            try:
                request = provider.parse_authentication_request(query)
            except InvalidAuthenticationRequest as exc:
                self._html(400, f"<p>Bad authentication request: {html.escape(str(exc))}</p>")
                return
            username = form.get("username", "")
            if not directory.password_matches(username, form.get("password", "")):
                self._authorize_form(query, error="<p role='alert'>Wrong username or password.</p>")
                return
            answer = provider.authorize(request, username)
            location = answer.request(request["redirect_uri"], should_fragment_encode(request))
            self.send_response(303)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _userinfo(self, query: str) -> None:
            try:
                answer = provider.handle_userinfo_request(query, {"Authorization": self.headers.get("Authorization")})
            except OAuthError as exc:
                self._json(401, {"error": exc.oauth_error, "error_description": str(exc)})
                return
            self._json(200, answer.to_dict())

        def _json(self, status: int, document: Any) -> None:
            self._send(status, "application/json", json.dumps(document).encode())

        def _html(self, status: int, page: str) -> None:
            self._send(status, "text/html; charset=utf-8", page.encode())

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--redirect-uri", action="append", required=True)
    parser.add_argument("--certificate", required=True)
    parser.add_argument("--key", required=True)
    options = parser.parse_args()
    issuer = f"https://127.0.0.1:{options.port}"
    directory = Directory(options.directory)
    provider = make_provider(
        issuer=issuer,
        directory=directory,
        client_id=options.client_id,
        client_secret=options.client_secret,
        redirect_uris=options.redirect_uri,
    )
    server = ThreadingHTTPServer(("127.0.0.1", options.port), handler_for(provider, directory))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(options.certificate, options.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"serving {issuer}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()


# --- for the tests: the provider started on a free port, and its directory --------------


class RunningProvider:
    """The provider process of one test, its issuer URL and the CA file that trusts it."""

    def __init__(self, root: Path, *, people: dict[str, Any], redirect_uris: list[str]) -> None:
        from tests.servers import free_port

        self.root = root
        self.port = free_port()
        self.issuer = f"https://127.0.0.1:{self.port}"
        self.directory = root / "people.json"
        self.ca_file = root / "provider.pem"
        self.key_file = root / "provider-key.pem"
        self.client_id = "controlplane"
        self.client_secret = "test-client-secret-0123456789"
        self.redirect_uris = redirect_uris
        self.process: Any = None
        self.write_people(people)
        write_certificate(self.ca_file, self.key_file)

    def write_people(self, people: dict[str, Any]) -> None:
        """Change the directory, as the provider's administrator does (atomically)."""
        staged = self.directory.with_suffix(".tmp")
        staged.write_text(json.dumps(people))
        staged.replace(self.directory)

    def start(self) -> None:
        import subprocess
        import sys
        import urllib.request

        from django.conf import settings

        from tests.servers import wait_for

        command = [sys.executable, "-m", "tests.oidc_provider", "--port", str(self.port)]
        command += ["--directory", str(self.directory), "--client-id", self.client_id]
        command += [
            "--client-secret",
            self.client_secret,
            "--certificate",
            str(self.ca_file),
            "--key",
            str(self.key_file),
        ]
        for uri in self.redirect_uris:
            command += ["--redirect-uri", uri]
        log = open(self.root / "provider.log", "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=settings.BASE_DIR, stdout=log, stderr=subprocess.STDOUT)
        self._log = log
        trust = ssl.create_default_context(cafile=str(self.ca_file))

        def answers() -> bool:
            try:
                with urllib.request.urlopen(
                    f"{self.issuer}/.well-known/openid-configuration", timeout=2, context=trust
                ) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        assert wait_for(answers, 30), (self.root / "provider.log").read_text()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None
            self._log.close()


def write_certificate(certificate: Path, key_file: Path) -> None:
    """A self-signed certificate for 127.0.0.1 and localhost, its own CA (the tests trust it
    as OIDC_CA_BUNDLE, as an organisation trusts its private CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test OpenID provider")])
    now = datetime.datetime.now(datetime.timezone.utc)
    built = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    certificate.write_bytes(built.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
