"""The client contract every chainclient shares (tests/vectors/client_contract.json).

Poller vectors: a client answered by a scripted server, step by step (time passing, a
restart from the state file, the file edited), and what it must serve and report after each:
the layers (compiled default < last-known-good file < live), never older by (epoch, version),
local expiry, ETag, long poll, identity headers, validity and signatures. Router vectors: every
row of the Router's failure table (what each step's transport does; the request's outcome,
attempts, skipped steps and counts), run through ``Router`` and ``AsyncRouter``.

The TypeScript client (sdk-ts/) runs the same file; ``tests/test_typescript_client.py`` checks
that both suites ran every vector. Add a vector to the file and both clients run it.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import time
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from chainclient import (
    Answer,
    AsyncRouter,
    Attempt,
    BreakerSettings,
    ChainClient,
    ContentPolicyRefusal,
    Contract,
    Provider,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    Registry,
    Router,
    RoutingError,
    Step,
)
from chainclient.health import outcome_class
from chainclient.routing import REPORT_KEYS
from chainclient.testing import FakeClock

CONTRACT = json.loads(
    (Path(__file__).resolve().parent / "vectors" / "client_contract.json").read_text(encoding="utf-8")
)
REGISTRY = Registry(
    {
        name: Provider(spec["destination"], {m: set(c) for m, c in spec["models"].items()})
        for name, spec in CONTRACT["registry"].items()
    }
)
DEFAULT = [Step(s["provider"], s["model"], s["timeout_ms"]) for s in CONTRACT["default"]]


def _epoch_s(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def test_the_vectors_cover_every_row_of_the_failure_table_and_every_poller_promise() -> None:
    """The counts the TypeScript suite must report too; the rows and promises named."""
    rows = {vector["row"] for vector in CONTRACT["router"]}
    promises = {vector["promise"] for vector in CONTRACT["poller"]}
    assert {
        "ProviderError 429, 500, 503, 529 (or any other status not listed here)",
        "ProviderError 502 or 504 after dispatch (a gateway answered; the upstream may have acted)",
        "ProviderTimeout(dispatched=True), ProviderError without a status (connection reset after sending)",
        "ProviderTimeout(dispatched=False), ProviderUnavailable",
        "ProviderError 401 or 403",
        "ProviderError 400 or 422",
        "ContentPolicyRefusal",
        "any other exception",
        "the answer fails verify",
        "Budget: one deadline_s per request",
        "Admission",
        "Circuit breakers",
    } <= rows
    assert {
        "compiled default < last-known-good file < live",
        "a failed poll changes nothing",
        "never older by (epoch, version)",
        "only valid documents are applied",
        "local expiry",
        "ETag",
        "long poll",
        "only documents signed by a trusted key are applied",
        "jitter and backoff",
        "published documents",
        "usage and health reports are sent and never lost",
    } <= promises
    names = [vector["name"] for vector in CONTRACT["poller"] + CONTRACT["router"]]
    assert len(names) == len(set(names)), "vector names are unique"


# --- the poller ------------------------------------------------------------------------------


class ScriptedConnection:
    """The control plane as the client's ``connect`` option opens it: it answers each request
    as the step being run says (``answer``), and keeps what the client sent."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}
        self.sent: dict[str, str] = {}
        self.body: Any = None

    def expect(self, answer: dict[str, Any]) -> None:
        self.answer, self.sent, self.body = answer, {}, None

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        read_timeout: float,
        *,
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> tuple[int, Message, bytes]:
        self.sent = {"path": path, **{name.lower(): value for name, value in headers.items()}}
        if method != "GET":
            self.sent["method"] = method
            self.body = json.loads(body or b"null")
        if "error" in self.answer:
            raise ConnectionRefusedError(self.answer["error"])
        message = Message()
        if self.answer.get("etag") and method == "GET":
            message["ETag"] = self.answer["etag"]
        if self.answer.get("retry_after"):
            message["Retry-After"] = self.answer["retry_after"]
        if method != "GET":
            return self.answer["status"], message, b"{}"
        body_text = json.dumps(self.answer["document"]) if "document" in self.answer else self.answer.get("body", "")
        return self.answer["status"], message, body_text.encode("utf-8")

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass


