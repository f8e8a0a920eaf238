"""The trusted-proxy sign-in under the production web process (granian ASGI, tests/servers.py):
the peer address the server saw decides. From 127.0.0.1, listed in PROXY_AUTH_TRUSTED_PROXIES,
the headers sign the person in with the role their groups map to; restarted with a list
that leaves 127.0.0.1 out, the same request is refused and nobody is signed in."""

from __future__ import annotations

import http.client
import re
from urllib.parse import urlsplit

import pytest

from tests.servers import Stack, require_tools, running_stack

HEADERS = {"X-Forwarded-User": "frank", "X-Forwarded-Groups": "engineering, llm-oncall"}
ENVIRONMENT = {
    "PROXY_AUTH_USER_HEADER": "X-Forwarded-User",
    "PROXY_AUTH_GROUPS_HEADER": "X-Forwarded-Groups",
    "PROXY_AUTH_TRUSTED_PROXIES": "127.0.0.1",
    "OIDC_ONCALL_GROUPS": "llm-oncall",
    "OIDC_VIEWER_GROUPS": "engineering",
}


def page(stack: Stack, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """GET /chains/chat/ without following a redirect: status, Location, body."""
    connection = http.client.HTTPConnection(urlsplit(stack.url).netloc, timeout=15)
    try:
        connection.request("GET", "/chains/chat/", headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.getheader("Location", ""), " ".join(answer.read().decode().split())
    finally:
        connection.close()


@pytest.mark.system
def test_the_headers_count_only_from_a_trusted_peer() -> None:
    require_tools("the proxy sign-in's system test")
    with running_stack("proxyauth", env=ENVIRONMENT) as stack:
        status, _, body = page(stack, HEADERS)
        assert status == 200, body
        assert re.search(r'who-name">frank</span> <span class="who-role">on-call', body)
        assert "Review and pin…" in body
        # The negative control: without the headers, nobody is signed in.
        status, location, _ = page(stack)
        assert status == 302 and location.startswith("/accounts/login/")

        stack.kill_web()
        stack.env["PROXY_AUTH_TRUSTED_PROXIES"] = "10.0.0.0/8"
        stack.start_web()
        status, _, body = page(stack, HEADERS)
        assert status == 403
        assert "127.0.0.1, which is not one of the sign-in proxies this control plane trusts" in body
        assert "frank" not in body.split("<main", 1)[0]  # nobody signed in (the header bar)
