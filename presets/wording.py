"""A service's refusal in a person's words. The services word a refusal for the API (a JSON
field, minutes, RFC 3339 times: what a program acts on); the pages and the runbook commands say
it to a person at 02:00: times as "04:15 UTC (in 2 h)", minutes as "24 h", and each
interface's own names for what to do instead (``phrases``: a button on the pages, an option
in a terminal)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.utils.dateparse import parse_datetime

from presets.documents import format_duration, format_moment

Phrase = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _minutes(count: str) -> str:
    return format_duration(timedelta(minutes=int(count)))


# How long, as every interface says it to a person.
DURATIONS: list[Phrase] = [
    (
        re.compile(r"(\d+) minutes is longer than the maximum pin of (\d+)"),
        lambda match: f"{_minutes(match[1])} is longer than the longest pin, {_minutes(match[2])}",
    ),
    (re.compile(r"more than (\d+) minutes ahead"), lambda match: f"more than {_minutes(match[1])} ahead"),
]
# The API's way to shorten a pin, named in the services' refusal of an extension that would.
SHORTEN_IN_API = re.compile(r'shorten it \("shorten": true, or "End the pin earlier" on the chain page\)')
# An RFC 3339 time as the services write them, not an example of one ("e.g. 2026-...Z").
SERVICE_TIME = re.compile(r"(?<!e\.g\. )\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def for_people(message: str, *, now: datetime, phrases: Sequence[Phrase] = ()) -> str:
    """``message`` with the interface's ``phrases``, durations in hours and minutes and every
    time as "04:15 UTC (in 2 h)" as of ``now``; on one line."""
    for pattern, words in (*phrases, *DURATIONS):
        message = pattern.sub(words, message)
    message = SERVICE_TIME.sub(lambda match: _moment(match[0], now=now), message)
    return " ".join(message.split())


def _moment(text: str, *, now: datetime) -> str:
    value = parse_datetime(text)
    return text if value is None else format_moment(value, now=now)
