"""Provider registry types and the loader for the module named by ``PROVIDER_REGISTRY``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Price:
    """What a model costs per million tokens, reviewed as code: the rate, its currency, and
    where and when it was read (a price goes stale; the pages say its date)."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    currency: str
    as_of: date
    source: str

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ImproperlyConfigured(
                    f"Price.{name} must be a Decimal of at least 0 (Decimal('2.50')), not {value!r}"
                )
        if not (isinstance(self.currency, str) and len(self.currency) == 3 and self.currency.isupper()):
            raise ImproperlyConfigured(
                f"Price.currency must be a three-letter ISO 4217 code (USD), not {self.currency!r}"
            )
        if not isinstance(self.as_of, date):
            raise ImproperlyConfigured(f"Price.as_of must be a date (the day the price was read), not {self.as_of!r}")
        if not (isinstance(self.source, str) and self.source.strip()):
            raise ImproperlyConfigured("Price.source must say where the price was read (its page's URL)")

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        """What these tokens cost, in ``currency``."""
        return (input_tokens * float(self.input_per_mtok) + output_tokens * float(self.output_per_mtok)) / 1_000_000

    def as_dict(self) -> dict[str, str]:
        return {
            "input_per_mtok": str(self.input_per_mtok),
            "output_per_mtok": str(self.output_per_mtok),
            "currency": self.currency,
            "as_of": self.as_of.isoformat(),
            "source": self.source,
        }


@dataclass(frozen=True)
class Provider:
    """A provider this release can call: where its data goes, its models' capabilities and
    (where known) their prices."""

    destination: str
    models: Mapping[str, frozenset[str]] = field(default_factory=dict)
    prices: Mapping[str, Price] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.prices) - set(self.models))
        if unknown:
            raise ImproperlyConfigured(f"prices of models the provider does not have: {', '.join(unknown)}")


@cache
def _load(module_name: str) -> dict[str, Provider]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImproperlyConfigured(f"PROVIDER_REGISTRY={module_name!r} cannot be imported: {exc}") from None
    providers = getattr(module, "PROVIDERS", None)
    if not isinstance(providers, dict) or not all(isinstance(p, Provider) for p in providers.values()):
        raise ImproperlyConfigured(f"PROVIDER_REGISTRY={module_name!r} must define PROVIDERS: dict[str, Provider]")
    currencies = {price.currency for p in providers.values() for price in p.prices.values()}
    if len(currencies) > 1:
        # A chain's spend is one sum: prices in two currencies would need a rate nobody reviewed.
        raise ImproperlyConfigured(
            f"PROVIDER_REGISTRY={module_name!r}: every price must be in one currency, "
            f"found {', '.join(sorted(currencies))}"
        )
    return providers


def get_registry() -> dict[str, Provider]:
    """The providers of the configured registry module, keyed by name."""
    return _load(settings.PROVIDER_REGISTRY)


def price_of(provider: str, model: str) -> Price | None:
    """The registry's price of ``provider``'s ``model``; None when it has none."""
    known = get_registry().get(provider)
    return known.prices.get(model) if known is not None else None
