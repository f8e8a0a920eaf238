"""Provider registry types and the loader for the module named by ``PROVIDER_REGISTRY``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Provider:
    """A provider this release can call: where its data goes and its models' capabilities."""

    destination: str
    models: Mapping[str, frozenset[str]] = field(default_factory=dict)


@cache
def _load(module_name: str) -> dict[str, Provider]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImproperlyConfigured(f"PROVIDER_REGISTRY={module_name!r} cannot be imported: {exc}") from None
    providers = getattr(module, "PROVIDERS", None)
    if not isinstance(providers, dict) or not all(isinstance(p, Provider) for p in providers.values()):
        raise ImproperlyConfigured(f"PROVIDER_REGISTRY={module_name!r} must define PROVIDERS: dict[str, Provider]")
    return providers


def get_registry() -> dict[str, Provider]:
    """The providers of the configured registry module, keyed by name."""
    return _load(settings.PROVIDER_REGISTRY)
