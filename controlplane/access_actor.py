"""Names the signed-in person as the actor of the access changes a request makes.

A staff member who gives someone the on-call role in the Django admin is recorded in the
access history (``presets.access_history``) by name, not as "system". The user is looked up
only if the request records an access change; code that knows better (single sign-on, a
command) names its own actor with ``acting_as``, which wins inside its block.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from presets.access_history import acting_for, request_actor


class AccessActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with acting_for(lambda: request_actor(getattr(request, "user", None))):
            return self.get_response(request)
