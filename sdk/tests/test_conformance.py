"""Conformance: every fault, through the real vendor libraries, through the Router.

For each scenario of ``chainclient.fault_provider`` and each library (``openai``,
``anthropic``), a two-step chain (``vendor``, failing as the scenario says, then ``backup``,
healthy) is asked in four ways: ``Router.complete``, ``AsyncRouter.complete``,
``Router.stream`` and ``AsyncRouter.stream``. Nothing is mocked: the official client
libraries talk HTTP to a local server. The run checks, per case, the first attempt's
outcome class, what the router did (served, fell back, stopped, interrupted) and how long
it took to get there: at once, or within the bound configured (the step's timeout, the
first-chunk bound, the idle bound) + 100 ms, never a hang.

The table in sdk/README.md ("Conformance") is this run's output; the last test fails when
it differs. ``make conformance`` (``CONFORMANCE_WRITE=1``) rewrites it.

Every case runs in one module-scoped fixture (~30 s, most of it waiting out the bounds
on purpose: four hanging scenarios x two libraries x four ways).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") == "true":  # CI installs requirements-dev.txt: a missing library fails
    import anthropic
    import openai
else:  # the SDK's own suite, run without the extras, skips this module
    anthropic = pytest.importorskip("anthropic")
    openai = pytest.importorskip("openai")

from chainclient import (  # noqa: E402 - after the libraries are known to be there
    AsyncRouter,
    BreakerSettings,
    ContentPolicyRejected,
    FailurePolicy,
    RequestRejected,
    Router,
    RoutingError,
    Step,
    StreamInterrupted,
)
from chainclient.fault_provider import SCENARIOS, FaultProvider  # noqa: E402
from chainclient.health import outcome_class  # noqa: E402
from chainclient.integrations.anthropic import AnthropicMessages, AsyncAnthropicMessages  # noqa: E402
from chainclient.integrations.openai import AsyncOpenAIChat, OpenAIChat  # noqa: E402
from chainclient.testing import FakeClock, fake_document  # noqa: E402

# Seconds on purpose (the module docstring): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"
STEP_TIMEOUT_S = 0.5
IDLE_S = 0.3
SLACK_S = 0.1
AT_ONCE_S = 0.5
"""What "at once" must stay under (an HTTP exchange on loopback, on a busy machine)."""
MODEL = "conformance-model"
CHAIN = [Step("vendor", MODEL, int(STEP_TIMEOUT_S * 1000)), Step("backup", MODEL, int(STEP_TIMEOUT_S * 1000))]
PARAMS: dict[str, dict[str, Any]] = {
    "no_headers": {"hang_s": 10},
    "first_chunk_late": {"delay_s": 3},
    "silence_after_first_chunk": {"hang_s": 10},
    "rate_limited": {"retry_after": 2},
}
LIBRARIES = ("openai", "anthropic")
WAYS = ("complete", "async complete", "stream", "async stream")
MESSAGES = [{"role": "user", "content": "hello"}]


@dataclass(frozen=True)
class Seen:
    """How one case went."""

    outcome_class: str
    decision: str
    """served (by the failing step), fell back, stopped, or interrupted."""
    wait: str
    """What bounded the time to the decision: at once, step timeout, first-chunk bound, idle bound."""
    elapsed_s: float
    limit_s: float
    detail: str = ""


# What each scenario must become: (complete(), stream()) -> (class, decision, wait).
EXPECTED: dict[str, tuple[tuple[str, str, str], tuple[str, str, str]]] = {
    "ok": (("served", "served", "at once"), ("served", "served", "at once")),
    "rate_limited": (("rate_limited", "fell back", "at once"),) * 2,
    "server_error": (("server_error", "fell back", "at once"),) * 2,
    "unavailable": (("server_error", "fell back", "at once"),) * 2,
    "overloaded": (("server_error", "fell back", "at once"),) * 2,
    "unauthorized": (("credentials", "fell back", "at once"),) * 2,
    "context_length": (("rejected", "fell back", "at once"),) * 2,
    "content_policy_400": (("content_policy", "stopped", "at once"),) * 2,
    "content_filter": (("content_policy", "stopped", "at once"),) * 2,
    "connection_refused": (("unavailable", "fell back", "at once"),) * 2,
    "reset_before_headers": (("unknown", "fell back", "at once"),) * 2,
    "reset_mid_stream": (("unknown", "fell back", "at once"), ("interrupted", "interrupted", "at once")),
    "no_headers": (("timeout", "fell back", "step timeout"),) * 2,
    "first_chunk_late": (("timeout", "fell back", "step timeout"), ("timeout", "fell back", "first-chunk bound")),
    "silence_after_first_chunk": (
        ("timeout", "fell back", "step timeout"),
        ("interrupted", "interrupted", "idle bound"),
    ),
    "no_terminal_event": (("unknown", "fell back", "at once"), ("interrupted", "interrupted", "at once")),
    "malformed_chunk": (("unknown", "fell back", "at once"),) * 2,
    "wrong_model": (("served", "served", "at once"),) * 2,
    "error_event": (("served", "served", "at once"), ("interrupted", "interrupted", "at once")),
}
LIMITS = {
    "at once": AT_ONCE_S,
    "step timeout": STEP_TIMEOUT_S,
    "first-chunk bound": STEP_TIMEOUT_S,
    "idle bound": IDLE_S,
}


def request_for(library: str) -> dict[str, Any]:
    return {"messages": MESSAGES, **({"max_tokens": 64} if library == "anthropic" else {})}


def decide(way: str, router: Any, library: str) -> tuple[Any, BaseException | None, int]:
    """Run one request: (the route or result, the error, chunks the caller got)."""
    request = request_for(library)
    if way == "complete":
        try:
            return router.complete(request), None, 0
        except RoutingError as error:
            return None, error, 0
    if way == "stream":
        route = router.stream(request, idle_s=IDLE_S)
        got = 0
        try:
            for _ in route:
                got += 1
        except RoutingError as error:
            return route, error, got
        return route, None, got
    raise AssertionError(way)


async def decide_async(way: str, router: AsyncRouter, library: str) -> tuple[Any, BaseException | None, int]:
    request = request_for(library)
    if way == "async complete":
        try:
            return await router.complete(request), None, 0
        except RoutingError as error:
            return None, error, 0
    route = router.stream(request, idle_s=IDLE_S)
    got = 0
    try:
        async for _ in route:
            got += 1
    except RoutingError as error:
        return route, error, got
    return route, None, got


def judge(expected_wait: str, outcome: Any, error: BaseException | None, got: int, way: str) -> Seen:
    receipt = error.receipt if isinstance(error, RoutingError) else outcome.receipt
    first = receipt.attempts[0]
    if error is None:
        provider = outcome.provider
        decision = "served" if provider == "vendor" else "fell back"
    elif isinstance(error, StreamInterrupted):
        decision = "interrupted"
    elif isinstance(error, (RequestRejected, ContentPolicyRejected)):
        decision = "stopped"
    else:
        decision = f"unexpected {type(error).__name__}"
    elapsed = first.elapsed_s
    if decision == "interrupted" and first.first_chunk_s is not None:
        # After the commit point the idle bound runs from the last chunk the caller got.
        elapsed = first.elapsed_s - first.first_chunk_s
    detail = first.model_id if first.outcome == "ok" else (first.error or first.reason)
    if decision == "interrupted":
        detail = f"{got} chunk(s) delivered; {first.error}"
    return Seen(outcome_class(first), decision, expected_wait, elapsed, LIMITS[expected_wait], detail)


def run_case(
    library: str,
    way: str,
    scenario: str,
    vendor: FaultProvider,
    routers: dict[str, Any],
    make_async: Callable[[], AsyncRouter],
) -> Seen:
    vendor.set(scenario, **PARAMS.get(scenario, {}))
    expected = EXPECTED[scenario][0 if "complete" in way else 1]
    if way.startswith("async"):

        async def run() -> tuple[Any, BaseException | None, int]:
            return await decide_async(way, make_async(), library)

        outcome, error, got = asyncio.run(run())
    else:
        router = routers[library]
        router.reset_breakers()
        outcome, error, got = decide(way, router, library)
    return judge(expected[2], outcome, error, got, way)


@pytest.fixture(scope="module")
def observed() -> Iterator[dict[tuple[str, str, str], Seen]]:
    """Every scenario, for both libraries, in all four ways."""
    seen: dict[tuple[str, str, str], Seen] = {}
    with FaultProvider() as vendor, FaultProvider() as backup:
        clients = {
            "openai": lambda url: openai.OpenAI(base_url=f"{url}/v1", api_key="conformance"),
            "anthropic": lambda url: anthropic.Anthropic(base_url=url, api_key="conformance"),
        }
        async_clients = {
            "openai": lambda url: AsyncOpenAIChat(openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="conformance")),
            "anthropic": lambda url: AsyncAnthropicMessages(
                anthropic.AsyncAnthropic(base_url=url, api_key="conformance")
            ),
        }
        adapters = {"openai": OpenAIChat, "anthropic": AnthropicMessages}
        routers = {
            library: Router(
                CHAIN,
                transports={
                    "vendor": adapters[library](clients[library](vendor.url)),
                    "backup": adapters[library](clients[library](backup.url)),
                },
                breaker=BreakerSettings(),
            )
            for library in LIBRARIES
        }
        for library in LIBRARIES:

            def make_async(library: str = library) -> AsyncRouter:
                transports = {
                    "vendor": async_clients[library](vendor.url),
                    "backup": async_clients[library](backup.url),
                }
                return AsyncRouter(CHAIN, transports=transports, breaker=BreakerSettings())

            for scenario in SCENARIOS:
                for way in WAYS:
                    seen[(library, scenario, way)] = run_case(library, way, scenario, vendor, routers, make_async)
        yield seen


CASES = [(library, scenario, way) for library in LIBRARIES for scenario in SCENARIOS for way in WAYS]


@pytest.mark.parametrize(("library", "scenario", "way"), CASES, ids=["-".join(case) for case in CASES])
def test_each_fault_becomes_its_class_and_decision_within_its_bound(
    observed: dict[tuple[str, str, str], Seen], library: str, scenario: str, way: str
) -> None:
    seen = observed[(library, scenario, way)]
    expected = EXPECTED[scenario][0 if "complete" in way else 1]
    assert (seen.outcome_class, seen.decision) == expected[:2], seen.detail
    assert seen.elapsed_s <= seen.limit_s + SLACK_S, f"{seen.elapsed_s:.3f}s past {seen.wait} ({seen.detail})"
    if seen.wait != "at once":
        assert seen.elapsed_s >= seen.limit_s - 0.01, "a bound is not enforced early"


def test_the_wrong_model_is_named_in_the_receipt(observed: dict[tuple[str, str, str], Seen]) -> None:
    for library in LIBRARIES:
        for way in WAYS:
            assert observed[(library, "wrong_model", way)].detail == "substituted-model-2026"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_retry_after_keeps_the_provider_out_until_it_passes(library: str) -> None:
    clock = FakeClock()
    with FaultProvider("rate_limited", retry_after=20) as vendor, FaultProvider() as backup:
        make = {
            "openai": lambda url: OpenAIChat(openai.OpenAI(base_url=f"{url}/v1", api_key="t")),
            "anthropic": lambda url: AnthropicMessages(anthropic.Anthropic(base_url=url, api_key="t")),
        }[library]
        transports = {"vendor": make(vendor.url), "backup": make(backup.url)}
        router = Router(CHAIN, transports=transports, breaker=BreakerSettings(), clock=clock)
        first = router.complete(request_for(library))
        assert first.provider == "backup" and first.attempts[0].status == 429
        vendor.set("ok")
        clock.advance(19)
        skipped = router.complete(request_for(library))
        assert skipped.provider == "backup"
        assert "circuit breaker open" in dict((s.provider, why) for s, why in skipped.receipt.refused)["vendor"]
        assert len(vendor.requests) == 1, "nothing was sent to the vendor before its Retry-After passed"
        clock.advance(2)
        assert router.complete(request_for(library)).provider == "vendor"


def table(observed: dict[tuple[str, str, str], Seen]) -> str:
    """The README's conformance table, from the run."""
    lines = [
        "| Scenario | Library | `complete()`, sync and async | `stream()`, sync and async |",
        "| --- | --- | --- | --- |",
    ]
    for scenario in SCENARIOS:
        for library in LIBRARIES:
            cells = []
            for pair in (("complete", "async complete"), ("stream", "async stream")):
                sync, asynchronous = (observed[(library, scenario, way)] for way in pair)
                same = (sync.outcome_class, sync.decision, sync.wait) == (
                    asynchronous.outcome_class,
                    asynchronous.decision,
                    asynchronous.wait,
                )
                cell = f"`{sync.outcome_class}`, {sync.decision}, {sync.wait}"
                if not same:
                    cell += f" (async: `{asynchronous.outcome_class}`, {asynchronous.decision}, {asynchronous.wait})"
                cells.append(cell)
            lines.append(f"| `{scenario}` | {library} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


BLOCK = re.compile(r"(<!-- conformance:start -->\n)(.*?)(<!-- conformance:end -->)", re.S)


def test_the_readme_table_is_this_runs_output(observed: dict[tuple[str, str, str], Seen]) -> None:
    generated = table(observed)
    readme = README.read_text(encoding="utf-8")
    match = BLOCK.search(readme)
    assert match is not None, "sdk/README.md has no <!-- conformance:start --> ... <!-- conformance:end --> block"
    if os.environ.get("CONFORMANCE_WRITE") == "1":
        README.write_text(readme[: match.start(2)] + generated + readme[match.end(2) :], encoding="utf-8")
        return
    assert match.group(2) == generated, "sdk/README.md's conformance table is stale: run `make conformance`"


def test_the_readmes_fallback_drill_runs_as_written() -> None:
    """The "Drill your own service's fallback" example, as a service would paste it."""
    readme = README.read_text(encoding="utf-8")
    start = readme.index("Drill your own service's fallback")
    block = re.search(r"```python\n(.*?)```", readme[start:], re.S)
    assert block is not None, "the drill example's code block is missing"
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "sdk/README.md (drill example)", "exec"), namespace)  # noqa: S102
    drills = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
    assert drills, "the example defines no test function"
    for drill in drills:
        drill()


