"""Reading a Prometheus exposition in tests."""

from __future__ import annotations


def value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value in an exposition (for tests and scripts); None when absent.
    ``labels`` must be the sample's labels exactly, in any order."""
    wanted = labels or {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, number = line.rpartition(" ")
        sample_name, _, rest = sample.partition("{")
        if sample_name == name and _labels(rest.removesuffix("}")) == wanted:
            return float(number)
    return None


def _labels(text: str) -> dict[str, str]:
    """``a="1",b="2"`` as a dict (the values the control plane exposes hold no quotes)."""
    pairs = (item.split("=", 1) for item in text.split('",') if item)
    return {key: raw.strip('"') for key, raw in pairs}
