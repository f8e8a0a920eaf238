"""The history pages (DESIGN §8): every change, newest first, filtered by chain, actor,
action and time, each with a one-click Restore.

The filters are a plain GET form, so a filtered list is a link one can paste into the incident
channel; its parameters are ``chain`` (``/history/`` only), ``actor``, ``action``, ``since``
and ``until`` (UTC), and the pages go on with ``older_than`` / ``newer_than`` (a history
row's id, see ``presets.history.history_page``). A bad parameter is an error on its field,
never a guess: the list is shown only for filters that mean what they say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlencode

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from pages.layout import live_card, live_or_404, render_page, viewer_required
from presets import selectors, services
from presets.exceptions import InvalidInput
from presets.history import HistoryFilter, entry, history_page, recent_actors
from presets.models import Action, Chain, Selection

HISTORY_PAGE_SIZE = 25
# A history row's id is a PostgreSQL integer: a cursor past it names no row.
CURSOR_MAX = 2**31 - 1
ACTOR_MAX = 150  # Selection.updated_by


@require_safe
@viewer_required
def chain_history(request: HttpRequest, name: str) -> HttpResponse:
    """Every change of one chain, newest first, each with a one-click restore."""
    live = live_or_404(name)
    return _history_page(request, lives={name: live}, chain=live)


@require_safe
@viewer_required
def all_history(request: HttpRequest) -> HttpResponse:
    """Every change of every chain, newest first."""
    lives = {s.chain.name: s for s in services.revert_expired_and_read_all()}
    return _history_page(request, lives=lives, chain=None)


# --- the filter form ------------------------------------------------------------------------


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


# --- the page -------------------------------------------------------------------------------


def _history_page(request: HttpRequest, *, lives: dict[str, Selection], chain: Selection | None) -> HttpResponse:
    now = timezone.now()
    chain_name = chain.chain.name if chain is not None else None
    chains = None if chain is not None else sorted(lives)
    form = HistoryFilterForm(request.GET, chains=chains)
    page = None
    if form.is_valid():
        params, cursor = form.query(), form.cursor()
        if dict(request.GET.lists()) != {name: [str(value)] for name, value in {**params, **cursor}.items()}:
            # The form sends its empty fields too, and people type times their own way: the
            # address to paste into the incident channel says the filters once, one way.
            return redirect(_link(request, params, **cursor))
        try:
            page = history_page(chain=chain_name, filters=form.filters(), **cursor, size=HISTORY_PAGE_SIZE)
        except InvalidInput as error:
            form.add_error(error.field, error.field_message)
    # No fleet figures (they cost queries a chain), and every pin's start in one read.
    starts = selectors.live_pin_starts(lives.values())
    strip = [live_card(s, now=now, fleet=False, pin_starts=starts) for s in lives.values()]
    context: dict[str, Any] = {
        "chain": chain,
        "lives": strip,
        "pinned": sum(1 for live in strip if live.selection.is_pinned),
        "stale": sum(1 for live in strip if live.is_stale),
        "actors": recent_actors(chain=chain_name),
        "refresh": "notice",
    }
    if page is None:  # the filter has errors: show them, and no list that would ignore them
        context.update(form=form, has_errors=True, cursor_errors=_cursor_errors(form))
        return render_page(request, "presets/history.html", context, status=400)
    chain_urls = {name: reverse("chain", args=[name]) for name in lives}  # once a chain, not once an entry
    context.update(
        form=HistoryFilterForm(params, chains=chains),
        filtered=bool(params),
        described=form.described(),
        items=[_history_item(row, lives.get(row.chain.name), chain_urls) for row in page.rows],
        paged=bool(cursor),
        newest_url=_link(request, params),
        newer_url=_link(request, params, newer_than=page.newer_than) if page.newer_than else None,
        older_url=_link(request, params, older_than=page.older_than) if page.older_than else None,
    )
    return render_page(request, "presets/history.html", context)


def _link(request: HttpRequest, params: dict[str, str], **cursor: int) -> str:
    query = urlencode({**params, **cursor})
    return f"{request.path}?{query}" if query else request.path


def _cursor_errors(form: HistoryFilterForm) -> list[str]:
    return [str(error) for name in ("older_than", "newer_than") for error in form.errors.get(name, [])]


def _history_item(row: Any, live: Selection | None, chain_urls: dict[str, str]) -> dict[str, Any]:
    """One history row with what its Restore button would do (the service decides if it may)."""
    refusal = services.restore_refusal(
        chain=row.chain.name,
        version=row.version,
        previous=row.previous_preset,
        live_preset_id=live.preset_id if live is not None else None,
    )
    return {
        "entry": entry(row),
        "key": f"{row.chain.name}-{row.version}",  # the entry's restore form and reason input
        "chain_url": chain_urls.get(row.chain.name) or reverse("chain", args=[row.chain.name]),
        "restore_block": refusal.field_message if refusal is not None else None,
        "restore_reason": f"undo v{row.version} ({row.action} of {row.preset.name} by {row.updated_by})",
        "expected_version": live.version if live is not None else None,
        "is_live": live is not None and live.version == row.version,
    }
