"""What every page's layout needs beyond the page itself: the open-alert count in the top nav,
the environment the page is in and the links to the others, and the limits a form's boxes hold
to (the services' own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import get_script_prefix, reverse

from audit.alerts import open_alert_count
from pages.layout import environment_of, in_environment
from presets import environments, selectors
from presets.services import REASON_MAX

# The pages that are the same page in every environment (the switcher keeps them), and those
# of one chain that are, where the chain is too; any other of a chain's pages (a change, a
# review) is its chain page there, and a page of no chain or of one row (a drill) the dashboard.
SAME_IN_EVERY_ENVIRONMENT = {"dashboard", "history", "alerts", "access"}
SAME_WHERE_THE_CHAIN_IS = {"chain", "chain-history"}


def open_alerts(request: HttpRequest) -> dict[str, Callable[[], int]]:
    """``open_alert_count``, counted (one query) only when a template reads it: base.html
    does once, for a signed-in person; the sign-in page and the outage page never do. With
    several environments, the page's environment's, as its alerts page lists them."""
    if not environments.several():
        return {"open_alert_count": open_alert_count}
    environment = environment_of(request)
    return {"open_alert_count": lambda: open_alert_count(environment=environment)}


def environment(request: HttpRequest) -> dict[str, Any]:
    """``environment`` (the page's), ``environments`` (every one, lowest first),
    ``is_production``, ``several_environments`` and ``environment_links`` (the switcher's,
    read only when a template shows them): the layout marks the environment and links to the
    others only when there are several, so one environment looks as it always did."""
    current = environment_of(request)
    return {
        "environment": current,
        "environments": environments.names(),
        "is_production": environments.is_production(current),
        "several_environments": environments.several(),
        "environment_links": lambda: environment_links(request, current),
    }


def limits(request: HttpRequest) -> dict[str, int]:
    """``reason_max``: the longest reason the services take (``maxlength`` of a reason box a
    template writes itself; the forms' boxes take it from their field)."""
    return {"reason_max": REASON_MAX}


@dataclass(frozen=True)
class EnvironmentLink:
    """One environment in the switcher: where it leads and whether the page is in it."""

    name: str
    url: str
    current: bool


def environment_links(request: HttpRequest, current: str) -> list[EnvironmentLink]:
    """A link per environment to this page there (``SAME_IN_EVERY_ENVIRONMENT``, and a chain's
    page or history where that environment has the chain), else to the chain's page there (from
    a change or a review: a review is never carried to another environment), else to that
    environment's dashboard."""
    match = getattr(request, "resolver_match", None)
    page = match.url_name if match is not None else None
    chain = match.kwargs.get("name") if match is not None else None
    having = selectors.environments_having(chain) if chain and page not in SAME_IN_EVERY_ENVIRONMENT else set()
    links = []
    for name in environments.names():
        if page in SAME_IN_EVERY_ENVIRONMENT:
            path = request.path_info
        elif chain and name in having:
            path = request.path_info if page in SAME_WHERE_THE_CHAIN_IS else _from_root(reverse("chain", args=[chain]))
        else:
            path = "/"
        links.append(EnvironmentLink(name, in_environment(request, name, path), name == current))
    return links


def _from_root(url: str) -> str:
    """A path ``reverse`` gave in the request's environment, from the site's root without it."""
    return "/" + url.removeprefix(get_script_prefix())
