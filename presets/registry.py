"""The compiled-in provider registry: which providers and models this release can route to.

It is code, reviewed and deployed like code; nothing at runtime can add a provider. A
deployment may point the ``PROVIDER_REGISTRY`` setting at another module with a
``PROVIDERS`` mapping of the same shape.
"""

from __future__ import annotations

from presets.providers import Provider

PROVIDERS: dict[str, Provider] = {
    "vendor_a": Provider(
        destination="vendor_a-us",
        models={
            "large": frozenset({"text", "images", "tools"}),
            "small": frozenset({"text", "tools"}),
        },
    ),
    "vendor_b": Provider(
        destination="vendor_b-eu",
        models={
            "large": frozenset({"text", "images", "tools"}),
            "small": frozenset({"text"}),
        },
    ),
    "self_hosted": Provider(
        destination="self-hosted",
        models={
            "8b": frozenset({"text"}),
            "vision-11b": frozenset({"text", "images"}),
        },
    ),
}