# --- a chain whose failure policy commits streams complete ---------------------------------------

COMMIT_COMPLETE_CASES = [
    (library, scenario)
    for library in LIBRARIES
    for scenario in ("reset_mid_stream", "no_terminal_event", "malformed_chunk")
]


@pytest.mark.parametrize(
    ("library", "scenario"), COMMIT_COMPLETE_CASES, ids=["-".join(c) for c in COMMIT_COMPLETE_CASES]
)
def test_with_a_policy_that_commits_complete_a_broken_stream_falls_back_to_a_whole_answer(
    library: str, scenario: str
) -> None:
    """The cases that end in ``StreamInterrupted`` at the first-chunk commit point (a stream cut,
    one that ends without its terminal event, a malformed chunk after content), through the real
    libraries, under a document whose failure policy commits streams complete: the caller gets
    the backup's whole answer and nothing of the broken one."""
    document = fake_document(CHAIN, preset="whole-answers", failure_policy=FailurePolicy(commit="complete"))
    clients = {
        "openai": lambda url: OpenAIChat(openai.OpenAI(base_url=f"{url}/v1", api_key="conformance")),
        "anthropic": lambda url: AnthropicMessages(anthropic.Anthropic(base_url=url, api_key="conformance")),
    }
    with FaultProvider() as vendor, FaultProvider() as backup:
        vendor.set(scenario, **PARAMS.get(scenario, {}))
        router = Router(
            document, transports={"vendor": clients[library](vendor.url), "backup": clients[library](backup.url)}
        )
        texts: list[str] = []
        with router.stream(request_for(library), idle_s=IDLE_S) as stream:
            texts.extend(type(chunk).__name__ for chunk in stream)
    assert stream.provider == "backup"
    first = stream.receipt.attempts[0]
    assert (first.provider, first.chunks) == ("vendor", 0)
    assert "commit complete" in stream.receipt.policy
    assert texts  # the backup's whole stream


