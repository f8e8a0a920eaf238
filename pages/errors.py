"""Error pages Django asks the project for: the failed CSRF check (``CSRF_FAILURE_VIEW``).

A CSRF failure on these pages is nearly always a form that outlived its token: the page was
opened before its person signed in again (signing in rotates the token), or their session
ended. Django's own page is a bare technical 403; this one says that nothing was changed and
links back to where the change was started.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import REASON_NO_CSRF_COOKIE
from django.shortcuts import render
from django.urls import Resolver404, get_script_prefix, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme

# The URLs a change is posted to, each started from its chain's page.
CHANGES = {"chain-select", "chain-revert", "chain-extend", "chain-restore"}


@dataclass(frozen=True)
class WayBack:
    """Where the failure page links to, and the words for it."""

    url: str
    label: str


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """The 403 for a failed CSRF check, in the site's layout: nothing was changed, why, and
    a link back to the page the form came from."""
    context = {
        "back": way_back(request),
        "reason": reason,
        "no_cookie": reason == REASON_NO_CSRF_COOKIE,
    }
    return render(request, "403_csrf.html", context, status=403)


def way_back(request: HttpRequest) -> WayBack:
    """The page the failed form was on: the referring page if it is one of ours that can be
    shown again; for a change's URL its chain's page; else the dashboard."""
    for candidate in (_same_site_referer(request), request.path):
        if candidate and (found := _page_for(candidate)) is not None:
            return found
    return WayBack(reverse("dashboard"), "the dashboard")


def _same_site_referer(request: HttpRequest) -> str | None:
    referer = request.META.get("HTTP_REFERER", "")
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    if not referer or not url_has_allowed_host_and_scheme(referer, allowed_hosts={host}):
        return None
    parts = urlsplit(referer)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _page_for(url: str) -> WayBack | None:
    """``url`` as a page to go back to (its path rebuilt from its route), or None. A page of
    this request's environment carries its ``/env/<env>/`` prefix (the script prefix), which
    the routes do not."""
    path, _, query = url.partition("?")
    prefix = get_script_prefix()
    if prefix != "/" and path.startswith(prefix):
        path = "/" + path.removeprefix(prefix)
    try:
        match = resolve(path)
    except Resolver404:
        return None
    name = match.kwargs.get("name", "")
    if match.url_name in CHANGES:
        return WayBack(reverse("chain", kwargs={"name": name}), f"chain {name}")
    # The pages that can be shown again as they are (a GET, no side effect), by name.
    label = {
        "dashboard": "the dashboard",
        "chain": f"chain {name}",
        "chain-history": f"the history of {name}",
        "history": "the history",
        "alerts": "the alerts",
    }.get(match.url_name or "")
    if label is None:
        return None
    return WayBack(reverse(match.url_name, kwargs=match.kwargs) + (f"?{query}" if query else ""), label)
