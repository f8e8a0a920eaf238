"""The Slack app's two endpoints (docs/on-call.md, "Acting from Slack"), both signed by Slack
and refused (401, nothing changed) otherwise; 404 while ``SLACK_SIGNING_SECRET`` is unset.

- ``POST /slack/actions`` (interactivity): a button under an alert opens the action's review
  in a modal; submitting the modal makes the change as the Slack user's control-plane account,
  updates the message with the outcome, then with the fleet's progress.
- ``POST /slack/commands`` (the ``/chains`` command): ``status <chain>``, and ``pin``,
  ``extend``, ``revert``, which open the same modal. A chain of another environment than the
  default is named as the alerts name it, ``staging/chat``.

A button's value and a modal's metadata carry the action with its chain's environment, and the
change is made there (a button sent before environments names none: the default's).

Slack waits 3 seconds for an answer: each request does its reads, one change at most and a
couple of Web API calls; following the fleet is the worker's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from audit import provider_health, slack
from audit.actions import EXTEND, EXTEND_MINUTES, KINDS, PIN, REVERT, Action
from audit.fleet import fleet_summaries
from audit.messages import SLACK_ACTION_PREFIX, slack_escape
from chatops import reviews, signatures
from chatops.people import NotLinked, person
from presets import environments
from presets.documents import format_clock
from presets.roles import ONCALL_GROUP, can_change, can_view

log = logging.getLogger(__name__)


def _slack_only(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    @csrf_exempt
    @require_POST
    def checked(request: HttpRequest) -> HttpResponse:
        if not settings.SLACK_SIGNING_SECRET:
            raise Http404("the Slack app is not set up here (SLACK_SIGNING_SECRET)")
        why = signatures.refusal(request)
        if why is not None:
            log.warning("slack request refused: %s", why)
            return HttpResponse(why, status=401, content_type="text/plain; charset=utf-8")
        return view(request)

    return checked


def _acting(team: str, user: str, *, changing: bool = True) -> User:
    """The account a Slack user acts as, allowed to change chains (or, not ``changing``, to
    read them); Refused in Slack's words."""
    try:
        account = person(team, user)
    except NotLinked as error:
        raise reviews.Refused(str(error)) from None
    if not changing and not can_view(account):
        raise reviews.Refused(f"{account.get_username()} has no role here yet: ask an admin for the viewer role.")
    if changing and not can_change(account):
        raise reviews.Refused(
            f"Changing a chain needs the {ONCALL_GROUP} role; {account.get_username()} does not have it, "
            "so nothing was changed."
        )
    return account


def _tell(response_url: str, text: str) -> None:
    slack.respond(response_url, {"response_type": "ephemeral", "replace_original": False, "text": text})


# --- interactivity ----------------------------------------------------------------------------------


@_slack_only
def actions(request: HttpRequest) -> HttpResponse:
    try:
        payload = json.loads(request.POST.get("payload", ""))
    except ValueError:
        return HttpResponse("the body's payload is not JSON", status=400, content_type="text/plain")
    if not isinstance(payload, dict):
        return HttpResponse("the body's payload is not an object", status=400, content_type="text/plain")
    try:
        if payload.get("type") == "block_actions":
            _button(payload)
            return HttpResponse(status=200)
        view = payload.get("view") or {}
        if payload.get("type") == "view_submission" and view.get("callback_id") == reviews.CALLBACK_ID:
            return _submitted(payload)
    except (AttributeError, TypeError, KeyError):  # signed, yet not shaped as Slack sends it
        return HttpResponse("the payload is not one Slack sends", status=400, content_type="text/plain")
    return HttpResponse(status=200)  # what this app does not act on (a modal closed, say)


