"""What the on-call can do about an event, from where the page arrives (docs/on-call.md, "Acting
from the alert"): the actions a notification suggests (pin the healthiest preset, extend the pin
an hour, revert to the default) and the deep links that open each one's review.

A suggestion carries no authority. Its deep link is signed so that the review can say the
control plane suggested it (a link someone else made, or changed, is refused and opens
nothing); the review and the confirmation still check the signed-in person's role and the
chain's version, as every change does. Slack's buttons (``chatops``) carry the same actions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.utils import timezone

from audit import provider_health
from audit.models import Alert, AlertKind, page_url
from presets import selectors
from presets.documents import format_duration

PIN = "pin"
EXTEND = "extend"
REVERT = "revert"
KINDS = (PIN, EXTEND, REVERT)

# How much an "extend" suggestion adds.
EXTEND_MINUTES = 60
LINK_SALT = "controlplane.deep-link"


@dataclass(frozen=True)
class Action:
    """One change suggested on ``chain`` of ``environment`` at ``version`` (the version it
    was suggested against: the review shows a conflict if the chain changed since), at ``at``
    (seconds since the epoch: the event's time, which dates its deep link). An action kept
    from before environments names none: it means the default one."""

    kind: str
    chain: str
    version: int
    preset: str = ""
    minutes: int = 0
    reason: str = ""
    at: int = 0
    environment: str = ""

    @property
    def label(self) -> str:
        """The button's words: 'Pin pin_secondary', 'Extend 1 h', 'Revert to default'."""
        if self.kind == PIN:
            return f"Pin {self.preset}"
        if self.kind == EXTEND:
            return f"Extend {format_duration(timedelta(minutes=self.minutes))}"
        return "Revert to default"

    def to_value(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_value(cls, value: Any) -> Action:
        """An action from its JSON (a button's value, a link's payload); ValueError if it is not one."""
        if not isinstance(value, dict) or value.get("kind") not in KINDS:
            raise ValueError("not an action")
        try:
            action = cls(
                kind=str(value["kind"]),
                chain=str(value["chain"]),
                version=int(value["version"]),
                preset=str(value.get("preset") or ""),
                minutes=int(value.get("minutes") or 0),
                reason=str(value.get("reason") or ""),
                at=int(value.get("at") or 0),
                environment=str(value.get("environment") or ""),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not an action: {error}") from error
        if action.kind == PIN and not action.preset or action.kind == EXTEND and action.minutes < 1:
            raise ValueError("not an action: a pin names its preset, an extension its minutes")
        return action


# What a notification suggests is worked out from the event alone (its alert's details, its
# change), never from what is live when it is sent: every retry of a delivery sends the same
# body, and the review shows what changed since.


def for_alert(alert: Alert) -> list[Action]:
    """What to do about an alert raised: for a failing provider or a failed drill, pin the
    preset that was healthiest when it was raised (``remember_suggestion``); for a pin left on, extend it or
    revert it; for spend running away under a pin, revert it. Nothing for an event or a condition a
    change cannot fix."""
    chain, at, environment = alert.chain.name, int(alert.created_at.timestamp()), alert.chain.environment
    if alert.kind in (AlertKind.PROVIDER_FAILING, AlertKind.PROVIDER_CREDENTIALS, AlertKind.DRILL_FAILED):
        suggested = alert.details.get("suggested")
        if not suggested:
            return []
        reason = f"{provider_reason(alert)}; {suggested['preset']}'s {suggested['reason']}"
        minutes = settings.PIN_DEFAULT_MINUTES
        preset = suggested["preset"]
        return [Action(PIN, chain, alert.version, preset, minutes, reason[:200], at=at, environment=environment)]
    if alert.kind == AlertKind.STALE_PIN:
        preset = str(alert.details.get("preset") or "")
        why = f"{alert.chain.label} still pinned to {preset} after {alert.age}"
        return pinned_actions(chain, alert.version, at=at, why=why, environment=environment)
    if alert.kind == AlertKind.SPEND and alert.details.get("pin"):
        pin, words = alert.details["pin"], alert.details.get("words")
        why = f"Reverted: {alert.chain.label}'s {alert.subject} spend ran at {words} under pin {pin}"
        return [Action(REVERT, chain, alert.version, reason=why[:200], at=at, environment=environment)]
    return []


def for_change(change: dict[str, Any], *, at: datetime) -> list[Action]:
    """What to do after a change that pinned a chain: extend the pin or revert it (a change
    recorded before environments names none: the default's)."""
    if not change.get("expires_at") or change.get("action") not in ("select", "extend", "restore"):
        return []
    why = f"after {change['actor']}'s pin of {change['preset']}"
    environment = str(change.get("environment") or "")
    return pinned_actions(
        change["chain_name"], change["version"], at=int(at.timestamp()), why=why, environment=environment
    )


def pinned_actions(chain: str, version: int, *, at: int, why: str, environment: str = "") -> list[Action]:
    return [
        Action(
            EXTEND, chain, version, minutes=EXTEND_MINUTES, reason=f"Extended {why}", at=at, environment=environment
        ),
        Action(REVERT, chain, version, reason=f"Reverted {why}", at=at, environment=environment),
    ]


def provider_reason(alert: Alert) -> str:
    if alert.kind == AlertKind.DRILL_FAILED:
        return f"{alert.subject} on {alert.chain.label} {alert.details.get('verdict')}"
    if alert.kind == AlertKind.PROVIDER_CREDENTIALS:
        return f"{alert.subject} rejects the fleet's credentials on {alert.chain.label}"
    return f"{alert.subject} failing on {alert.chain.label}"


def remember_suggestion(alert: Alert) -> None:
    """Keep in a provider alert just raised the preset to pin instead (the healthiest reviewed
    preset, as the chain page shows it), so that what it suggests is the same on every retry."""
    selection = selectors.selections().filter(chain=alert.chain_id).first()
    if selection is None:
        return
    presets = list(selectors.active_presets(chain=selection.chain_id).values())
    health = provider_health.health_by_step(
        selection.chain, [selection.steps, *(p.steps for p in presets)], now=timezone.now()
    )
    suggestion = provider_health.healthiest_preset(presets, health, live=selection.preset.name)
    if suggestion is not None:
        alert.details = {**alert.details, "suggested": {"preset": suggestion.preset, "reason": suggestion.reason}}
        alert.save(update_fields=["details"])


# --- deep links ---------------------------------------------------------------------------------


class BadLink(Exception):
    """A deep link the control plane did not make, that was changed, or that is too old."""


def deep_link(action: Action) -> str:
    """The address that opens ``action``'s review, prefilled, in its chain's environment:
    signed (the same address for the same action), dated by the action's ``at``, never
    authority."""
    return page_url(action.environment, f"/act/{link_token(action)}/")


def link_token(action: Action) -> str:
    """The signed part of ``action``'s deep link (``/act/<token>/``); the pages link to it on
    the host they were reached on, the notifiers on ``PUBLIC_BASE_URL``."""
    return signing.Signer(salt=LINK_SALT).sign_object(action.to_value(), compress=True)


def read_link(token: str, *, now: datetime | None = None) -> Action:
    """The action a deep link's token carries; BadLink saying why it opens nothing."""
    try:
        action = Action.from_value(signing.Signer(salt=LINK_SALT).unsign_object(token))
    except (signing.BadSignature, ValueError) as error:
        raise BadLink(
            "this link was not made by this control plane, or it was changed on the way: nothing "
            "was prefilled; open the chain to see what it serves now"
        ) from error
    now = now or timezone.now()
    if now.timestamp() - action.at > settings.DEEP_LINK_MAX_AGE_HOURS * 3600:
        raise BadLink(
            f"this link is older than {settings.DEEP_LINK_MAX_AGE_HOURS} hours; what it suggested may "
            "no longer fit: open the chain to see what it serves now"
        )
    return action