# --- a primary down for a minute, then back -----------------------------------------------------


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_primary_down_for_a_minute_is_probed_once_a_probe_interval_and_served_from_soon_after_it_is_back(
    library: str,
) -> None:
    """Through the real libraries, at the breaker's defaults: the vendor answers 503 for 60 s
    (on the router's test clock), then answers; one request a second for 90 s. No request fails
    for the caller; while the vendor's breaker is open it gets at most one request a probe
    interval; it serves again within a probe interval (and the second between requests) of
    its recovery."""
    settings = BreakerSettings()
    clock = FakeClock(0.0)
    clients = {
        "openai": lambda url: OpenAIChat(openai.OpenAI(base_url=f"{url}/v1", api_key="conformance")),
        "anthropic": lambda url: AnthropicMessages(anthropic.Anthropic(base_url=url, api_key="conformance")),
    }
    with FaultProvider("unavailable") as vendor, FaultProvider() as backup:
        router = Router(
            CHAIN,
            transports={"vendor": clients[library](vendor.url), "backup": clients[library](backup.url)},
            breaker=settings,
            clock=clock,
        )
        reached: list[float] = []
        served: list[tuple[float, str]] = []
        for second in range(90):
            if second == 60:
                vendor.set("ok")
            before = len(vendor.requests)
            served.append((clock.now(), router.complete(request_for(library)).provider))
            reached += [clock.now()] * (len(vendor.requests) - before)
            clock.advance(1.0)
    opened_at = reached[settings.failure_threshold - 1]
    probes = [at for at in reached if opened_at < at < 60]
    assert probes and min(b - a for a, b in zip(probes, probes[1:], strict=False)) >= settings.probe_interval_s
    back_at = min(at for at, provider in served if provider == "vendor" and at >= 60)
    assert back_at - 60 <= settings.probe_interval_s + 1
