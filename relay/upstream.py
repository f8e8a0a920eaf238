"""The relay's HTTP client to its upstream: kept-alive connections (httpx2), one place that turns
every transport failure into ``UpstreamDown``."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx2

from presets.documents import ENVIRONMENT_PATH
from read_path.http import CHAIN_PATH, CHAINS_PATH

# Every request the relay makes names it (the upstream's logs and access lines).
USER_AGENT = "chain-relay/1"
CONNECT_TIMEOUT_S = 5.0
# A long poll is answered within its wait; this much more before the relay calls it lost.
LONG_POLL_GRACE_S = 10.0
REQUEST_TIMEOUT_S = 10.0


class UpstreamDown(Exception):
    """The upstream could not be reached or did not answer in time."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx2.Headers
    body: bytes


class Upstream:
    def __init__(self, base_url: str, token: str, *, relay_name: str) -> None:
        self.base_url = base_url
        self._auth = f"Bearer {token}"
        self._client = httpx2.AsyncClient(
            base_url=base_url,
            headers={"user-agent": USER_AGENT, "x-chain-relay": relay_name},
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            # One long poll per chain is held at once, plus token checks and reports.
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0),
            trust_env=False,
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        token: str | None = None,
    ) -> Answer:
        """One request with the relay's token (or ``token``: a service's, checked or forwarded)."""
        sent = {"authorization": f"Bearer {token}" if token is not None else self._auth, **(headers or {})}
        try:
            response = await self._client.request(
                method,
                path,
                headers=sent,
                params=params,
                content=body,
                timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
            )
        except httpx2.HTTPError as exc:
            raise UpstreamDown(f"{exc.__class__.__name__}: {exc}") from None
        return Answer(response.status_code, response.headers, response.content)

    async def chain(self, name: str, *, held: str | None, wait: int) -> Answer:
        """The chain's document: a long poll of ``wait`` seconds when ``held`` (its ETag)."""
        headers = {"if-none-match": held} if held else {}
        params = {"wait": str(wait)} if held and wait else None
        return await self.request(
            "GET", CHAIN_PATH + name, headers=headers, params=params, timeout=wait + LONG_POLL_GRACE_S
        )

    async def chains(self) -> Answer:
        return await self.request("GET", CHAINS_PATH)

    async def check_token(self, token: str, chain: str | None, environment: str = "") -> bool | str:
        """Whether the upstream takes ``token`` for reads of ``chain`` (None: the list) in
        ``environment`` (the relay's; empty: the token's own): asked with a read that sends no
        document (``If-None-Match: *``). False: an unknown, revoked or expired token; the
        upstream's words when it refuses the token this chain or environment (403, another
        environment's or bound to other chains). Raises UpstreamDown when it cannot say."""
        path = (f"{ENVIRONMENT_PATH}{environment}" if environment else "") + (
            CHAIN_PATH + chain if chain else CHAINS_PATH
        )
        answer = await self.request("GET", path, headers={"if-none-match": "*"}, token=token)
        if answer.status in (200, 304, 404):
            return True
        if answer.status == 401:
            return False
        if answer.status == 403:
            return _message(answer.body) or "this token may not read this chain here"
        raise UpstreamDown(f"the upstream answered {answer.status} to a token check")


def _message(body: bytes) -> str:
    """The upstream's error message (the API's error shape), or empty."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return message if isinstance(message, str) else ""
