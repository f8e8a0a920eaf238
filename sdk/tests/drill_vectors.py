"""Builds tests/vectors/drills.json, the failover-drill vectors every chainclient runs.

Every expectation here is worked out from the drill contract (which requests are drilled, what
a drilled attempt's receipt says, what the next step's attempt looks like, what the usage
report counts), never by running this SDK's router: the vectors check the router, not the
other way round. After changing a case: ``python sdk/tests/drill_vectors.py`` (from the
repository root) rewrites the file; ``test_drill_vectors.py`` runs it.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

LATENCY_BOUNDS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 30000)
A = {"provider": "vendor_a", "model": "large", "timeout_ms": 20000}
B = {"provider": "vendor_b", "model": "large", "timeout_ms": 20000}
C = {"provider": "self_hosted", "model": "8b", "timeout_ms": 10000}
STEPS = {"vendor_a": "vendor_a/large", "vendor_b": "vendor_b/large", "self_hosted": "self_hosted/8b"}
TIMEOUT_S = {"vendor_a": 20, "vendor_b": 20, "self_hosted": 10}
START, END, NOW = "2026-12-06T07:00:00.000Z", "2026-12-06T07:15:00.000Z", "2026-12-06T07:05:00.000Z"
START_S, END_S = 1796540400.0, 1796541300.0
TOKEN = "s3cret"
OK = [{"return": "hello"}]
INJECTED = {
    "server_error": ("failed", 500),
    "rate_limited": ("failed", 429),
    "timeout": ("timeout", None),
    "first_chunk_late": ("timeout", None),
    "stream_cut_before_first_chunk": ("failed", None),
    "invalid_answer": ("verify_failed", None),
}
DESCRIPTION = (
    "Failover drills, shared by every chainclient. digests: wire.drill_service_digest(id, sha256_hex(token)). "
    "documents: what a client makes of a document's drill (parsed, with its instants in epoch seconds; or ignored "
    "with the reason, the document still applied). cases: a client holding `document` (with `token`; null: a "
    "client without one) routes `requests` requests, complete() or stream() (`kind`), at the wall-clock instant "
    "`now`, on a test clock that the fakes (`takes_s`) and the drilled timeouts advance. `behaviours`: each "
    "provider's calls in order, the last one repeating (return, raise and takes_s as in client_contract.json; "
    "stream: the chunks of the stream opened). `router`: deadline_s (default 30), breaker (null: none; else the "
    "default breaker). `options`: each request's. expect: whether the client takes part, the 0-based requests "
    "drilled, the calls each provider received (a drilled attempt makes none), each request's ending and "
    "attempts (elapsed_s to the microsecond), the breakers' states after, and the usage report's drill section "
    "after the requests (null: none)."
)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digest(drill_id: int, token: str) -> str:
    return hashlib.sha256(b"chainclient-drill/1\n" + f"{drill_id}\n{sha256_hex(token)}".encode()).hexdigest()


def bucket(elapsed_s: float) -> int:
    return bisect.bisect_left([bound * 1000 for bound in LATENCY_BOUNDS_MS], int(elapsed_s * 1_000_000 + 0.5))


def drill(**changes: Any) -> dict[str, Any]:
    fields = {
        "id": 7,
        "hop": 1,
        "fault": "server_error",
        "share_bp": 2500,
        "services": [],
        "starts_at": START,
        "ends_at": END,
    }
    return {**fields, **changes}


def document(chain: list[dict[str, Any]], drill_: Any = None) -> dict[str, Any]:
    doc = {
        "name": "chat",
        "epoch": 0,
        "version": 12,
        "preset": "normal",
        "is_default": True,
        "chain": chain,
        "marking": {"degraded": False, "note": ""},
        "updated_by": "system:drill",
        "reason": "drill 7 started",
        "updated_at": "2026-12-06T07:00:00.000Z",
        "expires_at": None,
        "default": {"preset": "normal", "chain": chain, "marking": {"degraded": False, "note": ""}},
    }
    if drill_ is not None:
        doc["drill"] = drill_
    return doc


def drilled_requests(requests: int, share_bp: int) -> list[int]:
    """Every request reaches the hop in these cases: request n is drilled iff the count of
    drilled requests, share_bp / 10000 of them, goes up with it."""
    return [n for n in range(requests) if (n + 1) * share_bp // 10000 != n * share_bp // 10000]


def attempt(
    provider: str,
    outcome: str,
    status: int | None,
    dispatch: str,
    reason: str,
    *,
    elapsed_s: float = 0,
    timeout_s: float | None = None,
    drill_id: int | None = None,
    chunks: int | None = None,
) -> dict[str, Any]:
    line = {
        "step": STEPS[provider],
        "outcome": outcome,
        "status": status,
        "dispatch": dispatch,
        "drill": drill_id,
        "reason": reason,
        "elapsed_s": elapsed_s,
        "timeout_s": TIMEOUT_S[provider] if timeout_s is None else timeout_s,
    }
    if chunks is not None:
        line["chunks"] = chunks
    return line


def ok(provider: str, *, elapsed_s: float = 0, timeout_s: float | None = None, chunks: int | None = None) -> Any:
    return attempt(
        provider, "ok", None, "dispatched_known", "", elapsed_s=elapsed_s, timeout_s=timeout_s, chunks=chunks
    )


def failed(provider: str, status: int) -> dict[str, Any]:
    return attempt(provider, "failed", status, "dispatched_known", f"HTTP {status} is retryable")


def injected(provider: str, spec: dict[str, Any], *, timeout_s: float | None = None, chunks: int | None = None) -> Any:
    """The drilled attempt: no call; a timeout fault waits the attempt's whole timeout."""
    outcome, status = INJECTED[spec["fault"]]
    timeout = TIMEOUT_S[provider] if timeout_s is None else timeout_s
    waits = spec["fault"] in ("timeout", "first_chunk_late")
    reason = f"drill {spec['id']}: {spec['fault']} injected (no call was made)"
    return attempt(
        provider,
        outcome,
        status,
        "not_dispatched",
        reason,
        elapsed_s=timeout if waits else 0,
        timeout_s=timeout,
        drill_id=spec["id"],
        chunks=chunks,
    )


