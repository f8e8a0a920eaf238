"""Content-Security-Policy on every response Django renders (Django 5.2 has no CSP setting).

The policy lives in ``settings.CONTENT_SECURITY_POLICY``; SecurityMiddleware and
XFrameOptionsMiddleware send the other headers (nosniff, Referrer-Policy, X-Frame-Options).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy:
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