def _button(payload: dict[str, Any]) -> None:
    """A button under a message: open its review, or tell the person why not."""
    team, user = _team_and_user(payload)
    response_url = str(payload.get("response_url", ""))
    for pressed in payload.get("actions", []):
        if not str(pressed.get("action_id", "")).startswith(SLACK_ACTION_PREFIX):
            continue
        try:
            action = Action.from_value(json.loads(pressed.get("value") or "null"))
            _acting(team, user)
            selection = reviews.live(action.chain, action.environment)
            if selection.version != action.version:
                raise reviews.Refused(reviews.stale(action, selection))
            container = payload.get("container") or {}
            metadata = {
                "channel": container.get("channel_id") or (payload.get("channel") or {}).get("id", ""),
                "ts": container.get("message_ts", ""),
                "response_url": response_url,
            }
            view = reviews.modal(action, selection, metadata=metadata)
        except ValueError:
            _tell(response_url, "This button's action could not be read: nothing was changed.")
            continue
        except reviews.Refused as refused:
            _tell(response_url, str(refused))
            continue
        slack.call("views.open", {"trigger_id": payload.get("trigger_id", ""), "view": view})


def _submitted(payload: dict[str, Any]) -> HttpResponse:
    """The modal sent: make the change, then say so in the message it came from."""
    view = payload["view"]
    team, user = _team_and_user(payload)
    try:
        metadata = json.loads(view.get("private_metadata") or "{}")
        action = Action.from_value(metadata.get("action"))
    except (ValueError, AttributeError):
        return _errors("This review could not be read: close it and press the button again.")
    reason = str(
        (((view.get("state") or {}).get("values") or {}).get(reviews.REASON_BLOCK) or {})
        .get(reviews.REASON_BLOCK, {})
        .get("value")
        or ""
    ).strip()
    if not reason:
        return _errors("Say why: the reason is kept in the chain's history.")
    try:
        account = _acting(team, user)
        selection = reviews.apply(action, user=account, reason=reason)
    except reviews.Refused as refused:
        return _errors(str(refused))
    text = reviews.outcome(action, selection, user=account, reason=reason)
    channel, ts = str(metadata.get("channel") or ""), str(metadata.get("ts") or "")
    if channel and ts:
        slack.call("chat.update", {"channel": channel, "ts": ts, "text": text, "blocks": []})
        slack.queue_follow(
            slack.Followed(
                channel=channel,
                ts=ts,
                text=text,
                chain=reviews.named(action),
                version=selection.version,
                since=selection.updated_at,
            )
        )
    else:  # opened from the command: say it in the channel it was typed in, followed as a button's is
        _post_and_follow(metadata, text, reviews.named(action), selection)
    return HttpResponse(status=200)


def _post_and_follow(metadata: dict[str, Any], text: str, chain: str, selection: Any) -> None:
    """Post a slash command's outcome in its channel (the bot's message, so the worker can update it
    with the fleet's progress); where the bot may not post there, answer through the command's
    response_url, without the follow-up. ``chain``: its label (``staging/chat``)."""
    channel = str(metadata.get("channel_id") or "")
    posted = slack.call("chat.postMessage", {"channel": channel, "text": text}) if channel else {}
    if not posted.get("ts"):
        slack.respond(str(metadata.get("response_url") or ""), {"response_type": "in_channel", "text": text})
        return
    slack.queue_follow(
        slack.Followed(
            channel=str(posted.get("channel") or channel),
            ts=str(posted["ts"]),
            text=text,
            chain=chain,
            version=selection.version,
            since=selection.updated_at,
        )
    )


def _errors(text: str) -> JsonResponse:
    """The modal stays open with ``text`` under the reason: Slack's way of refusing a submission."""
    return JsonResponse({"response_action": "errors", "errors": {reviews.REASON_BLOCK: text[:1000]}})


def _team_and_user(payload: dict[str, Any]) -> tuple[str, str]:
    user = payload.get("user") or {}
    team = user.get("team_id") or (payload.get("team") or {}).get("id") or ""
    return str(team), str(user.get("id", ""))


# --- the /chains command ----------------------------------------------------------------------------

USAGE = (
    "`/chains status <chain>`: what it serves, its steps' health, the fleet\n"
    "`/chains pin <chain> <preset> [minutes]`, `/chains extend <chain> [minutes]`, `/chains revert <chain>`: "
    "review the change, then make it"
)


