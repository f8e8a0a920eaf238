"""A suggested action (``audit.actions``) reviewed and made from Slack: the modal that says what
it will do (the live preset and the new one, the new head, the providers dropped, the health
of the steps about to serve, what to check first, until when) and asks for a reason; then the
change, made by the same services as every interface, as ``slack:<username>``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from audit import change_review
from audit.actions import EXTEND, PIN, Action
from audit.change_review import ChangeReview
from audit.change_risks import reported_health
from audit.messages import slack_escape
from presets import environments, services
from presets.documents import format_clock
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.models import Selection
from presets.step_changes import step_label

CALLBACK_ID = "controlplane.act"
REASON_BLOCK = "reason"


class Refused(Exception):
    """Why an action cannot be made or reviewed, in words for Slack."""


def live(chain: str, environment: str = "") -> Selection:
    """The chain's live selection in ``environment`` (empty: the default); Refused in Slack's
    words for a chain or an environment this control plane does not have."""
    try:
        environment = environments.resolve(environment)
    except NotFound as error:
        raise Refused(f"Nothing can be done: {error.message}.") from None
    try:
        return services.revert_expired_and_read(chain=chain, environment=environment)
    except NotFound as error:
        if environments.several():
            raise Refused(f"Nothing can be done: {error.message}.") from None
        raise Refused(f"There is no chain named {chain}: `/chains status <chain>` names the chains.") from None


def named(action: Action) -> str:
    """The action's chain as Slack names it: ``chat``, or ``staging/chat`` outside the default
    environment (``environments.label``, as the alerts' messages name it)."""
    return environments.label(action.environment or environments.default(), action.chain)


def in_environment(action: Action) -> str:
    """The line that says which environment a review acts in, with more than one (none with one)."""
    if not environments.several():
        return ""
    environment = action.environment or environments.default()
    if environments.is_production(environment):
        return f":rotating_light: In *{environment}*: this changes what production's services use."
    return f"In *{environment}*, not production."


def review(action: Action, selection: Selection) -> ChangeReview:
    """The review of ``action`` (``audit.change_review``, as the pages and the commands say it);
    Refused in the services' words when it would be refused. A pin from Slack is guarded."""
    try:
        reviewed = change_review.review_of(
            selection, action.kind, preset=action.preset, minutes=action.minutes, guard=action.kind == PIN or None
        )
        reviewed.refuse()
    except InvalidInput as refusal:  # the services' refusal, or minutes they would not take
        words = refusal.field_message
        if refusal.field == "duration_minutes" and words.startswith("must"):
            words = f"the minutes {words}"  # "must be positive" names no field
        raise Refused(f"Nothing can be done: {words}.") from None
    return reviewed


def stale(action: Action, selection: Selection) -> str:
    """Why the chain is not as the action was suggested against, in Slack's words."""
    now = timezone.now()
    return (
        f"{named(action)} changed since this was suggested: now v{selection.version}, {selection.action} of "
        f"{selection.preset.name} by {selection.updated_by} at {format_clock(selection.updated_at, now=now)}. "
        "Close this and act on what is live now."
    )


def summary(action: Action, goal: ChangeReview) -> list[str]:
    """The review's lines, as the pages' review says them."""
    now = timezone.now()
    selection = goal.live
    where = in_environment(action)
    lines = [where] if where else []
    lines.append(f"*{named(action)}* now: v{selection.version} {selection.preset.name} → *{goal.target}*")
    if goal.was_until is not None and goal.until is not None:
        lines.append(f"Pinned until {format_clock(goal.was_until, now=now)} → {format_clock(goal.until, now=now)}")
    elif goal.until is not None:
        lines.append(f"Pinned until {format_clock(goal.until, now=now)}, then back to the default by itself")
    else:
        lines.append("No expiry: the chain's default")
    if goal.ends:
        lines.append(goal.ends)
    if goal.change is not None and goal.change.new_head is not None:
        lines.append(f"New head: {step_label(goal.change.new_head)}")
    if goal.change is not None and goal.change.dropped:
        lines.append(f"Dropped: {', '.join(goal.change.dropped)} (no traffic)")
    lines.extend(step_lines(goal.steps, goal.health))
    lines.extend(f":warning: Check first: {risk}" for risk in goal.dangers)
    if goal.guard is not None:
        lines.append(goal.guard.text)
    if goal.cost is not None:
        lines.append(f"Cost: {goal.cost.words}")
    return [slack_escape(line) if not line.startswith("*") else line for line in lines]


def step_lines(steps: list[dict[str, Any]], health: Any) -> list[str]:
    """A line per step with the fleet's health of it, as the chain page shows it."""
    lines = []
    for step in steps:
        seen = reported_health(step, health)
        lines.append(f"• {step_label(step)}: {seen['summary'] if seen else 'no reports in the last hour'}")
    return lines


def modal(action: Action, selection: Selection, *, metadata: dict[str, Any]) -> dict[str, Any]:
    """The modal that reviews ``action`` and asks for its reason."""
    goal = review(action, selection)
    lines = summary(action, goal)
    submit = {PIN: f"Pin {goal.target}", EXTEND: "Extend"}.get(action.kind, f"Revert to {goal.target}")
    return {
        "type": "modal",
        "callback_id": CALLBACK_ID,
        "title": {"type": "plain_text", "text": f"{action.label}"[:24]},
        "submit": {"type": "plain_text", "text": submit[:24]},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps({"action": action.to_value(), **metadata})[:3000],
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}},
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": {"type": "plain_text", "text": "Reason"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_BLOCK,
                    "initial_value": action.reason[: services.REASON_MAX],
                    "max_length": services.REASON_MAX,
                },
            },
        ],
    }


