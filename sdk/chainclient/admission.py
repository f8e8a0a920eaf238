"""Which steps of the chain a request may be sent to, judged by its contract.

A ``Contract`` says what the serving step must offer: capabilities of its model, and where
the request's data may go. Whether a step meets a contract depends only on the pair (the
registry is compiled in, the transports fixed), so the answer is cached off the request's
hot path. The router adds the checks that change per request: ``allow_fallback`` and the
provider's circuit breaker.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cached_property

from chainclient.types import Registry, Step

# A request stream with ever-new contracts must not grow the cache without bound.
_MAX_CACHED = 4096


@dataclass(frozen=True)
class Contract:
    """What a request needs from whichever step serves it.

    ``requires``: capabilities the step's model must all have (e.g. ``{"images"}``).
    ``destinations``: where the request's data may go; None means anywhere.
    ``name``: what the service calls this contract (e.g. ``"eu-data"``), shown in receipts.
    """

    requires: AbstractSet[str] = frozenset()
    destinations: AbstractSet[str] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        # Frozen sets make the contract hashable (admission results are cached per contract)
        # and stop a caller's later edits to their set from changing a live contract.
        object.__setattr__(self, "requires", frozenset(self.requires))
        if self.destinations is not None:
            object.__setattr__(self, "destinations", frozenset(self.destinations))

    @cached_property
    def identity(self) -> str:
        """The contract as every receipt names it: its name, then its terms, e.g.
        ``'eu-data' (requires [text]; destinations [vendor_b-eu])``; ``none`` for no terms."""
        terms = [f"requires [{', '.join(sorted(self.requires))}]"] if self.requires else []
        if self.destinations is not None:
            terms.append(f"destinations [{', '.join(sorted(self.destinations))}]")
        described = "; ".join(terms) or "no terms"
        if self.name:
            return f"{self.name!r} ({described})"
        return f"({described})" if terms else "none"


NO_CONTRACT = Contract()


class ContractCheck:
    """Why a step cannot serve a contract (None when it can), cached per (step, contract).

    The cache is a plain dict read without a lock: a race only computes an answer twice.
    """

    def __init__(self, *, transports: Collection[str], registry: Registry | None) -> None:
        self._transports = frozenset(transports)
        self._registry = registry
        self._cache: dict[tuple[Step, Contract], str | None] = {}

    def refusal(self, step: Step, contract: Contract) -> str | None:
        key = (step, contract)
        try:
            return self._cache[key]
        except KeyError:  # one lookup on the hot path, and no race with a clear() elsewhere
            pass
        why = self._judge(step, contract)
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[key] = why
        return why

    def _judge(self, step: Step, contract: Contract) -> str | None:
        if step.provider not in self._transports:
            return f"no transport for provider {step.provider!r}"
        registry = self._registry
        if registry is None:
            if contract.requires or contract.destinations is not None:
                return "no registry to check the request's contract against"
            return None
        provider = registry.get(step.provider)
        if provider is None:
            return f"provider {step.provider!r} is not in the registry"
        if step.model not in provider.models:
            return f"model {step.model!r} is not in the registry for {step.provider!r}"
        missing = contract.requires - provider.capabilities(step.model)
        if missing:
            return f"model lacks required capabilities {sorted(missing)}"
        if contract.destinations is not None and provider.destination not in contract.destinations:
            return f"destination {provider.destination!r} is not allowed (allowed: {sorted(contract.destinations)})"
        return None


__all__ = ["NO_CONTRACT", "Contract", "ContractCheck"]