def served(provider: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"served_by": STEPS[provider], "error": None, "attempts": attempts}


def failing(error: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"served_by": None, "error": error, "attempts": attempts}


def empty_section(drill_id: int) -> dict[str, Any]:
    """A usage report's drill section with nothing counted yet."""
    return {
        "id": drill_id,
        "requests": 0,
        "drilled": 0,
        "ended_on": {},
        "failed": 0,
        "deadline": 0,
        "refusals": 0,
        "fallback_attempts": 0,
        "fallback_failures": 0,
        "latency_ms": {"drilled": [0] * 9, "other": [0] * 9},
    }


def report_section(spec: dict[str, Any], chain: list[dict[str, Any]], results: list[dict[str, Any]]) -> Any:
    """The usage report's drill section after ``results`` (every one in the drill's window)."""
    fallback = STEPS[chain[spec["hop"]]["provider"]]
    numbers = {STEPS[step["provider"]]: str(number) for number, step in enumerate(chain, 1)}
    section = empty_section(spec["id"])
    for result in results:
        section["requests"] += 1
        elapsed = sum(line["elapsed_s"] for line in result["attempts"])
        if all(line["drill"] is None for line in result["attempts"]):
            section["latency_ms"]["other"][bucket(elapsed)] += 1
            continue
        section["drilled"] += 1
        section["latency_ms"]["drilled"][bucket(elapsed)] += 1
        if result["error"] is None:
            number = numbers[result["served_by"]]
            section["ended_on"][number] = section["ended_on"].get(number, 0) + 1
        else:
            section["failed"] += 1
            section["deadline"] += result["error"] == "DeadlineExceeded"
            section["refusals"] += result["error"] == "NoEligibleRoute"
        tried = [line for line in result["attempts"] if line["step"] == fallback]
        section["fallback_attempts"] += len(tried)
        section["fallback_failures"] += sum(1 for line in tried if line["outcome"] != "ok")
    section["ended_on"] = dict(sorted(section["ended_on"].items()))
    return section


