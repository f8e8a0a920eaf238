"""What every on-call page shares: its layout's context (who is signed in, in which role, the
quick-change buttons), the chain it is about (or a 404) and the facts a chain's card shows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from audit.fleet import fleet_summaries
from presets import selectors, services
from presets.exceptions import NotFound
from presets.models import Selection
from presets.roles import can_change, can_see_access
from presets.selectors import PinStart
from presets.web.display import HealthMap, LiveState, format_minutes, live_state

# The one-click "+1 h" / "+4 h" buttons of a pinned chain: minutes added to its expiry.
QUICK_EXTEND_MINUTES = (60, 240)


def render_page(request: HttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """``template`` with ``context`` and what every page's layout needs."""
    user = request.user
    roles = ["on-call" if can_change(user) else "viewer"] + (["staff"] if user.is_staff else [])
    context = {
        "can_change": can_change(user),
        "can_see_access": can_see_access(user),
        "role": " · ".join(roles),
        "pin_alert_after": settings.PIN_ALERT_AFTER_MINUTES,
        "quick_extend": [(minutes, f"+{format_minutes(minutes)}") for minutes in QUICK_EXTEND_MINUTES],
        **context,
    }
    return render(request, template, context, status=status)


def live_or_404(name: str, now: Any = None) -> Selection:
    """The chain's live selection (an expired pin reverted first), or a 404 for an unknown chain."""
    try:
        return services.revert_expired_and_read(chain=name, now=now)
    except NotFound:
        raise Http404(f"unknown chain {name!r}") from None


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
