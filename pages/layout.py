"""What every on-call page shares: its layout's context (who is signed in, in which role), who
may read it (``viewer_required``, else the no-role page), the chain it is about in the page's
environment (or a 404), the facts a chain's card shows, and a page's address in another
environment."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from audit.fleet import fleet_summaries
from pages.display import HealthMap, LiveState, live_state
from presets import environments, selectors, services
from presets.exceptions import NotFound
from presets.models import Selection
from presets.roles import VIEWER_GROUP, can_change, can_see_access, can_view
from presets.selectors import PinStart


def render_page(request: HttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """``template`` with ``context`` and what every page's layout needs."""
    user = request.user
    reads = can_view(user)
    roles = (["on-call" if can_change(user) else "viewer"] if reads else []) + (["staff"] if user.is_staff else [])
    context = {
        "can_change": can_change(user),
        "can_see_access": can_see_access(user),
        "role": " · ".join(roles) or "no role",
        # The open alerts' count in the nav is reading too: none for someone without a role.
        **({} if reads else {"open_alert_count": 0}),
        "pin_alert_after": settings.PIN_ALERT_AFTER_MINUTES,
        **context,
    }
    return render(request, template, context, status=status)


def no_role_page(request: HttpRequest) -> HttpResponse:
    """The 403 for someone signed in without a role that reads: who they are signed in as,
    which role to ask an admin for, and (in the layout) how to sign out."""
    context = {"viewer_group": VIEWER_GROUP, "is_staff": request.user.is_staff}
    return render_page(request, "presets/no_role.html", context, status=403)


def viewer_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page that reads the chains: for someone signed in (else to the sign-in page) with a
    role that reads (``roles.can_view``; else the no-role page)."""

    @login_required
    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not can_view(request.user):
            return no_role_page(request)
        return view(request, *args, **kwargs)

    return checked


def live_or_404(request: HttpRequest, name: str, now: Any = None) -> Selection:
    """The chain's live selection in the page's environment (an expired pin reverted first), or
    a 404 for a chain it does not have, whose words name the environment that has it."""
    try:
        return services.revert_expired_and_read(chain=name, environment=environment_of(request), now=now)
    except NotFound as error:
        raise Http404(error.message) from None


def environment_of(request: HttpRequest) -> str:
    """The page's environment (``controlplane.environment_paths`` sets it on every request it
    sees; a request made without it, a test's, is the default's)."""
    return getattr(request, "environment", "") or environments.default()


def in_environment(request: HttpRequest, environment: str, path: str) -> str:
    """``path`` (from the site's root, as ``request.path_info`` is) in ``environment``, under
    the script name the site is served at."""
    return request.META.get("SCRIPT_NAME", "").rstrip("/") + environments.path_in(environment, path)


def live_card(
    selection: Selection,
    *,
    now: datetime,
    health: HealthMap | None = None,
    fleet: bool = True,
    fleet_line: str | None = None,
    pin_starts: dict[int, PinStart | None] | None = None,
) -> LiveState:
    """A chain's card facts: the pin's true start, whether it is stale and, unless ``fleet``
    is false (the history pages' strip of every chain), how far the fleet has got
    (``fleet_line`` when already read: the dashboard reads every chain's at once); with
    ``health``, how the fleet finds each live step. ``pin_starts`` are every chain's pin
    starts when already read (``selectors.live_pin_starts``)."""
    if fleet and fleet_line is None:
        fleet_line = fleet_summaries([selection], now)[selection.chain_id]
    return live_state(
        selection,
        now=now,
        alert_after=timedelta(minutes=settings.PIN_ALERT_AFTER_MINUTES),
        pin_start=(pin_starts[selection.chain_id] if pin_starts is not None else selectors.live_pin_start(selection)),
        fleet_summary=fleet_line if fleet and fleet_line else "",
        health=health,
    )
