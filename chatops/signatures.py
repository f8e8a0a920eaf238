"""Slack's request signatures, checked as Slack specifies them: ``X-Slack-Signature`` is
``v0=`` and the hex HMAC-SHA256, keyed with the app's signing secret, of ``v0:``, the
``X-Slack-Request-Timestamp`` header, ``:`` and the exact body. A request more than 5 minutes
from this clock is a replay; a signature seen already within that window is one too."""

from __future__ import annotations

import hashlib
import hmac
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

WINDOW_SECONDS = 5 * 60


def refusal(request: HttpRequest, *, now: float | None = None) -> str | None:
    """Why this request is not Slack's, or None when it is."""
    secret = settings.SLACK_SIGNING_SECRET
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp.isdigit() or not signature.startswith("v0="):
        return "not signed by Slack: X-Slack-Request-Timestamp and X-Slack-Signature are required"
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > WINDOW_SECONDS:
        return "refused: the request is more than 5 minutes old (a replay, or a clock that is off)"
    base = b"v0:" + timestamp.encode() + b":" + request.body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return "refused: the signature does not match this app's signing secret"
    # Each signed request is acted on once: the same one sent again is a replay.
    if not cache.add(f"chatops.slack.seen:{signature}", 1, timeout=WINDOW_SECONDS + 60):
        return "refused: this request was received already (a replay)"
    return None