def apply(action: Action, *, user: User, reason: str) -> Selection:
    """Make ``action`` as ``user`` from Slack (actor ``slack:<username>``), at the version it was
    reviewed against; Refused in Slack's words when the service refuses it (a stale version,
    a preset retired or gone, the chain gone since the review opened)."""
    actor = f"slack:{user.get_username()}"
    who: dict[str, Any] = {"actor": actor, "reason": reason, "expected_version": action.version}
    try:
        if action.kind == PIN:
            return services.select_preset(
                chain=action.chain,
                environment=action.environment,
                preset=action.preset,
                expires_at=timedelta(minutes=action.minutes),
                guard=True,
                **who,
            )
        if action.kind == EXTEND:
            selection = live(action.chain, action.environment)
            if selection.expires_at is None:
                raise Conflict("the pin ended")  # the version check below words it
            return services.extend_pin(
                chain=action.chain,
                environment=action.environment,
                expires_at=selection.expires_at + timedelta(minutes=action.minutes),
                **who,
            )
        return services.revert_to_default(chain=action.chain, environment=action.environment, **who)
    except Conflict:
        raise Refused(stale(action, live(action.chain, action.environment))) from None
    except InvalidInput as error:
        raise Refused(f"Nothing was changed: {error.field_message}") from None
    except NotFound:  # the chain was deleted since the review opened
        raise Refused(f"There is no chain named {named(action)} any more, so nothing was changed.") from None


def outcome(action: Action, selection: Selection, *, user: User, reason: str) -> str:
    """The message's new first line once the change is made."""
    now = timezone.now()
    name, chain, version = user.get_username(), named(action), selection.version
    if action.kind in (PIN, EXTEND):
        assert selection.expires_at is not None
        until = format_clock(selection.expires_at, now=now)
        pinned = "pinned" if action.kind == PIN else "extended the pin of"
        did = f"{pinned} {selection.preset.name} on {chain} until {until}"
    else:
        did = f"reverted {chain} to its default {selection.preset.name}"
    return f":white_check_mark: {slack_escape(name)} {did} (v{version}) from Slack: {slack_escape(reason)}"
