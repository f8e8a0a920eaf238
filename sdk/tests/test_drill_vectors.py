"""The failover-drill vectors every chainclient shares (tests/vectors/drills.json).

Digests: ``wire.drill_service_digest`` of a drill id and a token's SHA-256. Documents: what
a client makes of a document's ``drill`` (parsed, or ignored with the reason while the
document is still applied). Cases: a ChainClient holding a document with a drill (read from
its state file, as after a restart: no control plane needed) routes a number of requests
through ``Router`` and ``AsyncRouter`` at a given wall-clock instant; which requests were
drilled, the calls each fake provider received, each request's attempts and the usage
report's ``drill`` section must be the vector's.

The TypeScript client (sdk-ts/) runs the same file. ``drill_vectors.py`` builds it from the
contract (a request is drilled iff ``(n + 1) * share_bp // 10000 != n * share_bp // 10000``,
the faults' outcomes, what the report counts), never from this SDK's output: add a case there
and rewrite the file with ``python sdk/tests/drill_vectors.py``.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import time_machine

from chainclient import (
    AsyncRouter,
    BreakerSettings,
    ChainClient,
    ChainDocument,
    Provider,
    ProviderError,
    ProviderTimeout,
    Registry,
    Router,
    RoutingError,
    Step,
)
from chainclient.drills import DrillRequest, DrillTally, takes_part_in
from chainclient.state_file import StateFile
from chainclient.testing import FakeClock, FakeStream
from chainclient.types import Drill
from chainclient.wire import drill_service_digest

VECTORS = json.loads((Path(__file__).resolve().parent / "vectors" / "drills.json").read_text(encoding="utf-8"))
REGISTRY = Registry(
    {
        name: Provider(spec["destination"], {model: set(caps) for model, caps in spec["models"].items()})
        for name, spec in VECTORS["registry"].items()
    }
)
DEFAULT = [Step("vendor_a", "large", 20000), Step("vendor_b", "large", 20000)]


def _epoch_s(text: str) -> float:
    whole, _, fraction = text.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")


# --- digests and documents ---------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["digests"], ids=[str(v["id"]) for v in VECTORS["digests"]])
def test_digest_vector(vector: dict[str, Any]) -> None:
    assert hashlib.sha256(vector["token"].encode()).hexdigest() == vector["token_sha256"]
    assert drill_service_digest(vector["id"], vector["token_sha256"]) == vector["digest"]


@pytest.mark.parametrize("vector", VECTORS["documents"], ids=[v["name"] for v in VECTORS["documents"]])
def test_document_vector(vector: dict[str, Any]) -> None:
    document = ChainDocument.from_json(vector["document"], registry=REGISTRY)
    expect = vector["expect"]
    assert document.version == vector["document"]["version"]  # applied either way
    assert document.drill_ignored == expect["ignored"]
    if expect["drill"] is None:
        assert document.drill is None
        return
    drill = document.drill
    assert drill is not None
    assert {**drill.to_json(), "starts_at_s": drill.starts_at_s, "ends_at_s": drill.ends_at_s} == expect["drill"]
    # Kept as received, for the state file and the signature.
    assert document.to_json()["drill"] == vector["document"]["drill"]


# --- routing -------------------------------------------------------------------------------------


class Scripted:
    """Each provider does, call by call, what the case's behaviours say (the last repeats)."""

    def __init__(self, behaviours: dict[str, list[dict[str, Any]]], clock: FakeClock) -> None:
        self.behaviours = behaviours
        self.clock = clock
        self.calls: dict[str, int] = {}

    def _next(self, step: Step) -> dict[str, Any]:
        made = self.calls.get(step.provider, 0)
        self.calls[step.provider] = made + 1
        specs = self.behaviours[step.provider]
        return specs[min(made, len(specs) - 1)]

    def call(self, step: Step, request: Any, timeout_s: float) -> Any:
        spec = self._next(step)
        self.clock.advance(spec.get("takes_s", 0))
        if spec.get("raise") == "ProviderError":
            raise ProviderError(spec["status"], spec.get("dispatched", True))
        if spec.get("raise") == "ProviderTimeout":
            raise ProviderTimeout(dispatched=spec.get("dispatched", True))
        return spec["return"]

    async def acall(self, step: Step, request: Any, timeout_s: float) -> Any:
        return self.call(step, request, timeout_s)

    def open(self, step: Step, request: Any, timeout_s: float) -> FakeStream:
        spec = self._next(step)
        return FakeStream(spec["stream"], clock=self.clock, first_after_s=spec.get("takes_s", 0))

    async def aopen(self, step: Step, request: Any, timeout_s: float) -> FakeStream:
        return self.open(step, request, timeout_s)


