"""Pages and API calls of an environment other than the default: ``/env/<env>/...``.

The default environment keeps today's URLs. Any other one's pages are the same pages under
``/env/<env>/``: this middleware takes the prefix off the path before the URLs are resolved,
sets ``request.environment``, and makes it the script prefix, so that every link the pages
reverse stays in the environment. ``request.environment_named`` says whether the path named it
(a token reads its own environment unless the path names one: ``http_api.environments``).
``/env/<default>/...`` is served as well (a link made for any environment works).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import get_script_prefix, set_script_prefix

from presets import environments
from read_path.http import error_body, split_environment


class EnvironmentPathMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        named, rest = split_environment(request.path_info)
        request.environment_named = named  # type: ignore[attr-defined]
        if not named:
            request.environment = environments.default()  # type: ignore[attr-defined]
            return self.get_response(request)
        if named not in environments.names():
            refusal = environments.unknown(named)
            if rest.startswith("/api/"):
                return JsonResponse(error_body(404, refusal.message, refusal.details), status=404)
            return HttpResponse(render_to_string("404.html", {"message": refusal.message}), status=404)
        request.environment = named  # type: ignore[attr-defined]
        request.path_info = rest or "/"
        # The prefix is the thread's, not the request's: a handler that does not set it again for
        # each request (Django's test client) would otherwise keep it for the next one.
        prefix = get_script_prefix()
        set_script_prefix(f"{prefix}env/{named}/")
        try:
            return self.get_response(request)
        finally:
            set_script_prefix(prefix)


def environment_path(environment: str, path: str) -> str:
    """``path`` (absolute, from the site's root) in ``environment``: unchanged in the default one."""
    return environments.path_in(environment, path)
