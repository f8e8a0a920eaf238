"""Which environment an API request reads or changes (``presets.environments``).

The one its path names (``/env/<env>/api/v1/...``: ``controlplane.environment_paths``), else
its token's, else the default. A token reads and reports only for what it is bound to: its
environment, and its chains when it names some; anything else is refused (403) in plain words,
by the same rule as the read front's (``environments.token_refusal``).
"""

from __future__ import annotations

from typing import Any

from http_api.authentication import TokenPrincipal
from presets import environments, services
from presets.exceptions import Forbidden
from presets.models import Selection


def environment_of(request: Any, chain: str | None = None) -> str:
    """The request's environment, once its credential may use ``chain`` of it (None: the
    environment as a whole); raises ``Forbidden`` else."""
    named = getattr(request, "environment_named", "")
    user = request.user
    if not isinstance(user, TokenPrincipal):
        return named or environments.default()
    token = user.token
    environment = named or token.environment
    refusal = environments.token_refusal(token.environment, token.chains, environment, chain)
    if refusal is not None:
        details = {"environment": environment, **({"chain": chain} if chain is not None else {})}
        raise Forbidden(refusal, details=details)
    return environment


def readable_selections(request: Any) -> list[Selection]:
    """Every live selection of the request's environment that its credential may read (a
    token bound to some chains: those), expired pins reverted first: the chain list, the
    fleet and OFREP's bulk evaluation."""
    selections = services.revert_expired_and_read_all(environment=environment_of(request))
    user = request.user
    if isinstance(user, TokenPrincipal) and user.token.chains:
        bound = frozenset(user.token.chains)
        return [s for s in selections if s.chain.name in bound]
    return selections


def check_reads(request: Any, environment: str, chain: str) -> None:
    """Refuse (``Forbidden``) a token's request about something of ``chain`` in ``environment``
    found by its own id (a drill), when the token may not read that chain."""
    user = request.user
    if isinstance(user, TokenPrincipal):
        refusal = environments.token_refusal(user.token.environment, user.token.chains, environment, chain)
        if refusal is not None:
            raise Forbidden(refusal, details={"environment": environment, "chain": chain})


def check_acts_in(request: Any, environment: str) -> None:
    """Refuse (``Forbidden``) a token's change to ``environment`` when it is another's: a
    promotion to production needs a token of production (or a person signed in)."""
    user = request.user
    if isinstance(user, TokenPrincipal) and user.token.environment != environment:
        raise Forbidden(
            environments.token_refusal(user.token.environment, None, environment, None) or "",
            details={"environment": environment},
        )
