"""Usage reports with a ``health`` section, as chainclient sends them, for tests that need a
fleet's view of its providers without running the fleet."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.utils import timezone

from presets.documents import format_time
from presets.models import Selection
from presets.wire import LATENCY_BOUNDS_MS

BOUNDS = list(LATENCY_BOUNDS_MS)


def latency(**buckets: int) -> list[int]:
    """A histogram with ``b3=5`` meaning 5 served attempts in bucket 3 (500..1000 ms)."""
    counts = [0] * (len(BOUNDS) + 1)
    for name, count in buckets.items():
        counts[int(name[1:])] = count
    return counts


def step(
    provider: str,
    model: str,
    outcomes: dict[str, int],
    histogram: list[int] | None = None,
    *,
    first_chunk: list[int] | None = None,
    tokens: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """One step of a report; ``first_chunk``: its streamed attempts' time-to-first-chunk
    histogram, left out (as an SDK does for a step that never streamed) when None; ``tokens``:
    (input tokens, output tokens, served attempts that said both), left out when None."""
    reported = {"provider": provider, "model": model, "outcomes": outcomes, "latency_ms": histogram or latency()}
    if first_chunk is not None:
        reported["first_chunk_ms"] = first_chunk
    if tokens is not None:
        reported["input_tokens"], reported["output_tokens"], reported["served_with_tokens"] = tokens
    return reported


def poll(client: Client, instance: str, chain: str = "chat") -> None:
    """Read ``chain`` as the instance ``checkout/{instance}`` on its live version, as the SDK
    does before it reports: fleet status then knows the instance, so its health counts."""
    version = Selection.objects.get(chain__name=chain).version
    headers = {"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": str(version)}
    response = client.get(f"/api/v1/chains/{chain}", headers=headers)
    assert response.status_code == 200, response.content


def report(  # type: ignore[no-untyped-def]
    client: Client,
    instance: str,
    steps: list[dict[str, Any]],
    chain: str = "chat",
    *,
    polled: bool = True,
    **health: Any,
):
    """POST one instance's usage report; as the SDK does, it counts the requests each
    provider served (``providers``) beside the health of every step. ``polled``: the instance
    read the chain first (``poll``), as every SDK instance does."""
    if polled:
        poll(client, instance, chain)
    served: dict[str, int] = {}
    for reported in steps:
        served[reported["provider"]] = served.get(reported["provider"], 0) + reported["outcomes"].get("served", 0)
    now = format_time(timezone.now())
    body = {
        "client": f"checkout/{instance}",
        "providers": {name: {"requests": count, "last_served_at": now} for name, count in served.items() if count},
        "health": {"latency_bounds_ms": BOUNDS, "steps": steps, **health},
    }
    return client.post(f"/api/v1/chains/{chain}/usage", body, content_type="application/json")


def vendor_a_failing(reader: Client, instances: int = 3) -> None:
    """Half of vendor_a's attempts answer 503 on every instance (``checkout/pod-0``, ...);
    vendor_b serves the rest."""
    for n in range(instances):
        response = report(
            reader,
            f"pod-{n}",
            [
                step("vendor_a", "large", {"served": 50, "server_error": 50}, latency(b4=50)),
                step("vendor_b", "large", {"served": 50}, latency(b3=48, b5=2)),
            ],
        )
        assert response.status_code == 202, response.content


def vendor_a_healthy(reader: Client, instances: int = 3) -> None:
    """vendor_a/large, the example's head, serves all of its 50 attempts on every instance
    (``checkout/pod-0``, ...): evidence enough for a guard to judge a pin that replaces it by."""
    for n in range(instances):
        response = report(reader, f"pod-{n}", [step("vendor_a", "large", {"served": 50}, latency(b3=50))])
        assert response.status_code == 202, response.content


def by_step(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A chain's health or spend document's steps by ``provider/model``."""
    return {f"{s['provider']}/{s['model']}": s for s in document["steps"]}
