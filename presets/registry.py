"""The compiled-in provider registry: which providers and models this release can route to.

It is code, reviewed and deployed like code; nothing at runtime can add a provider. A
deployment may point the ``PROVIDER_REGISTRY`` setting at another module with a
``PROVIDERS`` mapping of the same shape.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from presets.providers import Price, Provider


def _usd(input_per_mtok: str, output_per_mtok: str) -> Price:
    # The example vendors' list prices, as a deployment's registry records its own contract's.
    return Price(Decimal(input_per_mtok), Decimal(output_per_mtok), "USD", date(2026, 12, 1), "example price list")


PROVIDERS: dict[str, Provider] = {
    "vendor_a": Provider(
        destination="vendor_a-us",
        models={
            "large": frozenset({"text", "images", "tools"}),
            "small": frozenset({"text", "tools"}),
        },
        prices={"large": _usd("2.50", "10.00"), "small": _usd("0.15", "0.60")},
    ),
    "vendor_b": Provider(
        destination="vendor_b-eu",
        models={
            "large": frozenset({"text", "images", "tools"}),
            "small": frozenset({"text"}),
        },
        prices={"large": _usd("8.00", "32.00"), "small": _usd("0.40", "1.60")},
    ),
    "self_hosted": Provider(
        destination="self-hosted",
        models={
            "8b": frozenset({"text"}),
            "vision-11b": frozenset({"text", "images"}),
        },
        # Run on the deployment's own machines: no price per token here (the pages say unknown).
    ),
}