def case(
    name: str,
    promise: str,
    *,
    chain: list[dict[str, Any]],
    spec: dict[str, Any],
    requests: int,
    behaviours: dict[str, list[dict[str, Any]]],
    outcome: Callable[[bool], dict[str, Any]],
    token: str | None = TOKEN,
    now: str = NOW,
    kind: str = "complete",
    router: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    takes_part: bool = True,
    in_window: bool = True,
    breakers_after: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A routing case; ``outcome(drilled)`` is a request's ending, drilled or not."""
    drilled = drilled_requests(requests, spec["share_bp"]) if takes_part and in_window else []
    results = [outcome(index in drilled) for index in range(requests)]
    calls: dict[str, int] = {}
    for result in results:
        for line in result["attempts"]:
            if line["drill"] is None:
                provider = line["step"].split("/")[0]
                calls[provider] = calls.get(provider, 0) + 1
    expect: dict[str, Any] = {
        "takes_part": takes_part,
        "drilled": drilled,
        "calls": dict(sorted(calls.items())),
        "requests": results,
        "report": report_section(spec, chain, results) if takes_part and in_window else None,
    }
    if breakers_after is not None:
        expect["breakers_after"] = breakers_after
    return {
        "name": name,
        "promise": promise,
        "kind": kind,
        "document": document(chain, spec),
        "token": token,
        "now": now,
        "router": router or {},
        "options": options or {},
        "behaviours": behaviours,
        "requests": requests,
        "expect": expect,
    }


def cases() -> list[dict[str, Any]]:
    both_ok = {"vendor_a": OK, "vendor_b": OK}
    made = []

    spec = drill()
    made.append(
        case(
            "server-error-on-hop-1-at-25-percent",
            "a share exact to one request; no call at the drilled hop; the fallback serves; the breaker never hears",
            chain=[A, B],
            spec=spec,
            requests=20,
            behaviours=both_ok,
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s), ok("vendor_b")])
                if drilled
                else served("vendor_a", [ok("vendor_a")])
            ),
            breakers_after={"vendor_a": "closed", "vendor_b": "closed"},
        )
    )

    spec = drill(id=8, hop=2, fault="rate_limited", share_bp=1000)
    made.append(
        case(
            "rate-limited-on-hop-2-of-3-at-10-percent",
            "the drill applies at its hop, after the real attempts before it; the step after the hop serves",
            chain=[A, B, C],
            spec=spec,
            requests=20,
            router={"breaker": None},
            behaviours={"vendor_a": [{"raise": "ProviderError", "status": 503}], "vendor_b": OK, "self_hosted": OK},
            outcome=lambda drilled, s=spec: (
                served("self_hosted", [failed("vendor_a", 503), injected("vendor_b", s), ok("self_hosted")])
                if drilled
                else served("vendor_b", [failed("vendor_a", 503), ok("vendor_b")])
            ),
        )
    )

    spec = drill(fault="timeout")
    made.append(
        case(
            "timeout-waits-the-attempts-timeout",
            "a timeout fault costs what a real one does: the attempt's timeout passes first",
            chain=[A, B],
            spec=spec,
            requests=8,
            behaviours={
                "vendor_a": [{"return": "hello", "takes_s": 0.2}],
                "vendor_b": [{"return": "hi", "takes_s": 0.3}],
            },
            # The fallback's timeout is what the 30 s budget has left after the 20 s waited.
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s), ok("vendor_b", elapsed_s=0.3, timeout_s=10)])
                if drilled
                else served("vendor_a", [ok("vendor_a", elapsed_s=0.2)])
            ),
        )
    )

    spec = drill(fault="invalid_answer")
    made.append(
        case(
            "invalid-answer-moves-on-even-with-side-effects",
            "a drilled attempt always moves on: nothing was dispatched",
            chain=[A, B],
            spec=spec,
            requests=4,
            options={"side_effects": True},
            behaviours=both_ok,
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s), ok("vendor_b")])
                if drilled
                else served("vendor_a", [ok("vendor_a")])
            ),
        )
    )

    spec = drill()
    made.append(
        case(
            "a-failing-fallback-fails-the-drilled-request",
            "the fallback is real: when it fails, the drilled request fails, and the report says so",
            chain=[A, B],
            spec=spec,
            requests=4,
            router={"breaker": None},
            behaviours={"vendor_a": OK, "vendor_b": [{"raise": "ProviderError", "status": 503}]},
            outcome=lambda drilled, s=spec: (
                failing("AllProvidersFailed", [injected("vendor_a", s), failed("vendor_b", 503)])
                if drilled
                else served("vendor_a", [ok("vendor_a")])
            ),
        )
    )

    spec = drill(fault="timeout")
    made.append(
        case(
            "a-timeout-cut-by-the-budget-misses-the-deadline",
            "the wait is min(step timeout, budget left); a drilled request out of time counts as a deadline",
            chain=[A, B],
            spec=spec,
            requests=4,
            router={"deadline_s": 5},
            behaviours=both_ok,
            outcome=lambda drilled, s=spec: (
                failing("DeadlineExceeded", [injected("vendor_a", s, timeout_s=5)])
                if drilled
                else served("vendor_a", [ok("vendor_a", timeout_s=5)])
            ),
        )
    )

    spec = drill(services=["0" * 64, digest(7, TOKEN)])
    made.append(
        case(
            "a-service-named-by-its-digest-takes-part",
            "services: the digest of the drill's id and the token's SHA-256",
            chain=[A, B],
            spec=spec,
            requests=4,
            behaviours=both_ok,
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s), ok("vendor_b")])
                if drilled
                else served("vendor_a", [ok("vendor_a")])
            ),
        )
    )

    not_drilled: Callable[[bool], dict[str, Any]] = lambda drilled: served("vendor_a", [ok("vendor_a")])  # noqa: E731
    made.append(
        case(
            "a-service-not-named-does-not-take-part",
            "a client not named routes as without a drill, and reports none",
            chain=[A, B],
            spec=drill(services=[digest(7, "another-token")]),
            requests=4,
            behaviours=both_ok,
            outcome=not_drilled,
            takes_part=False,
        )
    )
    made.append(
        case(
            "a-client-without-a-token-takes-part-only-in-a-drill-of-every-service",
            "no token: a drill naming services is not this client's",
            chain=[A, B],
            spec=drill(services=[digest(7, TOKEN)]),
            requests=4,
            token=None,
            behaviours=both_ok,
            outcome=not_drilled,
            takes_part=False,
        )
    )
    spec = drill()
    made.append(
        case(
            "a-client-without-a-token-takes-part-in-a-drill-of-every-service",
            "no token, no services named: it takes part",
            chain=[A, B],
            spec=spec,
            requests=4,
            token=None,
            behaviours=both_ok,
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s), ok("vendor_b")])
                if drilled
                else served("vendor_a", [ok("vendor_a")])
            ),
        )
    )
    for name, now in (
        ("before-the-window-nothing-is-drilled", "2026-12-06T06:59:59.999Z"),
        ("from-ends-at-nothing-is-drilled-even-without-a-control-plane", END),
    ):
        made.append(
            case(
                name,
                "a client injects only while starts_at <= now < ends_at (wall clock), on its own",
                chain=[A, B],
                spec=drill(),
                requests=4,
                now=now,
                behaviours=both_ok,
                outcome=not_drilled,
                in_window=False,
            )
        )

    stream = [{"stream": ["hel", "lo"]}]
    spec = drill(fault="first_chunk_late")
    made.append(
        case(
            "stream-first-chunk-late-opens-no-stream",
            "stream(): a drilled attempt never opens a stream; first_chunk_late waits the first-chunk bound",
            chain=[A, B],
            spec=spec,
            requests=4,
            kind="stream",
            options={"first_chunk_s": 2},
            behaviours={"vendor_a": stream, "vendor_b": stream},
            outcome=lambda drilled, s=spec: (
                served(
                    "vendor_b", [injected("vendor_a", s, timeout_s=2, chunks=0), ok("vendor_b", timeout_s=2, chunks=2)]
                )
                if drilled
                else served("vendor_a", [ok("vendor_a", timeout_s=2, chunks=2)])
            ),
        )
    )
    spec = drill(fault="stream_cut_before_first_chunk")
    made.append(
        case(
            "stream-cut-before-first-chunk",
            "stream(): the cut is injected without a call; the fallback streams",
            chain=[A, B],
            spec=spec,
            requests=4,
            kind="stream",
            behaviours={"vendor_a": stream, "vendor_b": stream},
            outcome=lambda drilled, s=spec: (
                served("vendor_b", [injected("vendor_a", s, chunks=0), ok("vendor_b", chunks=2)])
                if drilled
                else served("vendor_a", [ok("vendor_a", chunks=2)])
            ),
        )
    )
    return made


