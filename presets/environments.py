"""Environments (``ENVIRONMENTS``, ordered: e.g. ``staging, production``): each has chains of its
own, with their selections, pins, plans, guards, drills, history, alerts and fleet.

The last environment is the default: a token or a page that names none means it (today's
URLs, tokens and relays, and every row a deployment had before environments), and it is the one
marked on the pages as production. A presets file's sync reaches the first environment; each
next one gets a presets revision by a promotion (``presets.promotions``).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from django.conf import settings

from presets.documents import ENVIRONMENT_PATH, chain_key, split_chain_key
from presets.exceptions import InvalidInput, NotFound

NAME_MAX = 30
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,29}")


def label(environment: str, name: str) -> str:
    """How a chain is named where chains of every environment are listed together (alerts,
    /metrics, fleet status, the read front's documents): its name in the default environment,
    ``staging/chat`` in another (``documents.chain_key``)."""
    return name if environment == default() else chain_key(environment, name)


def path_in(environment: str, path: str) -> str:
    """``path`` (absolute, from the site's root) in ``environment``'s pages: unchanged in the
    default one (empty: the default), under ``/env/<environment>`` in another. Links made
    away from a request (notifications, Slack, deep links) open the chain's own environment."""
    if not environment or environment == default():
        return path
    return f"{ENVIRONMENT_PATH}{environment}{path}"


def from_label(label: str) -> tuple[str, str]:
    """``label``'s environment and chain name."""
    environment, name = split_chain_key(label)
    return environment or default(), name


def names() -> list[str]:
    """Every environment, lowest first (promotions go up this list)."""
    return list(settings.ENVIRONMENTS)


def default() -> str:
    """The environment meant when none is named: the last one (production)."""
    return settings.ENVIRONMENTS[-1]


def first() -> str:
    """The environment a presets file's sync reaches."""
    return settings.ENVIRONMENTS[0]


def is_production(name: str) -> bool:
    """Whether the pages mark ``name`` as production (the default environment)."""
    return name == default()


def several() -> bool:
    """Whether there is more than one environment (else the pages show no switcher)."""
    return len(settings.ENVIRONMENTS) > 1


def unknown(name: str) -> NotFound:
    """The refusal of a name that is no environment (a path's, an option's), in plain words."""
    return NotFound(
        f"unknown environment {name!r}: this control plane has {', '.join(settings.ENVIRONMENTS)}",
        details={"environment": name, "environments": names()},
    )


def resolve(name: str | None) -> str:
    """``name`` when it is an environment, the default when empty; refused in plain words else."""
    if not name:
        return default()
    if name not in settings.ENVIRONMENTS:
        raise unknown(name)
    return name


def before(name: str) -> str | None:
    """The environment ``name`` is promoted from; None for the first."""
    order = names()
    at = order.index(name)
    return order[at - 1] if at > 0 else None


def check(value: object, field: str = "environment") -> str:
    """An environment named in input (a form, a command's option, an API body), or refused."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, f"{field} must be one of {', '.join(names())}")
    return resolve(value)


def configured(raw: list[str]) -> list[str]:
    """``ENVIRONMENTS`` as set, checked: slugs of lower-case letters, digits and dashes, at most
    ``NAME_MAX`` characters, each once, at least one (raises ValueError in plain words)."""
    if not raw:
        raise ValueError("ENVIRONMENTS is empty: name at least one, e.g. ENVIRONMENTS=staging,production")
    for name in raw:
        if not NAME.fullmatch(name):
            raise ValueError(
                f"ENVIRONMENTS: {name!r} is not an environment name: use lower-case letters, digits and dashes, "
                f"at most {NAME_MAX} characters (e.g. staging)"
            )
    repeated = sorted({name for name in raw if raw.count(name) > 1})
    if repeated:
        raise ValueError(f"ENVIRONMENTS names {', '.join(repeated)} more than once: each environment once, in order")
    return list(raw)


def token_refusal(
    token_environment: str, token_chains: Collection[str] | None, environment: str, chain: str | None
) -> str | None:
    """Why a token bound to ``token_environment`` (and, when not empty, to ``token_chains``) may
    not read or report for ``chain`` of ``environment`` (None: the chain list), in plain words;
    None when it may. The one rule of every surface: the API, long polls, OFREP, relays, usage
    reports and published copies."""
    if token_environment != environment:
        return (
            f"this token is for the {token_environment} environment, not {environment}: "
            f"use a token made for {environment} (manage.py create_token NAME --environment {environment})"
        )
    if chain is not None and token_chains and chain not in token_chains:
        return (
            f"this token reads only {', '.join(sorted(token_chains))} in {environment}, not {chain}: "
            f"use a token bound to {chain} (manage.py create_token NAME --environment {environment} --chains {chain})"
        )
    return None