class Recorder:
    """The source of a client without a token (published copies): its document, and what its
    routers record of a drill; no ``takes_part`` (the Router's own rule applies)."""

    def __init__(self, document: ChainDocument) -> None:
        self.document = document
        self.tally = DrillTally()

    def current(self) -> ChainDocument:
        return self.document

    def record_drill(self, drill: Drill, request: DrillRequest) -> None:
        self.tally.record(drill.id, request)


def _source(vector: dict[str, Any], tmp_path: Path) -> tuple[Any, DrillTally]:
    document = ChainDocument.from_json(vector["document"], registry=REGISTRY)
    if vector["token"] is None:
        recorder = Recorder(document)
        return recorder, recorder.tally
    StateFile(tmp_path, chain="chat", registry=REGISTRY).save(document)
    client = ChainClient(
        "http://control-plane.test",
        chain="chat",
        token=vector["token"],
        registry=REGISTRY,
        default=DEFAULT,
        state_dir=tmp_path,
        service="checkout",
        instance="web-1",
    )
    assert client.current().version == document.version
    return client, client._usage.drills


def _route(router: Any, way: str, kind: str, options: dict[str, Any]) -> Any:
    if kind == "complete":
        if way == "Router":
            return router.complete("hello", **options)
        return asyncio.run(router.complete("hello", **options))
    if way == "Router":
        with router.stream("hello", **options) as stream:
            for _ in stream:
                pass
        return stream.result

    async def read() -> Any:
        async with router.stream("hello", **options) as stream:
            async for _ in stream:
                pass
        return stream.result

    return asyncio.run(read())


def _seen(attempt: Any) -> dict[str, Any]:
    return {
        "step": attempt.step,
        "outcome": attempt.outcome,
        "status": attempt.status,
        "dispatch": attempt.dispatch,
        "drill": attempt.drill,
        "reason": attempt.reason,
        "elapsed_s": round(attempt.elapsed_s, 6),  # the test clock's float sums, to the microsecond
        "timeout_s": attempt.timeout_s,
        "chunks": attempt.chunks,
    }


@pytest.mark.parametrize("way", ["Router", "AsyncRouter"])
@pytest.mark.parametrize("vector", VECTORS["cases"], ids=[v["name"] for v in VECTORS["cases"]])
def test_drill_case(vector: dict[str, Any], way: str, tmp_path: Path) -> None:
    source, tally = _source(vector, tmp_path)
    clock = FakeClock()
    scripted = Scripted(vector["behaviours"], clock)
    settings = vector["router"]
    options: dict[str, Any] = {
        "registry": REGISTRY,
        "clock": clock,
        "deadline_s": settings.get("deadline_s", 30),
        "breaker": None if "breaker" in settings and settings["breaker"] is None else BreakerSettings(),
    }
    providers = list(VECTORS["registry"])
    if vector["kind"] == "stream":
        opener = scripted.open if way == "Router" else scripted.aopen
        options["stream_transports"] = dict.fromkeys(providers, opener)
    call = scripted.call if way == "Router" else scripted.acall
    router = (Router if way == "Router" else AsyncRouter)(source, transports=dict.fromkeys(providers, call), **options)
    expect = vector["expect"]
    drill = source.current().drill
    assert drill is not None
    taking_part = source.takes_part(drill) if isinstance(source, ChainClient) else takes_part_in(drill, None)
    assert taking_part == expect["takes_part"]

    drilled = []
    with time_machine.travel(_epoch_s(vector["now"]), tick=False):
        for index, wanted in enumerate(expect["requests"]):
            try:
                outcome = _route(router, way, vector["kind"], vector["options"])
            except RoutingError as error:
                outcome = error
            where = f"{vector['name']} request {index}"
            if wanted["error"] is None:
                assert not isinstance(outcome, RoutingError), (where, str(outcome))
                assert f"{outcome.provider}/{outcome.model}" == wanted["served_by"], where
            else:
                assert type(outcome).__name__ == wanted["error"], (where, str(outcome))
            attempts = outcome.receipt.attempts
            assert [{key: _seen(a)[key] for key in w} for a, w in zip(attempts, wanted["attempts"], strict=False)] == [
                dict(w) for w in wanted["attempts"]
            ], (where, str(outcome.receipt))
            assert len(attempts) == len(wanted["attempts"]), (where, str(outcome.receipt))
            if any(attempt.drill is not None for attempt in attempts):
                drilled.append(index)

    assert drilled == expect["drilled"]
    assert scripted.calls == expect["calls"]
    for provider, state in expect.get("breakers_after", {}).items():
        assert router.breaker_state(provider) == state
    pending = tally.pending()
    if expect["report"] is None:
        assert pending == []
    else:
        assert pending == [drill.id]
        assert tally.take(drill.id).section(drill.id) == expect["report"]
