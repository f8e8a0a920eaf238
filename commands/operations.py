"""What the runbook commands share (``chain_status``, ``select_preset``, ``revert_to_default``,
``extend_pin``, ``restore_version``, ``chain_history``, and the token commands): who the
operator is, the change options, refusals as one-line ``CommandError``, and how a chain's
state reads in a terminal.

The commands are thin: every change is one ``presets.services`` call, in its one transaction,
so a refused change has written nothing.
"""

from __future__ import annotations

import getpass
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.change_review import ChangeReview
from presets import guards, services
from presets.documents import format_duration, format_time
from presets.exceptions import Conflict, InvalidInput, NotFound, ServiceError
from presets.models import PinGuard, Selection
from presets.wording import SHORTEN_IN_API, Phrase, for_people

ACTOR_MAX = 150
CLI_PREFIX = "cli:"

# The services name the field a refusal is about; the commands name their own option (the
# expiry's fields name the option the operator gave: ``expiry_option_names``).
OPTION_OF = {
    "reason": "--reason",
    "duration_minutes": "--minutes",
    "expires_at": "--until",
    "preset": "PRESET",
    "version": "VERSION",
    "chain": "CHAIN",
    "name": "NAME",
    "scope": "--scope",
}

# Where the services word a refusal for the API or the pages (a JSON field, a button), the
# commands say it in theirs (``presets.wording``: durations and times read the same everywhere).
COMMAND_WORDS: list[Phrase] = [
    (SHORTEN_IN_API, lambda match: "shorten it (--shorten)"),
    (re.compile(r"leave the duration out"), lambda match: "leave out --minutes, --hours and --until"),
]
EXPIRY_OPTIONS = ("minutes", "hours", "until")

T = TypeVar("T")
CHAINS_LISTED = "manage.py chain_status lists the chains"


def add_environment_argument(parser: CommandParser) -> None:
    """``--environment ENV``: the environment whose chain a command reads or changes."""
    parser.add_argument(
        "--environment",
        default="",
        metavar="ENV",
        help="the chain's environment (default: the default environment, production)",
    )


def add_change_arguments(parser: CommandParser) -> None:
    """The options every change takes: the chain's environment, why, the version the operator
    saw, who."""
    add_environment_argument(parser)
    # Checked in handle (a one-line error), not by argparse (a usage block).
    parser.add_argument("--reason", default="", help="why (required), e.g. the incident number")
    parser.add_argument(
        "--expected-version",
        default=None,
        metavar="V",
        help="refuse the change if the chain is no longer at version V (what chain_status showed)",
    )
    add_actor_argument(parser)


def add_actor_argument(parser: CommandParser) -> None:
    parser.add_argument(
        "--actor",
        default=None,
        help='who makes the change (default: the operating-system user, recorded as "cli:USER")',
    )


def actor_from(options: dict[str, Any]) -> str:
    """``--actor``, else ``cli:`` and the operating-system user."""
    given = options.get("actor")
    if given is not None:
        actor = given.strip()
        if not actor or len(actor) > ACTOR_MAX:
            raise CommandError(f"--actor: give a name of 1..{ACTOR_MAX} characters, e.g. --actor cli:alice")
        return actor
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        raise CommandError("--actor: cannot tell who you are (no USER or LOGNAME): pass --actor NAME") from None
    return CLI_PREFIX + user


def amount(option: str, value: Any) -> Decimal | None:
    """A decimal amount option given as text (None stays None), or a one-line error naming it;
    the service checks its bounds."""
    if value is None:
        return None
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise CommandError(f"{option}: {value!r} is not an amount (e.g. 25 or 12.50)") from None
    if not number.is_finite():
        raise CommandError(f"{option}: {value!r} is not an amount (e.g. 25 or 12.50)")
    return number


def whole_number(option: str, value: Any, *, minimum: int = 1, maximum: int = 2**31 - 1) -> int | None:
    """An integer option given as text (None stays None), or a one-line error naming it."""
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise CommandError(f"{option}: {value!r} is not a whole number") from None
    if number < minimum:
        raise CommandError(f"{option}: must be at least {minimum}, not {number}")
    if number > maximum:
        raise CommandError(f"{option}: must be at most {maximum}, not {number}")
    return number


def add_expiry_arguments(parser: CommandParser, *, ends: str) -> None:
    """``--minutes``, ``--hours`` and ``--until``: one of them says when a pin ends (``ends``:
    how the help reads, e.g. "the pin ends")."""
    parser.add_argument("--minutes", default=None, metavar="N", help=f"{ends} N minutes from now")
    parser.add_argument(
        "--hours",
        default=None,
        metavar="H",
        help=f"{ends} H hours from now; fractions allowed, e.g. 1.5 (not with --minutes or --until)",
    )
    parser.add_argument("--until", default=None, metavar="ISO", help=f"{ends} at this time, e.g. 2026-12-01T09:00Z")


def expiry_options(options: dict[str, Any]) -> datetime | timedelta | None:
    """``--minutes N`` or ``--hours H`` (a duration), or ``--until ISO`` (a time), at most one;
    the services check either against the pin limits."""
    given = [f"--{name}" for name in EXPIRY_OPTIONS if options[name] is not None]
    if len(given) > 1:
        both = "not both" if len(given) == 2 else "not all three"
        raise CommandError(f"{', '.join(given[:-1])} and {given[-1]}: give one of them, {both}")
    minutes = whole_number("--minutes", options["minutes"])
    if minutes is not None:
        return timedelta(minutes=minutes)
    hours = hours_option("--hours", options["hours"])
    if hours is not None:
        return hours
    return time_option("--until", options["until"])


