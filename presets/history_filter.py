"""The history filter's rules, one home for every interface that filters the history: the
history pages' form, the audit export's query parameters (``GET /api/v1/history``) and its
command options (``manage.py export_history``). Times in UTC as a date, a minute or an
instant, an ISO offset honoured, ``until`` up to the end of what was given; a bad value is an
error on its field that says how to fix it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django import forms

from presets.exceptions import InvalidInput
from presets.history import HistoryFilter
from presets.models import Action, Chain

# A history row's id is a PostgreSQL integer: a cursor past it names no row.
CURSOR_MAX = 2**31 - 1
ACTOR_MAX = 150  # Selection.updated_by

DAY, MINUTE, INSTANT = timedelta(days=1), timedelta(minutes=1), timedelta(microseconds=1)


@dataclass(frozen=True)
class GivenMoment:
    """A moment as someone gave it: when (UTC), and how much of it they gave (a day, a
    minute, or to the second), so "to 03:00" can mean up to the end of that minute."""

    at: datetime
    span: timedelta

    @property
    def end(self) -> datetime:
        """The first instant after what was given."""
        return self.at + self.span

    def __str__(self) -> str:
        """Its one spelling, in links and in the form (what a ``datetime-local`` input shows)."""
        if self.span == DAY:
            return self.at.date().isoformat()
        if self.span == MINUTE:
            return self.at.strftime("%Y-%m-%dT%H:%M")
        return self.at.strftime("%Y-%m-%dT%H:%M:%S.%f" if self.at.microsecond else "%Y-%m-%dT%H:%M:%S")


class UtcTimeField(forms.Field):
    """A moment in UTC as a person types it or a ``datetime-local`` input sends it:
    ``2026-11-30T02:00``, ``2026-11-30 02:00:30``, ``2026-11-30``; an ISO offset is honoured."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local", "step": "60"})
    default_error_messages = {
        "invalid": "not a date and time: use YYYY-MM-DDTHH:MM in UTC, e.g. 2026-11-30T02:00",
    }

    def to_python(self, value: Any) -> GivenMoment | None:
        text = str(value).strip() if value is not None else ""
        if not text:
            return None
        try:
            at = datetime.fromisoformat(text)
            if len(text) <= len("2026-11-30"):
                span = DAY
            elif at.second == 0 and at.microsecond == 0:
                span = MINUTE
            else:
                span = INSTANT
            at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
            if at > datetime.max.replace(tzinfo=UTC) - span:  # its end must exist too
                raise OverflowError
        except (ValueError, OverflowError):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None
        return GivenMoment(at, span)


class HistoryFilterForm(forms.Form):
    """Which changes to list. Every field is optional; together they narrow the list."""

    chain = forms.ChoiceField(
        required=False,
        label="Chain",
        error_messages={"invalid_choice": "no chain named %(value)s: pick one of the list"},
    )
    actor = forms.CharField(
        required=False,
        max_length=ACTOR_MAX,
        label="Changed by",
        help_text="A user name, token:NAME or system:expiry.",
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "autocapitalize": "off", "spellcheck": "false", "list": "history-actors"}
        ),
    )
    action = forms.ChoiceField(
        required=False,
        label="Action",
        choices=[("", "any action"), *((a.value, a.value) for a in Action)],
        error_messages={"invalid_choice": f"no action %(value)s: use one of {', '.join(Action.values)}"},
    )
    since = UtcTimeField(required=False, label="From (UTC)")
    until = UtcTimeField(required=False, label="To (UTC)", help_text="Up to and including this minute.")
    # Where the page starts; not in the form a person submits (new filters start at the newest).
    older_than = forms.IntegerField(required=False, min_value=1, max_value=CURSOR_MAX, widget=forms.HiddenInput)
    newer_than = forms.IntegerField(required=False, min_value=1, max_value=CURSOR_MAX, widget=forms.HiddenInput)

    def __init__(self, *args: Any, chains: list[str] | None, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "filter_%s")
        super().__init__(*args, **kwargs)
        if chains is None:  # one chain's page: the chain is the page's
            del self.fields["chain"]
        else:
            field = cast(forms.ChoiceField, self.fields["chain"])
            field.choices = [("", "every chain"), *((name, name) for name in chains)]

    def clean(self) -> dict[str, Any] | None:
        super().clean()
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        if since and until and until.end <= since.at:
            self.add_error("until", "is before From: swap them, or clear one")
        if data.get("older_than") and data.get("newer_than"):
            self.add_error("newer_than", "a page link has older_than or newer_than, not both")
        return data

    def filters(self) -> HistoryFilter:
        """The cleaned filter (``until`` made exclusive: up to the end of what was given)."""
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        return HistoryFilter(
            chain=data.get("chain") or None,
            actor=data.get("actor") or None,
            action=data.get("action") or None,
            since=since.at if since else None,
            until=until.end if until else None,
        )

    def query(self) -> dict[str, str]:
        """The filters as they go into links, in one spelling, empty ones left out."""
        data = self.cleaned_data
        return {name: str(data[name]) for name in ("chain", "actor", "action", "since", "until") if data.get(name)}

    def cursor(self) -> dict[str, int]:
        """Where the page starts (``older_than`` or ``newer_than``), if not at the newest."""
        return {name: self.cleaned_data[name] for name in ("older_than", "newer_than") if self.cleaned_data.get(name)}

    def described(self) -> list[str]:
        """The active filters in words, for the line above the list."""
        words = {"chain": "chain {}", "actor": "by {}", "action": "{} only", "since": "from {}", "until": "to {}"}
        params = self.query()
        for name in ("since", "until"):
            if name in params:
                params[name] = params[name].replace("T", " ") + " UTC"
        return [words[name].format(value) for name, value in params.items()]


# --- the same filter as parameters (the audit export's API and command) --------------------

FILTER_PARAMETERS = ("chain", "actor", "action", "since", "until")


class FilterParameters(HistoryFilterForm):
    """The pages' filter given as query parameters or command options: the same fields and
    rules, the errors worded for someone who typed the parameters' names."""

    def __init__(self, data: Mapping[str, str], *, chains: list[str]) -> None:
        super().__init__(data, chains=chains)
        del self.fields["older_than"], self.fields["newer_than"]
        known = ", ".join(chains) or "none yet"
        self.fields["chain"].error_messages["invalid_choice"] = f"no chain named %(value)s: use one of {known}"

    def clean(self) -> dict[str, Any] | None:
        # The pages' rule on the time window, worded by the parameters (the page's names its
        # labels, "From" and "To"); the pages' cursors are not parameters here.
        data = forms.Form.clean(self)
        since, until = self.cleaned_data.get("since"), self.cleaned_data.get("until")
        if since and until and until.end <= since.at:
            self.add_error("until", "is before since: swap them, or drop one")
        return data


def filter_from(values: Mapping[str, str | None]) -> HistoryFilter:
    """The filter that ``values`` (``FILTER_PARAMETERS``; a missing or empty one is "any")
    give by the history pages' rules: times in UTC as a date, a minute or an instant, an ISO
    offset honoured, ``until`` up to the end of what was given. The first bad value raises
    ``InvalidInput`` on its name, with how to fix it."""
    chains = list(Chain.objects.order_by("name").values_list("name", flat=True))
    form = FilterParameters({name: value for name, value in values.items() if value is not None}, chains=chains)
    if not form.is_valid():
        name, errors = next(iter(form.errors.items()))
        raise InvalidInput(name, str(errors[0]))
    return form.filters()
