"""Input fields and parameters of the API: strict about types, so a number sent as a string
or a list sent as a name is reported as the mistake it is. Rules about values live in the
services; these check shape only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, overload

from django.utils import timezone
from rest_framework import serializers
from rest_framework.request import Request

from presets import services
from presets.exceptions import InvalidInput


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number, whole or not: "10" as a string, or true, is refused, not guessed."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: "yes", 1 or "false" as a string are refused, not guessed."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with its time zone: "06:00" alone is a different instant in every
    office, so it is refused rather than read as UTC."""

    default_error_messages = {
        "naive": "needs a time zone, e.g. 2026-11-29T06:00:00Z",
    }

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


class ReasonField(StrictCharField):
    """Type check only: the rule (stripped, 1..500 characters) lives in the services."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)


def expiry_from(data: dict[str, Any]) -> services.Expiry:
    if "duration_minutes" in data and "expires_at" in data:
        raise InvalidInput("duration_minutes", "send either duration_minutes or expires_at, not both")
    if "duration_minutes" in data:
        return timedelta(minutes=data["duration_minutes"])
    return data.get("expires_at")


@overload
def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int: ...
@overload
def int_param(request: Request, name: str, default: None, low: int, high: int | None) -> int | None: ...
def int_param(request: Request, name: str, default: int | None, low: int, high: int | None) -> int | None:
    """A whole-number query parameter within bounds (``default`` when absent)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(name, f"{raw!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"at least {low}"
        raise InvalidInput(name, f"must be {bounds}")
    return value