def documents() -> list[dict[str, Any]]:
    def parsing(name: str, drill_value: Any, parsed: Any, ignored: str | None) -> dict[str, Any]:
        doc = document([A, B])
        doc["drill"] = drill_value
        return {"name": name, "document": doc, "expect": {"drill": parsed, "ignored": ignored}}

    hop = "drill.hop must be a step of the chain but its last (1..1), got"
    share = "drill.share_bp must be an integer within 10..2500"
    return [
        parsing("a-drill-is-parsed", drill(), {**drill(), "starts_at_s": START_S, "ends_at_s": END_S}, None),
        parsing(
            "an-unknown-fault-is-ignored",
            drill(fault="fire_alarm"),
            None,
            "drill.fault 'fire_alarm' is not one this client knows",
        ),
        parsing("the-last-step-is-never-drilled", drill(hop=2), None, f"{hop} 2"),
        parsing("hop-zero-is-ignored", drill(hop=0), None, f"{hop} 0"),
        parsing("a-share-above-25-percent-is-ignored", drill(share_bp=2501), None, share),
        parsing("a-share-below-0.1-percent-is-ignored", drill(share_bp=9), None, share),
        parsing("an-id-that-is-not-positive-is-ignored", drill(id=0), None, "drill.id must be a positive integer"),
        parsing(
            "services-not-a-list-are-ignored", drill(services="all"), None, "drill.services must be a list of strings"
        ),
        parsing(
            "an-instant-that-is-not-rfc-3339-is-ignored",
            drill(ends_at="tomorrow"),
            None,
            "drill.ends_at: 'tomorrow' is not an RFC 3339 time with a time zone",
        ),
        parsing(
            "an-end-before-the-start-is-ignored",
            drill(starts_at=END, ends_at=START),
            None,
            "drill.ends_at must be after drill.starts_at",
        ),
        parsing("a-drill-that-is-not-an-object-is-ignored", [1, 2], None, "'drill' must be an object, got list"),
        parsing("a-null-drill-is-no-drill", None, None, None),
    ]


def build() -> dict[str, Any]:
    tokens = ((7, TOKEN), (1, "tok"), (2147483647, "a-much-longer-service-token-0123456789"))
    return {
        "description": DESCRIPTION,
        "registry": {
            "vendor_a": {"destination": "vendor_a-us", "models": {"large": ["text", "images"]}},
            "vendor_b": {"destination": "vendor_b-eu", "models": {"large": ["text"]}},
            "self_hosted": {"destination": "self-hosted", "models": {"8b": ["text"]}},
        },
        "digests": [
            {"id": drill_id, "token": token, "token_sha256": sha256_hex(token), "digest": digest(drill_id, token)}
            for drill_id, token in tokens
        ],
        "documents": documents(),
        "cases": cases(),
    }


if __name__ == "__main__":
    path = Path(__file__).resolve().parent / "vectors" / "drills.json"
    path.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")