class PollerRun:
    def __init__(self, vector: dict[str, Any], tmp_path: Path) -> None:
        self.options = vector["options"]
        self.now = _epoch_s(self.options.get("clock", CONTRACT["clock"]))
        self.state_dir = tmp_path if self.options.get("state_dir") else None
        self.control_plane = ScriptedConnection()
        self.client = self.build()

    def build(self) -> ChainClient:
        return ChainClient(
            "http://control-plane.test",
            chain=CONTRACT["chain"],
            token=CONTRACT["token"],
            registry=REGISTRY,
            default=DEFAULT,
            state_dir=self.state_dir,
            long_poll=self.options.get("long_poll", True),
            service=CONTRACT["service"],
            instance=CONTRACT["instance"],
            ahead_after_s=self.options.get("ahead_after_s", 30),
            trusted_keys=self.options.get("trusted_keys"),
            published=self.options.get("published", False),
            clock=lambda: self.now,
            connect=lambda: self.control_plane,
        )

    def step(self, step: dict[str, Any]) -> None:
        self.now += step.get("advance_s", 0)
        if "edit_state_file" in step:
            assert self.state_dir is not None
            path = self.state_dir / f"{CONTRACT['chain']}.json"
            saved = json.loads(path.read_text(encoding="utf-8"))
            saved["document"].update(step["edit_state_file"])
            path.write_text(json.dumps(saved), encoding="utf-8")
        if step.get("restart"):
            self.client = self.build()
        recorded = step.get("record", {})
        for provider in recorded.get("served", ()):
            self.client.record_served(provider)
        for attempt in recorded.get("attempts", ()):
            self.client.record_attempt(_attempt(attempt))
        for provider in recorded.get("breaker_opened", ()):
            self.client.record_breaker_opened(provider)
        sent: dict[str, str] = {}
        if "answer" in step:
            self.control_plane.expect(step["answer"])
            delay = self.client.poll_once()
            sent = self.control_plane.sent
            if "next_s" in step["expect"]:
                low, high = step["expect"]["next_s"]
                assert low - 1e-9 <= delay <= high + 1e-9, ("next poll in", delay, step["expect"]["next_s"])
        if "report" in step:
            self.control_plane.expect(step["report"])
            self.client.flush_usage(5.0)
            sent = self.control_plane.sent
            self.check_report(step["expect"], self.control_plane.body)
        self.check(step["expect"], sent)

    @staticmethod
    def check_report(expect: dict[str, Any], body: Any) -> None:
        wanted = expect.get("report", {})
        if wanted is None:
            assert body is None, "no report is sent with nothing to report"
            return
        seen = {
            **body,
            "providers": {name: entry["requests"] for name, entry in body["providers"].items()},
            "rejected": [[entry["version"], entry["reason"]] for entry in body["rejected"]],
            "ahead_of_server": {
                key: value for key, value in (body.get("ahead_of_server") or {}).items() if key != "since"
            },
            "health": body.get("health"),
        }
        assert {key: seen[key] for key in wanted} == wanted

    def check(self, expect: dict[str, Any], sent: dict[str, str]) -> None:
        names = {
            "if_none_match": "if-none-match",
            "applied_version": "x-chain-applied-version",
            "client": "x-chain-client",
        }
        for key, value in expect.get("sent", {}).items():
            assert sent.get(names.get(key, key)) == value, (key, sent)
        document = self.client.current()
        if "current" in expect:
            seen = {key: getattr(document, key) for key in expect["current"]}
            assert seen == expect["current"]
        if "chain" in expect:
            assert [str(step) for step in document.chain] == expect["chain"]
        health = self.client.health()
        shown = {
            **health,
            "expired_pin": health["expired_pin"] is not None,
            "ahead_of_server": health["ahead_of_server"] is not None,
            "state_file_refused": health["state_file_refused"] is not None,
            "signature_refused": health["signatures"]["refused"],
            "signature_key_id": health["signatures"]["key_id"],
        }
        assert {key: shown[key] for key in expect.get("health", {})} == expect.get("health", {})


def _attempt(spec: dict[str, Any]) -> Attempt:
    """An attempt as the router records it (only what the usage report counts matters)."""
    return Attempt(
        task_id="t",
        attempt_id="t-1",
        provider=spec["provider"],
        model=spec["model"],
        dispatch="dispatched_known",
        outcome=spec["outcome"],
        status=spec["status"],
        elapsed_s=spec["elapsed_s"],
        timeout_s=20.0,
        reason="",
        first_chunk_s=spec.get("first_chunk_s"),
    )


@pytest.mark.parametrize("vector", CONTRACT["poller"], ids=[v["name"] for v in CONTRACT["poller"]])
def test_poller_vector(vector: dict[str, Any], tmp_path: Path) -> None:
    run = PollerRun(vector, tmp_path)
    for index, step in enumerate(vector["steps"]):
        try:
            run.step(step)
        except AssertionError as exc:
            raise AssertionError(f"{vector['name']} step {index}: {exc}") from exc


# --- the router ------------------------------------------------------------------------------