def _usage() -> str:
    """USAGE, and with several environments how to name a chain of another than the default."""
    if not environments.several():
        return USAGE
    other = environments.names()[0]
    return (
        f"{USAGE}\nA chain of {environments.default()} is named alone (`chat`); of another environment, "
        f"with it (`{other}/chat`). Environments: {', '.join(environments.names())}"
    )


@_slack_only
def commands(request: HttpRequest) -> HttpResponse:
    words = request.POST.get("text", "").split()
    team, user = request.POST.get("team_id", ""), request.POST.get("user_id", "")
    verb, args = (words[0].lower(), words[1:]) if words else ("help", [])
    try:
        if verb == "status" and len(args) == 1:
            _acting(team, user, changing=False)
            return _say(_status(*_chain_named(args[0])))
        if verb in KINDS and args:
            action = _typed(verb, args)
            _acting(team, user)
            selection = reviews.live(action.chain, action.environment)
            action = Action(
                **{**action.to_value(), "version": selection.version, "environment": selection.chain.environment}
            )
            metadata = {
                "response_url": request.POST.get("response_url", ""),
                "channel_id": request.POST.get("channel_id", ""),
            }
            view = reviews.modal(action, selection, metadata=metadata)
        elif verb == "help":
            return _say(_usage())
        else:
            return _say(f"`/chains {slack_escape(' '.join(words))}` is not a command I know.\n{_usage()}")
    except reviews.Refused as refused:
        return _say(str(refused))
    slack.call("views.open", {"trigger_id": request.POST.get("trigger_id", ""), "view": view})
    return HttpResponse(status=200)


def _chain_named(word: str) -> tuple[str, str]:
    """The chain a command names and its environment: ``chat`` (the default's) or
    ``staging/chat``; the environment is checked when the chain is read (``reviews.live``)."""
    environment, _, chain = word.rpartition("/")
    return chain, environment


def _typed(verb: str, args: list[str]) -> Action:
    """The action a command names; Refused saying what was wrong."""
    typed, rest = args[0], args[1:]
    chain, environment = _chain_named(typed)
    at = int(timezone.now().timestamp())
    minutes = rest[-1] if rest and rest[-1].isdigit() else None
    if verb == PIN:
        if not rest or rest[0].isdigit():
            raise reviews.Refused(f"Name the preset to pin: `/chains pin {typed} <preset> [minutes]`.")
        pinned = int(minutes) if minutes and len(rest) > 1 else settings.PIN_DEFAULT_MINUTES
        return Action(PIN, chain, 0, preset=rest[0], minutes=pinned, at=at, environment=environment)
    if verb == EXTEND:
        if rest and minutes is None:
            raise reviews.Refused(f"Give the minutes to add as a number: `/chains extend {typed} 60`.")
        added = int(minutes) if minutes else EXTEND_MINUTES
        return Action(EXTEND, chain, 0, minutes=added, at=at, environment=environment)
    assert verb == REVERT
    return Action(REVERT, chain, 0, at=at, environment=environment)


def _status(chain: str, environment: str = "") -> str:
    selection = reviews.live(chain, environment)
    chain = selection.chain.label  # staging/chat; in the default environment, its name
    if environments.several() and environments.is_production(selection.chain.environment):
        chain = f"{chain} ({selection.chain.environment})"
    now = timezone.now()
    if selection.expires_at is not None:
        state = f"pinned to *{selection.preset.name}* until {format_clock(selection.expires_at, now=now)}"
    else:
        state = f"on its default *{selection.preset.name}*"
    done = f"{selection.action} by {selection.updated_by} at {format_clock(selection.updated_at, now=now)}"
    lines = [f"*{chain}* v{selection.version}: {state}", slack_escape(f"{done}: {selection.reason}")]
    # The health of the live steps, as the chain page shows it.
    health = provider_health.health_by_step(selection.chain, [selection.steps], now=now)
    lines.extend(slack_escape(line) for line in reviews.step_lines(selection.steps, health))
    lines.append(slack_escape(f"Fleet: {fleet_summaries([selection], now)[selection.chain_id]}"))
    return "\n".join(lines)


def _say(text: str) -> JsonResponse:
    """The command's answer, seen only by whoever typed it."""
    return JsonResponse({"response_type": "ephemeral", "text": text})
