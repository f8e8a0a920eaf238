"""The relay's ASGI application: the read API from memory, followed from upstream, kept on disk.

Downstream it answers what the SDK uses, as the control plane does: ``GET /api/v1/chains`` and
``GET /api/v1/chains/{name}`` (200 / 304, long polls with ``wait``, ``min_version``), the
usage reports (``POST /api/v1/chains/{name}/usage``, answered 202 and sent on), the fleet
reports of relays behind it (``POST /api/v1/fleet/seen``), ``/healthz`` and ``/readyz``.
Anything else is refused with the API's error body: changes are made on the control plane.

Upstream it holds one long poll per chain (``_follow``), lists the chains every
``relist_s`` (new chains, deleted ones, a version signed again by a new key), checks each
service token it has not checked within ``token_cache_s``, and once a second sends the usage
reports it took and who read what (``_send_reports``).

Stale: a chain is stale while its follower cannot reach the upstream, while it serves what it
loaded from disk and has not confirmed, or while its upstream says it is stale itself (the
``X-Chain-Stale`` header, seconds since the control plane last confirmed the document). Its
reads then carry ``X-Chain-Stale``, and ``/healthz`` lists it.

Degraded: with the control plane's public keys set (``relay.evidence``), every document from
upstream is verified before it is kept, served or passed on. One that does not verify is
refused (counted by kind, logged once per reason), never replaces the last good one, and marks
its chain degraded until the upstream sends one that verifies: its reads carry
``X-Chain-Degraded: <kind>``, ``/healthz`` says ``degraded`` with the reason, and the follower
waits (backing off) before it asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from collections import Counter, deque
from typing import Any

from presets.document_signatures import KINDS, NOT_A_DOCUMENT, Refusal
from presets.exceptions import InvalidInput
from read_path.answers import Receive, Scope, Send, lifespan, plain_read, respond, respond_error
from read_path.held import Entry, HeldDocuments, departure, read_query
from read_path.http import (
    BEARER_HELP,
    CHAIN_PATH,
    CHAINS_PATH,
    TOKEN_REFUSED,
    bearer_token,
    matches,
    not_served_yet,
    split_environment,
)
from read_path.request_ids import request_id_bytes
from relay import disk
from relay.config import RelayConfig
from relay.evidence import Degradation, TrustedKeys
from relay.upstream import Upstream, UpstreamDown

log = logging.getLogger("relay")

STALE_HEADER = b"x-chain-stale"
FLEET_SEEN_PATH = "/api/v1/fleet/seen"
USAGE_SUFFIX = "/usage"
# A read waits this long for what it asks that the relay does not hold yet (a ``min_version``
# ahead, the revert of a pin that just expired) before it is answered without it.
CATCH_UP_WAIT_S = 1.0
REPORT_MAX_BYTES = 256 * 1024
REPORTS_PER_FLUSH = 500
REPORT_SENDERS = 8
SEEN_MAX = 100_000
# An instance read again on the version already sent upstream is sent again only this long
# after (the control plane writes an unchanged instance once a minute: audit.fleet_recorder).
SEEN_RESEND_S = 60.0
# Identities per fleet report upstream (~100 bytes each), and the largest report taken.
SEEN_PER_POST = 1_000
SEEN_MAX_BYTES = 1024 * 1024
# The longest chain name, X-Chain-Client and X-Chain-Applied-Version the control plane takes
# in a fleet report (``http_api.fleet.FleetSeenView``, ``audit.models.MAX_CLIENT_LENGTH``,
# ``audit.fleet_recorder.MAX_VERSION_LENGTH``; the relay imports no Django, hence copies,
# which tests/test_fleet_evidence.py holds equal): what is longer is never an identity, so
# it is neither held until the flush nor sent upstream (a flood of made-up header-long
# names would otherwise hold SEEN_MAX of them).
SEEN_CHAIN_MAX = 100
SEEN_CLIENT_MAX = 200
SEEN_VERSION_MAX = 10
FLUSH_EVERY_S = 1.0
BACKOFF_MAX_S = 5.0
STALE_POLL_S = 2
FRESH_MAX = 10_000
UNKNOWN_CHAIN_S = 5.0
_clock = time.monotonic
_EXPIRED = "this chain's pin has expired and the relay has not yet received its revert from its upstream; retry shortly"
_CANNOT_CHECK = "the relay cannot reach its upstream to check this token; retry shortly"
_NOTHING_YET = "the relay has not yet reached its upstream and has nothing on disk; retry shortly"
_REFUSED_ONLY = (
    "the relay refused what its upstream sent for this chain ({kind}: not a document the control plane "
    "signed) and holds no earlier one that verifies; see the relay's /healthz"
)
_NOT_HERE = (
    "a relay serves the chain reads (GET /api/v1/chains[/{name}]), usage reports and /healthz only: "
    "make changes on the control plane"
)


class Documents(HeldDocuments):
    """The chains the relay serves, and which of them are stale."""

    def __init__(self) -> None:
        super().__init__()
        self.confirmed_at: dict[str, float] = {}  # when the control plane last stood behind it (Unix s)
        self.stale: set[str] = set()
        # Per chain, how many times it turned stale: a long poll held across a turn is answered
        # then (a 304 saying so), so that a relay behind this one learns it at once.
        self.turns: dict[str, int] = {}
        # The chains whose upstream sent what the relay refused, since the last it believed.
        self.degraded: dict[str, Degradation] = {}
        # The chains whose reads carry a mark (stale or degraded): the plain reads of
        # ``Relay.__call__`` answer the others, in one lookup.
        self.marked: set[str] = set()

    def remark(self, name: str) -> None:
        """Bring ``marked`` up to date for chain ``name`` (after ``stale`` or ``degraded`` changed)."""
        if name in self.stale or name in self.degraded:
            self.marked.add(name)
        else:
            self.marked.discard(name)

    def mark(self, name: str, *, stale: bool) -> None:
        if (name in self.stale) == stale:
            return
        if not stale:
            # Turning fresh wakes nobody: a service answered a 304 at once would wait out its
            # poll interval before asking again (a relay behind this one, stale itself, polls
            # briefly and learns it within STALE_POLL_S).
            self.stale.discard(name)
            self.remark(name)
            return
        self.stale.add(name)
        self.remark(name)
        self.turns[name] = self.turns.get(name, 0) + 1
        self.wake(name)

    def degrade(self, name: str, refusal: Refusal) -> bool:
        """Mark chain ``name`` degraded by ``refusal``; whether its reason is new (to be logged)."""
        degradation = self.degraded.get(name)
        if degradation is None:
            degradation = self.degraded[name] = Degradation(refusal.kind, refusal.why)
            self.remark(name)
        return degradation.refuse(refusal)

    def believed(self, name: str) -> Degradation | None:
        """The upstream sent a document of chain ``name`` that verifies: no longer degraded;
        the degradation it ends, if any."""
        degradation = self.degraded.pop(name, None)
        if degradation is not None:
            self.remark(name)
        return degradation

    def forget(self, name: str) -> None:
        self.drop(name)
        self.stale.discard(name)
        self.degraded.pop(name, None)
        self.remark(name)

    def put(self, entry: Entry) -> bool:
        """Serve ``entry`` if it is newer than what is held (``disk.newer``); whether it is."""
        if not disk.newer(entry, self.entries.get(entry.name)):
            return False
        self.hold(entry)
        return True

    def marks(self, name: str, now: float) -> list[tuple[bytes, bytes]]:
        """The headers a read of chain ``name`` carries: ``X-Chain-Stale``, ``X-Chain-Degraded``."""
        if name not in self.marked:
            return []
        marks = []
        if name in self.stale:
            age = max(0.0, now - self.confirmed_at.get(name, 0.0))
            marks.append((STALE_HEADER, f"{age:.0f}".encode()))
        degradation = self.degraded.get(name)
        if degradation is not None:
            marks.append(degradation.header)
        return marks


class TokenChecks:
    """The tokens the upstream said are valid or not, for ``ttl`` seconds each.

    A token not checked within ``ttl`` is checked again (one request per token, however many
    reads wait on it); when the upstream cannot say, a token it said was valid stays accepted
    (the relay keeps serving through an outage) and an unknown one is refused with 503."""

    def __init__(self, upstream: Upstream, ttl: float, tokens: disk.TokenFile) -> None:
        self.upstream = upstream
        self.ttl = ttl
        self.file = tokens
        # digest -> (valid, checked at, Unix s)
        self.verdicts: dict[str, tuple[bool, float]] = {digest: (True, at) for digest, at in tokens.load().items()}
        self._unsaved: dict[str, tuple[bool, float]] = {}
        self._checking: dict[str, asyncio.Future[bool | str | None]] = {}
        # Verdict key -> the upstream's words refusing it (a 403: another environment, or a chain
        # the token is not bound to), answered as they came.
        self.forbidden: dict[str, str] = {}
        self._digests: dict[str, str] = {}
        self._warned = -math.inf

    def digest(self, token: str) -> str:
        digest = self._digests.get(token)
        if digest is None:
            if len(self._digests) >= 10_000:
                self._digests.clear()
            digest = self._digests[token] = disk.token_digest(token)
        return digest

    async def valid(self, token: str, chain: str | None, environment: str = "") -> bool | str | None:
        """True; False (an unknown, revoked or expired token); the upstream's words when it
        refuses the token this chain or ``environment`` (the relay's: a token of another
        environment, or bound to other chains); or None: the upstream cannot say and the token
        was never seen valid. Verdicts are per token and chain: a token may be bound to some."""
        key = self.key(token, chain, environment)
        verdict = self.verdicts.get(key)
        if verdict is not None and time.time() - verdict[1] < self.ttl:
            return verdict[0] or self.forbidden.get(key, False)
        pending = self._checking.get(key)
        if pending is None:
            pending = self._checking[key] = asyncio.ensure_future(self._check(token, key, chain, environment))
            pending.add_done_callback(lambda _: self._checking.pop(key, None))
        answer = await asyncio.shield(pending)
        if answer is None and verdict is not None and verdict[0]:
            return True  # seen valid; the upstream is down: keep serving
        return answer

    def key(self, token: str, chain: str | None, environment: str) -> str:
        """Where a verdict on ``token`` for ``chain`` (None: the list) of ``environment`` is
        kept: a verdict given before the relay knew its environment (asked without one) is
        never taken for one given with it."""
        digest = self.digest(token)
        return f"{digest}/{environment}/{chain or ''}"

    async def _check(self, token: str, key: str, chain: str | None, environment: str) -> bool | str | None:
        try:
            answer = await self.upstream.check_token(token, chain, environment)
        except UpstreamDown as exc:
            if time.monotonic() - self._warned >= 60:  # once a minute through an outage
                self._warned = time.monotonic()
                log.warning("relay: cannot check tokens with the upstream (%s); accepting those seen valid", exc)
            return None
        ok = answer is True
        if isinstance(answer, str):
            if len(self.forbidden) >= 10_000:
                self.forbidden.clear()
            self.forbidden[key] = answer
        else:
            self.forbidden.pop(key, None)
        self.verdicts[key] = self._unsaved[key] = (ok, time.time())
        return answer

    def fresh_until(self, token: str, chain: str | None, environment: str) -> float | None:
        """Until when (``time.monotonic``) the token's valid verdict for ``chain`` of
        ``environment`` needs no new check."""
        verdict = self.verdicts.get(self.key(token, chain, environment))
        if verdict is None or not verdict[0]:
            return None
        return _clock() + self.ttl - (time.time() - verdict[1])

    def save(self) -> None:
        if self._unsaved:
            unsaved, self._unsaved = self._unsaved, {}
            self.file.merge(unsaved)


class Relay:
    """The ASGI application (one per worker process)."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.documents = Documents()
        self.upstream = Upstream(config.upstream, config.token, relay_name=config.name)
        self.tokens = TokenChecks(self.upstream, config.token_cache_s, disk.TokenFile(config.cache_dir / "tokens.json"))
        self.reports: deque[tuple[str, bytes, dict[str, str], str]] = deque(maxlen=config.report_queue_max)
        self.reports_dropped = 0
        self.reports_sent = 0
        self._report_pause_until = 0.0
        # (chain, X-Chain-Client) -> X-Chain-Applied-Version, as read: sent upstream once a second.
        self.seen: dict[tuple[str, bytes], bytes] = {}
        # (chain, X-Chain-Client) -> the applied version last sent upstream, and when (monotonic).
        self._seen_sent: dict[tuple[str, bytes], tuple[bytes, float]] = {}
        # Authorization header -> until when its token needs no check (the plain reads).
        self._fresh: dict[tuple[bytes, str | None], float] = {}
        # The environment whose documents the relay serves (its token's), as they say: a
        # service's token is checked for it, so a token of another environment is refused here.
        self.environment = ""
        # Chain names the upstream did not know, until when that is believed (monotonic).
        self._unknown: dict[str, float] = {}
        self.upstream_reachable = False
        self.upstream_error = "not contacted yet"
        self.trust = TrustedKeys(config.trusted_keys, config.trusted_keys_file)
        # Documents from upstream refused, by kind (``presets.document_signatures.KINDS``).
        self.refused: Counter[str] = Counter()
        # Per chain, the ETag the upstream gave the document last refused: the next long poll
        # waits on it, so that an upstream that holds the refused document is not asked again
        # and again (a genuine next version is taken however its version compares with it).
        self._refused_tags: dict[str, str] = {}
        self._following: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._started: asyncio.Task[None] | None = None
        self.loaded = False

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        if self.trust.on:
            log.info("relay: verifying every document from the upstream with keys %s", ", ".join(self.trust.key_ids))
        else:
            log.warning("relay: verification %s", self.trust.described()["verification"])
        refusal = self.trust.refusal if self.trust.on else None
        for entry in disk.kept_documents(self.config.documents_dir, refusal=refusal):
            self._learn_environment(entry)
            self.documents.put(entry)
            self.documents.stale.add(entry.name)  # until the upstream confirms it
            self.documents.remark(entry.name)
            self.documents.confirmed_at[entry.name] = _mtime(self.config.documents_dir / entry.name)
        if self.documents.entries:
            log.info("relay: serving %d chains from disk until the upstream confirms them", len(self.documents.entries))
            self.loaded = True
        for name in self.documents.entries:
            self._follow_chain(name)
        self._tasks.append(asyncio.ensure_future(self._relist_periodically()))
        self._tasks.append(asyncio.ensure_future(self._flush_periodically()))

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._following.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()
        self._following.clear()
        with contextlib.suppress(Exception):
            await self._flush()
        await self.upstream.close()
        self._started = None

    # --- following the upstream ---------------------------------------------------------

    def _follow_chain(self, name: str) -> None:
        if name not in self._following:
            self._following[name] = asyncio.ensure_future(self._follow(name))

    async def _follow(self, name: str) -> None:
        """One long poll at a time for chain ``name``, for as long as it exists upstream.

        After a 200 that changed nothing (refused, or not newer than what is held), it waits
        before asking again, backing off as when the upstream is down: asked the same at once,
        the upstream would answer the same at once, as fast as it can."""
        backoff = 0.5
        while True:
            held = self.documents.entries.get(name)
            refused = self._refused_tags.get(name)
            try:
                # While stale, shorter polls: a relay upstream answers a poll when it turns fresh,
                # but not one that arrives just after it did.
                wait = STALE_POLL_S if name in self.documents.stale else self.config.upstream_wait_s
                answer = await self.upstream.chain(name, held=refused or (held.etag if held else None), wait=wait)
            except UpstreamDown as exc:
                self._unreachable(name, str(exc))
            else:
                if answer.status == 304:
                    if not refused:  # the upstream holds what this relay holds
                        self._confirmed(name, answer.headers.get("x-chain-stale"))
                        self._believed(name)
                    else:  # the upstream still holds the document refused
                        self.upstream_reachable, self.upstream_error = True, ""
                    backoff = 0.5
                    continue
                if answer.status == 200:
                    taken = self._take(name, answer.body, answer.headers.get("etag"))
                    if taken is None:
                        self._refused_tags[name] = answer.headers.get("etag") or ""
                        self.upstream_reachable, self.upstream_error = True, ""
                    else:
                        self._confirmed(name, answer.headers.get("x-chain-stale"))
                        if taken or refused:  # held it, or asked with another ETag than the next
                            backoff = 0.5
                            continue
                elif answer.status == 404:
                    log.info("relay: chain %s no longer exists upstream; no longer served", name)
                    self._forget(name)
                    return
                else:
                    self._unreachable(name, f"the upstream answered {answer.status}" + _refusal(answer.body))
            await asyncio.sleep(backoff * (0.5 + random.random()))  # noqa: S311 - jitter, not a secret
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _take(self, name: str, body: bytes, tag: str | None) -> bool | None:
        """Hold what the upstream sent for chain ``name`` if it verifies and is newer than what
        is held (the last good document: never a refused one): True when held, False when
        believed but not newer, None when refused."""
        refusal = self.trust.refusal(body)
        entry = None
        if refusal is None:
            try:
                # Verified, it is tagged as the control plane tags it: the upstream's ETag is not signed.
                entry = disk.entry_of(body, tag=None if self.trust.on else tag)
            except disk.NotADocument as exc:
                refusal = Refusal(NOT_A_DOCUMENT, str(exc))
            else:
                if entry.name != name:
                    refusal = Refusal(NOT_A_DOCUMENT, f"the document of chain {entry.name!r}, asked for {name!r}")
        if refusal is not None or entry is None:
            self._refuse(name, refusal or Refusal(NOT_A_DOCUMENT, "no document"))
            return None
        self._believed(name)
        self.loaded = True
        self._learn_environment(entry)
        if not self.documents.put(entry):
            return False
        try:
            disk.keep_document(self.config.documents_dir, entry, counts=self.trust.counts if self.trust.on else None)
        except OSError as exc:
            log.warning("relay: cannot keep chain %s on disk (%s); serving it from memory", entry.name, exc)
        return True

    def _learn_environment(self, entry: Entry) -> None:
        """The relay's environment, from the first document it takes (verified, when it verifies)."""
        if not self.environment:
            environment = json.loads(entry.body).get("environment", "")
            self.environment = environment if isinstance(environment, str) else ""
            # Tokens checked before were checked for no environment: none of them is fresh now.
            self._fresh.clear()

    def _refuse(self, name: str, refusal: Refusal) -> None:
        self.refused[refusal.kind] += 1
        if self.documents.degrade(name, refusal):
            held = self.documents.entries.get(name)
            log.warning(
                "relay: chain %s: refused what the upstream sent (%s: %s); %s",
                name,
                refusal.kind,
                refusal,
                f"still serving v{held.version}, the last that verified" if held else "it serves none",
            )

    def _believed(self, name: str) -> None:
        self._refused_tags.pop(name, None)
        ended = self.documents.believed(name)
        if ended is not None:
            log.warning(
                "relay: chain %s: the upstream sends documents that verify again (%d refused); no longer degraded",
                name,
                ended.refused,
            )

    def _confirmed(self, name: str, upstream_stale: str | None) -> None:
        now = time.time()
        self.upstream_reachable, self.upstream_error = True, ""
        if upstream_stale is None:
            self.documents.confirmed_at[name] = now
            self.documents.mark(name, stale=False)
            return
        try:
            age = max(0.0, float(upstream_stale))
        except ValueError:
            age = 0.0
        self.documents.confirmed_at[name] = now - age
        self.documents.mark(name, stale=True)

    def _unreachable(self, name: str, why: str) -> None:
        if name not in self.documents.stale or self.upstream_reachable:
            log.warning(
                "relay: chain %s: cannot follow the upstream (%s); serving what it has, marked stale", name, why
            )
        self.upstream_reachable, self.upstream_error = False, why
        self.documents.mark(name, stale=True)

    def _forget(self, name: str) -> None:
        self.documents.forget(name)
        self._refused_tags.pop(name, None)
        self._following.pop(name, None)
        with contextlib.suppress(OSError):
            disk.forget_document(self.config.documents_dir, name)

    async def _relist_periodically(self) -> None:
        while True:
            await self._relist()
            await asyncio.sleep(self.config.relist_s)

    async def _relist(self) -> None:
        """Follow the chains the upstream lists: new ones, gone ones, a version signed again by
        another key (the long poll does not answer that: same ETag), and degraded ones."""
        try:
            answer = await self.upstream.chains()
        except UpstreamDown as exc:
            self.upstream_reachable, self.upstream_error = False, str(exc)
            return
        if answer.status != 200:
            self.upstream_reachable, self.upstream_error = False, f"the upstream answered {answer.status}"
            log.warning("relay: listing the chains: %s%s", self.upstream_error, _refusal(answer.body))
            return
        try:
            listed = json.loads(answer.body)["chains"]
            names = {item["name"]: item for item in listed}
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("relay: the upstream's chain list is unreadable (%s)", exc)
            return
        self.upstream_reachable = True
        for name, item in names.items():
            held = self.documents.entries.get(name)
            key = (item.get("signature") or {}).get("key_id")
            resigned = held is not None and held.order == (item.get("epoch", 0), item.get("version"))
            # A degraded chain is asked again each time too: once its keys are right (a rotation
            # added to RELAY_TRUSTED_KEYS_FILE), what it refused is taken by then at the latest.
            if held is None or (resigned and held.key_id != key) or name in self.documents.degraded:
                await self._fetch(name)
            self._follow_chain(name)
        for name in set(self._following) - set(names):
            task = self._following.get(name)
            if task is not None:
                task.cancel()
            self._forget(name)

    async def _fetch(self, name: str, *, min_version: str | None = None) -> Entry | None:
        """The chain's document read now (a plain read), held if newer; None if unavailable."""
        params = {"min_version": min_version} if min_version else None
        try:
            answer = await self.upstream.request("GET", CHAIN_PATH + name, params=params)
        except UpstreamDown:
            return None
        if answer.status != 200:
            return None
        if self._take(name, answer.body, answer.headers.get("etag")) is None:
            return None
        self._confirmed(name, answer.headers.get("x-chain-stale"))
        return self.documents.entries.get(name)

    # --- reports upstream ------------------------------------------------------------------

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            try:
                await self._flush()
            except Exception as exc:  # noqa: BLE001 - reports are best effort; serving goes on
                log.warning("relay: sending reports upstream failed: %s", exc)

    async def _flush(self) -> None:
        try:
            self.tokens.save()
        except OSError as exc:
            log.warning("relay: cannot keep token verdicts on disk: %s", exc)
        await self._send_seen()
        await self._send_reports()

    def _note_seen(self, chain: str, client: bytes, applied: bytes) -> bool:
        """Note that the instance ``client`` read ``chain`` on version ``applied``, to send
        upstream at the flush; False when it is not kept: it could never be an identity
        (``SEEN_CLIENT_MAX``), or SEEN_MAX instances are noted already."""
        if not (
            0 < len(applied) <= SEEN_VERSION_MAX and 0 < len(client) <= SEEN_CLIENT_MAX and len(chain) <= SEEN_CHAIN_MAX
        ):
            return False
        if len(self.seen) >= SEEN_MAX and (chain, client) not in self.seen:
            return False
        self.seen[(chain, client)] = applied
        return True

    async def _send_seen(self) -> None:
        """Send upstream the instances read since the last flush, each at most once a minute
        unless its applied version changed: a held long poll's client asks again at every
        change and every wait, and the control plane needs only what is new
        (``SEEN_RESEND_S``)."""
        if not self.seen:
            return
        seen, self.seen = self.seen, {}
        now = _clock()
        sent = self._seen_sent
        fresh = [
            (key, version)
            for key, version in seen.items()
            if (last := sent.get(key)) is None or last[0] != version or now - last[1] >= SEEN_RESEND_S
        ]
        for start in range(0, len(fresh), SEEN_PER_POST):
            batch = fresh[start : start + SEEN_PER_POST]
            items = [
                {"chain": chain, "client": client.decode("latin-1"), "applied_version": version.decode("latin-1")}
                for (chain, client), version in batch
            ]
            body = json.dumps({"instances": items}).encode()
            try:
                answer = await self.upstream.request(
                    "POST", FLEET_SEEN_PATH, body=body, headers={"content-type": "application/json"}
                )
            except UpstreamDown:
                return  # the next reads note them again
            if answer.status >= 400:
                log.warning("relay: fleet report refused upstream (%d)%s", answer.status, _refusal(answer.body))
                continue
            if len(sent) + len(batch) > SEEN_MAX:
                sent.clear()  # bounded: each instance is then sent once more
            for key, version in batch:
                sent[key] = (version, now)

    async def _send_reports(self) -> None:
        if not self.reports or time.monotonic() < self._report_pause_until:
            return
        batch = [self.reports.popleft() for _ in range(min(REPORTS_PER_FLUSH, len(self.reports)))]
        gate = asyncio.Semaphore(REPORT_SENDERS)
        retry: list[tuple[str, bytes, dict[str, str], str]] = []

        async def send(report: tuple[str, bytes, dict[str, str], str]) -> None:
            path, body, headers, token = report
            async with gate:
                try:
                    answer = await self.upstream.request("POST", path, body=body, headers=headers, token=token)
                except UpstreamDown:
                    retry.append(report)
                    return
            if answer.status in (429, 503) or answer.status >= 500:
                retry.append(report)
                try:
                    pause = float(answer.headers.get("retry-after", "1"))
                except ValueError:
                    pause = 1.0
                self._report_pause_until = max(self._report_pause_until, time.monotonic() + min(pause, 60.0))
            elif answer.status >= 400:
                self.reports_dropped += 1
                log.info("relay: a usage report was refused upstream (%d)%s", answer.status, _refusal(answer.body))
            else:
                self.reports_sent += 1

        await asyncio.gather(*(send(report) for report in batch))
        for report in reversed(retry):  # first again, in their order
            if len(self.reports) == self.reports.maxlen:
                self.reports_dropped += 1
                continue
            self.reports.appendleft(report)

    # --- serving ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Most reads are plain, as on the control plane's front (read_path/front.py): a GET of a
        # chain the relay holds fresh, with no query, by a token checked within its cache time
        # (``_fresh``: by the Authorization header as sent). They are answered here in a few
        # lookups, their headers and answer by the read front's own code (``answers.plain_read``);
        # everything else goes through ``_read`` and the rest.
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            entry = self.documents.by_path.get(scope["path"])
            if entry is not None and entry.name not in self.documents.marked:
                header, client, applied, start, body = plain_read(entry, scope["headers"])
                # Fresh by header and chain: a token may be bound to some chains only.
                if (
                    header is not None
                    and self._fresh.get((header, entry.name), 0.0) > _clock()
                    and not entry.is_expired(time.time())
                ):
                    if client is not None:
                        self._note_seen(entry.name, client, applied)
                    await send(start)
                    await send(body)
                    return
        kind = scope["type"]
        if kind == "lifespan":
            await lifespan(receive, send, self.start, self.stop)
            return
        if kind != "http":
            return
        if self._started is None or not self._started.done():
            await self.start()
        path: str = scope["path"]
        method: str = scope["method"]
        headers = dict(scope["headers"])
        request_id = request_id_bytes(headers.get(b"x-request-id"))
        named, path = split_environment(path)
        if named and named != self.environment:
            # A downstream relay checking a token for its environment, or a read naming one:
            # refused, never taken as "no such chain" (which a token check counts as valid).
            if not self.environment:
                await respond_error(send, 503, _NOTHING_YET, request_id)
                return
            message = f"this relay serves the {self.environment} environment, not {named}"
            await respond_error(send, 403, message, request_id, details={"environment": named})
            return
        name = path[len(CHAIN_PATH) :]
        if method == "GET" and (path == CHAINS_PATH or (path.startswith(CHAIN_PATH) and "/" not in name)):
            await self._read(scope, receive, send, name if path != CHAINS_PATH else "", headers, request_id)
        elif method == "POST" and path.startswith(CHAIN_PATH) and path.endswith(USAGE_SUFFIX):
            await self._take_report(receive, send, path, headers, request_id)
        elif method == "POST" and path == FLEET_SEEN_PATH:
            await self._take_seen(receive, send, headers, request_id)
        elif method == "GET" and path == "/healthz":
            await respond(send, 200, json.dumps(self.health()).encode(), request_id)
        elif method == "GET" and path == "/readyz":
            ready = self.loaded
            body = {"status": "ready" if ready else "starting", **self.health()}
            await respond(send, 200 if ready else 503, json.dumps(body).encode(), request_id)
        else:
            await respond_error(send, 404 if method in ("GET", "HEAD") else 405, _NOT_HERE, request_id)

    def health(self) -> dict[str, Any]:
        now = time.time()
        stale = sorted(self.documents.stale)
        degraded = self.documents.degraded
        return {
            "status": "degraded" if degraded else "ok" if self.upstream_reachable and not stale else "stale",
            "relay": self.config.name,
            "upstream": self.config.upstream,
            "upstream_reachable": self.upstream_reachable,
            "upstream_error": self.upstream_error,
            **self.trust.described(),
            "degraded_chains": {name: degraded[name].described(now) for name in sorted(degraded)},
            "refused": {kind: self.refused[kind] for kind in KINDS},
            "chains": {
                name: {
                    "version": entry.version,
                    "epoch": entry.epoch,
                    "key_id": entry.key_id,
                    "stale": name in self.documents.stale,
                    "degraded": degraded[name].kind if name in degraded else None,
                    "confirmed_seconds_ago": round(now - self.documents.confirmed_at.get(name, now), 1),
                }
                for name, entry in sorted(self.documents.entries.items())
            },
            "stale_chains": stale,
            "long_polls_held": self.documents.waiters,
            "reports_queued": len(self.reports),
            "reports_sent": self.reports_sent,
            "reports_dropped": self.reports_dropped,
        }

    async def _authorized(self, send: Send, headers: dict[bytes, bytes], request_id: bytes, chain: str | None) -> bool:
        header = headers.get(b"authorization")
        token = bearer_token(header)
        if token is None:
            await respond_error(send, 401, BEARER_HELP, request_id, auth=True)
            return False
        valid = await self.tokens.valid(token, chain, self.environment)
        if valid is None:
            await respond_error(send, 503, _CANNOT_CHECK, request_id)
            return False
        if isinstance(valid, str):
            details = {"environment": self.environment, **({"chain": chain} if chain else {})}
            await respond_error(send, 403, valid, request_id, details=details)
            return False
        if not valid:
            await respond_error(send, 401, TOKEN_REFUSED, request_id, auth=True)
            return False
        until = self.tokens.fresh_until(token, chain, self.environment)
        if until is not None and header is not None:
            if len(self._fresh) >= FRESH_MAX:
                self._fresh.clear()  # bounded memory against floods of headers
            self._fresh[header, chain] = until
        return True

    async def _read(
        self, scope: Scope, receive: Receive, send: Send, name: str, headers: dict[bytes, bytes], request_id: bytes
    ) -> None:
        if not await self._authorized(send, headers, request_id, name or None):
            return
        degradation = self.documents.degraded.get(name)
        if degradation is not None and name not in self.documents.entries:
            message = _REFUSED_ONLY.format(kind=degradation.kind)
            await respond_error(send, 503, message, request_id, details={"chain": name}, extra=[degradation.header])
            return
        if not self.loaded:
            await respond_error(send, 503, _NOTHING_YET, request_id)
            return
        if not name:
            await respond(send, 200, self.documents.list_body, request_id)
            return
        try:
            wait, minimum = read_query(scope.get("query_string"))
        except InvalidInput as exc:
            await respond_error(send, 400, exc.message, request_id, details=exc.details)
            return
        entry = self.documents.entries.get(name)
        if entry is None and self.upstream_reachable and self._unknown.get(name, 0.0) <= _clock():
            entry = await self._fetch(name)  # a chain made since the last listing
            if entry is not None:
                self._follow_chain(name)
            else:  # asked upstream at most once per UNKNOWN_CHAIN_S per name
                if len(self._unknown) >= FRESH_MAX:
                    self._unknown.clear()
                self._unknown[name] = _clock() + UNKNOWN_CHAIN_S
        if entry is None:
            await respond_error(send, 404, f"unknown chain {name!r}", request_id, details={"chain": name})
            return
        if minimum is not None and entry.order < minimum:
            entry = await self._catch_up(name, entry, minimum)
            if entry.order < minimum:
                refusal = not_served_yet(name, entry.order, minimum)
                await respond_error(send, 409, refusal.message, request_id, details=refusal.details)
                return
        client = headers.get(b"x-chain-client")
        if client is not None:
            self._note_seen(name, client, headers.get(b"x-chain-applied-version", b""))
        tag = headers.get(b"if-none-match")
        if_none_match = tag.decode("latin-1") if tag is not None else ""
        if entry.is_expired(time.time()):
            entry = await self._unexpired(name, entry)
            if entry is None:
                await respond_error(send, 503, _EXPIRED, request_id)
                return
        if wait and matches(if_none_match, entry.etag):
            gone = await departure(receive)
            try:
                waited = await self._hold(name, entry, wait, gone)
            finally:
                gone.cancel()
            if waited is None:
                return  # the client left
            if waited.etag != entry.etag and not await self._authorized(send, headers, request_id, name):
                return  # revoked while held: not one more document
            entry = waited
            if entry.is_expired(time.time()):
                await respond_error(send, 503, _EXPIRED, request_id)
                return
        extra = self.documents.marks(name, time.time())
        if matches(if_none_match, entry.etag):
            await respond(send, 304, b"", request_id, entry.etag_header, extra)
        else:
            await respond(send, 200, entry.body, request_id, entry.etag_header, extra)

    async def _hold(self, name: str, held: Entry, wait: float, gone: asyncio.Future[Any]) -> Entry | None:
        """The chain's entry once it changes, its pin expires, or ``wait`` passes; None if the
        client leaves first."""
        deadline = time.monotonic() + wait
        turn = self.documents.turns.get(name, 0)
        while True:
            left = deadline - time.monotonic()
            if held.expires_at is not None:
                left = min(left, held.expires_at - time.time())
            if left <= 0:
                break
            changed = await self.documents.wait_for_change(name, held.etag, left, gone=gone)
            if changed is not None:
                return changed
            if gone.done():
                return None
            if self.documents.turns.get(name, 0) != turn:
                break  # turned stale: said at once
        entry = self.documents.entries.get(name) or held
        if entry.is_expired(time.time()):
            return await self._unexpired(name, entry) or entry
        return entry

    async def _unexpired(self, name: str, entry: Entry) -> Entry | None:
        """The chain's document after its expired pin's revert, which the upstream sends at the
        expiry; None when it has not arrived within ``CATCH_UP_WAIT_S``, or at once when the chain
        is stale (the upstream cannot send it)."""
        if name in self.documents.stale:
            return None
        changed = await self.documents.wait_for_change(name, entry.etag, CATCH_UP_WAIT_S)
        if changed is None and name not in self.documents.stale:
            changed = await self._fetch(name)
        if changed is None or changed.is_expired(time.time()):
            return None
        return changed

    async def _catch_up(self, name: str, entry: Entry, minimum: tuple[int, int]) -> Entry:
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        while entry.order < minimum and (left := deadline - time.monotonic()) > 0:
            entry = await self.documents.wait_for_change(name, entry.etag, left) or entry
        if entry.order < minimum and self.upstream_reachable:
            entry = await self._fetch(name, min_version=f"{minimum[0]}.{minimum[1]}") or entry
        return entry

    async def _body(self, receive: Receive, limit: int = REPORT_MAX_BYTES) -> bytes | None:
        """The request's body; None past ``limit`` bytes (or when the client left)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _take_report(
        self, receive: Receive, send: Send, path: str, headers: dict[bytes, bytes], request_id: bytes
    ) -> None:
        name = path[len(CHAIN_PATH) : -len(USAGE_SUFFIX)]
        if not name or "/" in name:
            await respond_error(send, 404, _NOT_HERE, request_id)
            return
        if not await self._authorized(send, headers, request_id, name):
            return
        body = await self._body(receive)
        if body is None:
            await respond_error(send, 413, f"a usage report is at most {REPORT_MAX_BYTES} bytes", request_id)
            return
        token = bearer_token(headers.get(b"authorization")) or ""
        forwarded = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in headers.items()
            if key in (b"content-type", b"x-chain-client", b"x-request-id", b"user-agent")
        }
        if len(self.reports) == self.reports.maxlen:
            self.reports_dropped += 1  # the oldest gives way
        self.reports.append((path, body, forwarded, token))
        await respond(send, 202, b'{"accepted":true,"dropped":{},"relayed":true}', request_id)

    async def _take_seen(self, receive: Receive, send: Send, headers: dict[bytes, bytes], request_id: bytes) -> None:
        if not await self._authorized(send, headers, request_id, None):
            return
        body = await self._body(receive, SEEN_MAX_BYTES)
        if body is None:
            await respond_error(
                send, 413, f"a fleet report is at most {SEEN_MAX_BYTES} bytes: send more, smaller", request_id
            )
            return
        try:
            items = json.loads(body or b"")["instances"]
            seen = {
                (str(i["chain"]), str(i["client"]).encode("latin-1")): str(i["applied_version"]).encode("latin-1")
                for i in items
            }
        except (ValueError, KeyError, TypeError) as exc:
            expected = "expected {'instances': [{chain, client, applied_version}, ...]}"
            await respond_error(send, 400, f"{expected} ({exc})", request_id)
            return
        kept = sum(self._note_seen(chain, client, version) for (chain, client), version in seen.items())
        await respond(send, 202, json.dumps({"accepted": kept, "dropped": len(seen) - kept}).encode(), request_id)


def _mtime(path: Any) -> float:
    try:
        return float(path.stat().st_mtime)
    except OSError:
        return 0.0


def _refusal(body: bytes) -> str:
    """The upstream's error message, for a log line."""
    try:
        return f": {json.loads(body)['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return ""