def _raise(spec: dict[str, Any]) -> Exception:
    kind = spec["raise"]
    if kind == "ProviderError":
        return ProviderError(spec["status"], spec.get("dispatched", True), retry_after_s=spec.get("retry_after_s"))
    if kind == "ProviderTimeout":
        return ProviderTimeout(dispatched=spec.get("dispatched", True))
    if kind == "ProviderUnavailable":
        return ProviderUnavailable("connection refused")
    if kind == "ContentPolicyRefusal":
        return ContentPolicyRefusal("flagged")
    return RuntimeError("boom")


class Scripted:
    """Transports that do, call by call, what the request's ``calls`` say."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: dict[str, list[dict[str, Any]]] = {}
        self.unexpected: list[str] = []

    def behaviour(self, step: Step) -> Any:
        queue = self.calls.get(step.provider)
        if not queue:
            self.unexpected.append(str(step))
            raise AssertionError(f"unexpected call to {step}")
        spec = queue.pop(0)
        self.clock.advance(spec.get("takes_s", 0))
        if "raise" in spec:
            raise _raise(spec)
        return Answer(spec["return"], model_id=spec["model_id"]) if "model_id" in spec else spec["return"]

    def sync(self, step: Step, request: Any, timeout_s: float) -> Any:
        return self.behaviour(step)

    async def coroutine(self, step: Step, request: Any, timeout_s: float) -> Any:
        return self.behaviour(step)


def _contract(spec: dict[str, Any] | None) -> Contract | None:
    if spec is None:
        return None
    return Contract(
        requires=set(spec.get("requires", ())), destinations=spec.get("destinations"), name=spec.get("name", "")
    )


@pytest.mark.parametrize("way", ["Router", "AsyncRouter"])
@pytest.mark.parametrize("vector", CONTRACT["router"], ids=[v["name"] for v in CONTRACT["router"]])
def test_router_vector(vector: dict[str, Any], way: str) -> None:
    options = vector["router"]
    clock = FakeClock()
    scripted = Scripted(clock)
    providers = options.get("transports", list(CONTRACT["registry"]))
    call = scripted.sync if way == "Router" else scripted.coroutine
    breaker = BreakerSettings(**options["breaker"]) if "breaker" in options else BreakerSettings()
    router_type = Router if way == "Router" else AsyncRouter
    router = router_type(
        [Step(s["provider"], s["model"], s["timeout_ms"]) for s in vector["chain"]],
        transports=dict.fromkeys(providers, call),
        registry=REGISTRY,
        clock=clock,
        deadline_s=options.get("deadline_s", 30),
        fall_through_on_content_policy=options.get("fall_through_on_content_policy", False),
        breaker=breaker,
    )
    for index, request in enumerate(vector["requests"]):
        clock.advance(request.get("advance_s", 0))
        scripted.calls = {name: list(specs) for name, specs in request["calls"].items()}
        ask = request["options"]
        kwargs: dict[str, Any] = {
            "contract": _contract(ask.get("contract")),
            "side_effects": ask.get("side_effects", False),
            "allow_fallback": ask.get("allow_fallback", True),
        }
        if "verify" in ask:
            kwargs["verify"] = lambda value, wanted=ask["verify"]: value == wanted
        outcome: Any
        try:
            outcome = (
                router.complete("hello", **kwargs)
                if way == "Router"
                else asyncio.run(router.complete("hello", **kwargs))
            )
        except RoutingError as error:
            outcome = error
        expect = request["expect"]
        where = f"{vector['name']} request {index}"
        assert not scripted.unexpected, (where, scripted.unexpected)
        assert all(not queue for queue in scripted.calls.values()), (where, "calls not made", scripted.calls)
        if expect["error"] is None:
            assert not isinstance(outcome, RoutingError), (where, str(outcome))
            assert f"{outcome.provider}/{outcome.model}" == expect["served_by"], where
        else:
            assert type(outcome).__name__ == expect["error"], (where, str(outcome))
        attempts = outcome.receipt.attempts
        assert len(attempts) == len(expect["attempts"]), (where, str(outcome.receipt))
        for attempt, wanted in zip(attempts, expect["attempts"], strict=True):
            seen = {
                "step": attempt.step,
                "outcome": attempt.outcome,
                "dispatch": attempt.dispatch,
                "status": attempt.status,
                "class": outcome_class(attempt),
                "reason": attempt.reason,
                "timeout_s": attempt.timeout_s,
                "elapsed_s": attempt.elapsed_s,
                "model_id": attempt.model_id,
                "destination": attempt.destination,
            }
            assert {key: seen[key] for key in wanted if wanted[key] is not None} == {
                key: value for key, value in wanted.items() if value is not None
            }, where
        skipped = [[str(step), why] for step, why in outcome.receipt.refused]
        assert skipped == expect["skipped"], where
    assert router.report() == {key: vector["report"].get(key, 0) for key in REPORT_KEYS}
    for provider, state in options.get("breakers_after", {}).items():
        assert router.breaker_state(provider) == state
