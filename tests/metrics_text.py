"""Reading a Prometheus exposition in tests."""

from __future__ import annotations


def value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value in an exposition (for tests and scripts); None when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted((labels or {}).items()))  # as exposed
    key = f"{name}{{{wanted}}}" if wanted else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, number = line.rpartition(" ")
        if sample == key:
            return float(number)
    return None
