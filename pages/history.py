"""The history pages (DESIGN §8): every change, newest first, filtered by chain, actor,
action and time, each with a one-click Restore.

The filters are a plain GET form, so a filtered list is a link one can paste into the incident
channel; its parameters are ``chain`` (``/history/`` only), ``actor``, ``action``, ``since``
and ``until`` (UTC), and the pages go on with ``older_than`` / ``newer_than`` (a history
row's id, see ``presets.history.history_page``). A bad parameter is an error on its field,
never a guess: the list is shown only for filters that mean what they say.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from audit import promotions, spend
from pages.display import is_shortening, restore_pin_version, restore_reason
from pages.layout import environment_of, live_card, live_or_404, render_page, viewer_required
from presets import environments, selectors, services
from presets.exceptions import InvalidInput
from presets.history import entry, history_count, history_page, oldest_page_cursor, recent_actors
from presets.history_filter import HistoryFilterForm
from presets.models import Selection

HISTORY_PAGE_SIZE = 25


@require_safe
@viewer_required
def chain_history(request: HttpRequest, name: str) -> HttpResponse:
    """Every change of one chain, newest first, each with a one-click restore."""
    live = live_or_404(request, name)
    return _history_page(request, lives={name: live}, chain=live)


@require_safe
@viewer_required
def all_history(request: HttpRequest) -> HttpResponse:
    """Every change of every chain of the page's environment, newest first."""
    selections = services.revert_expired_and_read_all(environment=environment_of(request))
    lives = {s.chain.name: s for s in selections}
    return _history_page(request, lives=lives, chain=None)


# --- the page -------------------------------------------------------------------------------


def _history_page(request: HttpRequest, *, lives: dict[str, Selection], chain: Selection | None) -> HttpResponse:
    now = timezone.now()
    environment = environment_of(request)
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
            page = history_page(
                chain=chain_name,
                environment=environment,
                filters=form.filters(),
                size=HISTORY_PAGE_SIZE,
                **cursor,
            )
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
        "actors": recent_actors(chain=chain_name, environment=environment),
        "refresh": "notice",
        # The promotions to and from the environment, with their evidence: its history of them.
        "promotions": promotions.promotions_of(environment, limit=20)
        if chain is None and environments.several()
        else [],
    }
    if page is None:  # the filter has errors: show them, and no list that would ignore them
        context.update(form=form, has_errors=True, cursor_errors=_cursor_errors(form))
        return render_page(request, "presets/history.html", context, status=400)
    chain_urls = {name: reverse("chain", args=[name]) for name in lives}  # once a chain, not once an entry
    # The incident of the pin each Restore brings back (or ends), for its prefilled reason: one read.
    pins: dict[int, tuple[int, int]] = {}
    for row in page.rows:
        version = restore_pin_version(row)
        if version is not None:
            pins[row.history_id] = (row.chain_id, version)
    pin_starts = selectors.pin_starts_at(pins.values())
    incidents = {row_id: pin_starts[key].reason for row_id, key in pins.items() if key in pin_starts}
    # A bounded count ("10,000+" beyond the cap) and the oldest page's cursor: two short reads
    # whatever the history's length (read on every page, so the cost never depends on it).
    count, more = history_count(chain=chain_name, environment=environment, filters=form.filters())
    oldest = oldest_page_cursor(
        chain=chain_name, environment=environment, filters=form.filters(), size=HISTORY_PAGE_SIZE
    )
    context.update(
        form=HistoryFilterForm(params, chains=chains),
        count_words=_count_words(count, more=more, filtered=bool(params)),
        filtered=bool(params),
        described=form.described(),
        items=[
            _history_item(row, changed, lives.get(row.chain.name), chain_urls, incident=incidents.get(row.history_id))
            # Each change with the chain's spend before and after it: one read for the page.
            for row, changed in zip(page.rows, spend.around_changes([entry(row) for row in page.rows]), strict=True)
        ],
        paged=bool(cursor),
        newest_url=_link(request, params),
        newer_url=_link(request, params, newer_than=page.newer_than) if page.newer_than else None,
        older_url=_link(request, params, older_than=page.older_than) if page.older_than else None,
        # Only off the oldest page: from there, Older is the way on and Oldest would be itself.
        oldest_url=_link(request, params, older_than=oldest) if oldest is not None and page.older_than else None,
    )
    return render_page(request, "presets/history.html", context)


def _link(request: HttpRequest, params: dict[str, str], **cursor: int) -> str:
    query = urlencode({**params, **cursor})
    return f"{request.path}?{query}" if query else request.path


def _count_words(count: int, *, more: bool, filtered: bool) -> str:
    """ "1,204 changes." or "10,000+ changes match these filters." """
    one = count == 1 and not more
    words = f"{count:,}{'+' if more else ''} change{'' if one else 's'}"
    if filtered:
        words += " matches these filters" if one else " match these filters"
    return f"{words}."


def _cursor_errors(form: HistoryFilterForm) -> list[str]:
    return [str(error) for name in ("older_than", "newer_than") for error in form.errors.get(name, [])]


def _history_item(
    row: Any,
    changed: spend.ExportedChange,
    live: Selection | None,
    chain_urls: dict[str, str],
    *,
    incident: str | None,
) -> dict[str, Any]:
    """One history row with what its Restore button would do (the service decides if it may),
    its reason prefilled with ``incident``, the reason of the pin the restore brings back or ends."""
    refusal = services.restore_refusal(
        chain=row.chain.name,
        version=row.version,
        previous=row.previous_preset,
        live_preset_id=live.preset_id if live is not None else None,
    )
    return {
        "entry": changed,
        "key": f"{row.chain.name}-{row.version}",  # the entry's restore form and reason input
        "chain_url": chain_urls.get(row.chain.name) or reverse("chain", args=[row.chain.name]),
        "restore_block": refusal.field_message if refusal is not None else None,
        "restore_reason": restore_reason(row, incident=incident) if refusal is None else "",
        # An "End the pin earlier" is recorded as an extend: its title says what it did.
        "action": "shorten" if is_shortening(row.action, row.expires_at, row.previous_expires_at) else row.action,
        "expected_version": live.version if live is not None else None,
        "is_live": live is not None and live.version == row.version,
    }
