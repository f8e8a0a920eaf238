"""Slack's Web API for the Slack app (docs/on-call.md, "Acting from Slack"): the calls the
interactive endpoints make (``views.open``, ``chat.update``, ``users.info``, a
``response_url``), and following a change made from Slack until the fleet has it, to say so in
the message.

One small JSON POST with the bot token, bounded by a timeout; a Slack error (``ok: false``,
an HTTP error, no answer) is logged and returned as ``{}``, never raised into a request.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.utils import timezone

from audit.fleet import fleet_statuses
from presets import environments, selectors

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5
FOLLOW_TASK = "worker.tasks.follow_slack_convergence"
# How long a change made from Slack is followed, and how often its fleet is looked at.
FOLLOW_FOR = timedelta(minutes=2)
FOLLOW_EVERY_SECONDS = 2.0


def issuer_of(team: str) -> str:
    """The identity issuer a Slack workspace's users are linked under (``SignInIdentity``)."""
    return f"https://slack.com/team/{team}"


def call(method: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to the Web API's ``method`` with the bot token; its answer, or {} on an error."""
    return post(settings.SLACK_API_URL.rstrip("/") + "/" + method, body, token=settings.SLACK_BOT_TOKEN, name=method)


def read(method: str, **params: str) -> dict[str, Any]:
    """GET the Web API's read ``method`` (``users.info``) with the bot token; {} on an error."""
    url = settings.SLACK_API_URL.rstrip("/") + "/" + method + "?" + urllib.parse.urlencode(params)
    return post(url, None, token=settings.SLACK_BOT_TOKEN, name=method)


def respond(response_url: str, body: dict[str, Any]) -> None:
    """Answer through an interaction's ``response_url`` (needs no token)."""
    if response_url:
        post(response_url, body, name="response_url")


def post(url: str, body: dict[str, Any] | None, *, token: str = "", name: str) -> dict[str, Any]:
    """POST ``body`` as JSON (GET without one); the answer's JSON, or {} on any error."""
    headers = {"Content-Type": "application/json; charset=utf-8"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310 - https or a local test server
            raw = answer.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.warning("slack %s failed: %s", name, error.__class__.__name__)
        return {}
    try:
        document = json.loads(raw) if raw.strip().startswith(b"{") else {"ok": True}
    except ValueError:
        document = {"ok": False, "error": "not json"}
    if not document.get("ok", False):
        log.warning("slack %s answered ok=false: %s", name, str(document.get("error", ""))[:100])
        return {}
    return dict(document)


# --- following a change until the fleet has it ---------------------------------------------------


@dataclass(frozen=True)
class Followed:
    """A message to update once the fleet has a version: where it is, what it says now."""

    channel: str
    ts: str
    text: str
    chain: str
    version: int
    since: datetime


def convergence(chain: str, version: int, *, since: datetime, now: datetime | None = None) -> tuple[str, bool]:
    """The fleet's progress on ``chain``'s ``version`` in words ('21 of 21 instances on v8 in
    0.4 s'), and whether every live instance has it (or the chain moved on)."""
    now = now or timezone.now()
    environment, name = environments.from_label(chain)
    selection = selectors.selections(environment).filter(chain__name=name).first()
    if selection is None or selection.version != version:
        live = f"v{selection.version}" if selection else "gone"
        return f"{chain} has changed again since ({live}): see the control plane", True
    status = fleet_statuses([selection], now, detail=0, rejected=0)[selection.chain_id]
    instances, on = status["instances"], status["on_version"]
    if not instances:
        return f"no instance polls {chain} now", True
    if on >= instances:
        took = status["applied_max_s"]
        return f"{on} of {instances} instances on v{version}" + (f" in {took:g} s" if took is not None else ""), True
    waited = round((now - since).total_seconds())
    return f"{on} of {instances} instances on v{version} after {waited} s", False


def follow(followed: Followed, *, now: datetime | None = None) -> float | None:
    """Update the message with the fleet's progress; the seconds to look again, or None when
    done (every instance has it, or the time to follow is up)."""
    now = now or timezone.now()
    words, done = convergence(followed.chain, followed.version, since=followed.since, now=now)
    if done or now - followed.since >= FOLLOW_FOR:
        call(
            "chat.update",
            {
                "channel": followed.channel,
                "ts": followed.ts,
                "text": f"{followed.text}\n:satellite: {words}",
                "blocks": [],
            },
        )
        return None
    return FOLLOW_EVERY_SECONDS


def queue_follow(followed: Followed) -> None:
    """Hand following the change to a worker; without one, the message keeps its outcome."""
    body = {
        "channel": followed.channel,
        "ts": followed.ts,
        "text": followed.text,
        "chain": followed.chain,
        "version": followed.version,
        "since": followed.since.isoformat(),
    }
    try:
        current_app.tasks[FOLLOW_TASK].apply_async((), body, countdown=FOLLOW_EVERY_SECONDS)
    except Exception as exc:  # whatever the broker raises: the change is made and told already
        log.warning("could not queue following %s v%s in Slack (%s)", followed.chain, followed.version, exc)


def followed_from(body: dict[str, Any]) -> Followed:
    return Followed(
        channel=body["channel"],
        ts=body["ts"],
        text=body["text"],
        chain=body["chain"],
        version=int(body["version"]),
        since=datetime.fromisoformat(body["since"]),
    )
