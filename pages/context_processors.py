"""What every page's layout needs beyond the page itself: the open-alert count in the top nav,
and the limits a form's boxes hold to (the services' own)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest

from audit.alerts import open_alert_count
from presets.services import REASON_MAX


def open_alerts(request: HttpRequest) -> dict[str, Callable[[], int]]:
    """``open_alert_count``, counted (one query) only when a template reads it: base.html
    does once, for a signed-in person; the sign-in page and the outage page never do."""
    return {"open_alert_count": open_alert_count}


def limits(request: HttpRequest) -> dict[str, int]:
    """``reason_max``: the longest reason the services take (``maxlength`` of a reason box a
    template writes itself; the forms' boxes take it from their field)."""
    return {"reason_max": REASON_MAX}