def expiry_option_names(options: dict[str, Any]) -> dict[str, str]:
    """Name the expiry option the operator gave in a refusal about the expiry (the services
    name ``duration_minutes`` or ``expires_at``, whichever they were given)."""
    for name in EXPIRY_OPTIONS:
        if options[name] is not None:
            return {"duration_minutes": f"--{name}", "expires_at": f"--{name}"}
    return {}


def hours_option(option: str, value: Any) -> timedelta | None:
    """A number of hours given as text, fractions allowed (None stays None), as a duration of
    at least a minute, or a one-line error naming the option."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours):
        raise CommandError(f"{option}: {value!r} is not a number of hours, e.g. 1.5")
    if hours <= 0:
        raise CommandError(f"{option}: must be more than 0, not {text}")
    try:
        duration = timedelta(hours=hours)
    except OverflowError:
        raise CommandError(f"{option}: {text} hours is far longer than any pin") from None
    if duration < timedelta(minutes=1):
        raise CommandError(f"{option}: {text} h is less than a minute; give at least 0.02")
    return duration


def time_option(option: str, value: str | None) -> datetime | None:
    """An ISO 8601 time option with its time zone (e.g. 2026-12-01T09:00:00Z)."""
    if value is None:
        return None
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(f"{option}: {value!r} is not an ISO 8601 time, e.g. 2026-12-01T09:00:00Z")
    if timezone.is_naive(parsed):
        raise CommandError(f"{option}: {value!r} needs a time zone, e.g. 2026-12-01T09:00:00Z")
    return parsed


def refused(exc: ServiceError, names: dict[str, str] | None = None) -> CommandError:
    """A service's refusal as one line, naming the option at fault in the commands' words
    (``COMMAND_WORDS``), its times as "04:15 UTC (in 2 h)"."""
    if isinstance(exc, InvalidInput):
        option = {**OPTION_OF, **(names or {})}.get(exc.field, exc.field)
        message = f"{option}: {exc.field_message}"
    elif isinstance(exc, Conflict) and "expected_version" in exc.details:
        message = f"--expected-version: {exc.message}"
    elif isinstance(exc, NotFound) and "chain" in exc.details:
        message = f"{exc.message}: {CHAINS_LISTED}"
    else:
        message = exc.message
    return CommandError(for_people(message, now=timezone.now(), phrases=COMMAND_WORDS))


@contextmanager
def service_errors(names: dict[str, str] | None = None) -> Iterator[None]:
    """Turn the services' refusals into one-line command errors (nothing was written);
    ``names`` overrides which option a field's refusal names."""
    try:
        yield
    except ServiceError as exc:
        raise refused(exc, names) from None


def run(change: Callable[[], T], names: dict[str, str] | None = None) -> T:
    """Make one service call, its refusal a one-line command error."""
    with service_errors(names):
        return change()


def make_change(
    command: BaseCommand,
    options: dict[str, Any],
    change: Callable[..., Selection],
    *,
    review: Callable[[Selection], ChangeReview],
    names: dict[str, str] | None = None,
    **arguments: Any,
) -> tuple[Selection, ChangeReview]:
    """Make one change with what every change command takes (``add_change_arguments``: the
    chain, ``--reason``, ``--expected-version``, the actor) and ``arguments``; a refusal is a
    one-line command error. The change is reviewed first as the review page and Slack review
    it (``review``: ``audit.change_review``) and made on the version it was reviewed against
    (or refused if the chain moved meanwhile); what it did is printed in one line, then a
    ``warning:`` line for each danger of the review, then its cost. Returns the selection the
    change made and its review."""
    expected = whole_number("--expected-version", options["expected_version"])
    actor = actor_from(options)
    environment = options["environment"]
    names = {"environment": "--environment", **(names or {})}
    live = run(lambda: services.revert_expired_and_read(chain=options["chain"], environment=environment), names=names)
    run(lambda: services.clean_reason(options["reason"]), names=names)  # first, as the services check it
    reviewed = run(lambda: review(live), names=names)
    selection = run(
        lambda: change(
            chain=options["chain"],
            environment=environment,
            actor=actor,
            reason=options["reason"],
            expected_version=live.version if expected is None else expected,
            **arguments,
        ),
        names=names,
    )
    command.stdout.write(changed(selection, now=timezone.now()))
    for danger in reviewed.dangers:
        command.stdout.write(f"warning: {danger}", style_func=command.style.WARNING)
    if reviewed.cost is not None:
        # What the change costs, estimated as the review page estimates it before a change.
        command.stdout.write(f"cost: {reviewed.cost.words}")
    return selection, reviewed


def served(selection: Selection, *, now: datetime) -> str:
    """What a chain serves, in one line: version, preset, and the pin's end."""
    line = f"{selection.chain.name} v{selection.version}: {selection.preset.name}"
    if selection.expires_at is None:
        return line + " (default)"
    if selection.is_expired(now):
        return line + f" (pinned; expired at {format_time(selection.expires_at)}, reverts at the next sweep)"
    left = format_duration(selection.expires_at - now)
    return line + f" (pinned until {format_time(selection.expires_at)}, {left} left)"


def changed(selection: Selection, *, now: datetime) -> str:
    """What a change did, in one line: the new state, what it replaced, who and why."""
    was = f"v{selection.previous_version} {selection.previous_preset.name if selection.previous_preset else '-'}"
    return f"{served(selection, now=now)}; was {was}; {selection.action} by {selection.updated_by}: {selection.reason}"


def guard_line(guard: PinGuard) -> str:
    """A guard in one line: its chain and pin, then ``guards.describe`` (as the chain's card)."""
    return f"{guard.chain.name} v{guard.pin_version}: {guards.describe(guard)}"
