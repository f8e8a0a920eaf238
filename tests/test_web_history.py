"""The history pages through Django's test client: each filter and their combinations, bad
filter input as a field error (never a 500), paging that keeps the filters, the empty state,
Restore from a filtered list, and a query count that does not grow with the history."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from presets import history, services
from presets.history import HISTORY_COUNT_CAP
from presets.models import Selection

pytestmark = pytest.mark.usefixtures("synced")

DAY = datetime(2030, 1, 1, tzinfo=UTC)
SUMMARY = "incident-summary"


def at(clock: str) -> datetime:
    hours, minutes = clock.split(":")
    return DAY.replace(hour=int(hours), minute=int(minutes))


@pytest.fixture
def story(synced: None) -> None:
    """A night on two chains (the example presets synced them as v1, by system:sync, today):

    chat  v2 select pin_secondary by alice 02:00, v3 extend by alice 02:30, v4 revert by
          carol 03:00, v5 restore (of v4) by dave 03:30, v6 expire by system:expiry 08:00
    incident-summary  v2 select local_only by carol 02:15, v3 revert by alice 02:45
    """
    changes = [
        ("02:00", lambda: services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")),
        (
            "02:15",
            lambda: services.select_preset(chain="incident-summary", preset="local_only", actor="carol", reason="r"),
        ),
        ("02:30", lambda: services.extend_pin(chain="chat", actor="alice", reason="still down")),
        ("02:45", lambda: services.revert_to_default(chain=SUMMARY, actor="alice", reason="fine")),
        ("03:00", lambda: services.revert_to_default(chain="chat", actor="carol", reason="looked fine")),
        ("03:30", lambda: services.restore(chain="chat", version=4, actor="dave", reason="not fine")),
        ("08:00", lambda: services.expire_pins()),
    ]
    for clock, change in changes:
        with time_machine.travel(at(clock), tick=False):
            change()


def entries(html: str) -> list[str]:
    """The ids of the listed entries, in order."""
    return re.findall(r'<li class="entry [^"]*" id="([^"]+)"', html)


def get(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url, follow=True)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def link(html: str, text: str) -> str | None:
    found = re.search(rf'<a class="button button-secondary" href="([^"]+)"[^>]*>{text}</a>', html)
    return unescape(found.group(1)) if found else None


# --- each filter ------------------------------------------------------------------------------


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["chat-v6", "chat-v5", "chat-v4", "incident-summary-v3", "chat-v3", "incident-summary-v2", "chat-v2"]),
        ("chain=incident-summary", ["incident-summary-v3", "incident-summary-v2", "incident-summary-v1"]),
        ("actor=alice", ["incident-summary-v3", "chat-v3", "chat-v2"]),
        ("actor=system:expiry", ["chat-v6"]),
        ("actor=Alice", []),
        ("action=select", ["incident-summary-v2", "chat-v2"]),
        ("action=revert", ["chat-v4", "incident-summary-v3"]),
        ("action=extend", ["chat-v3"]),
        ("action=restore", ["chat-v5"]),
        ("action=expire", ["chat-v6"]),
        ("action=sync", ["incident-summary-v1", "chat-v1"]),
        ("since=2030-01-01T02:30", ["chat-v6", "chat-v5", "chat-v4", "incident-summary-v3", "chat-v3"]),
        ("until=2030-01-01T02:15", ["incident-summary-v2", "chat-v2", "incident-summary-v1", "chat-v1"]),
        ("until=2029-12-31", ["incident-summary-v1", "chat-v1"]),
        ("since=2030-01-01T04:30%2B01:00", ["chat-v6", "chat-v5"]),
        ("since=2030-01-01+03:00:01", ["chat-v6", "chat-v5"]),
    ],
    ids=[
        "none",
        "chain",
        "actor",
        "actor-system",
        "actor-is-exact",
        "select",
        "revert",
        "extend",
        "restore",
        "expire",
        "sync",
        "since",
        "until-takes-its-whole-minute",
        "until-a-day-takes-the-whole-day",
        "since-with-an-offset",
        "since-to-the-second",
    ],
)
def test_each_filter_lists_only_its_changes_newest_first(oncall: Client, query: str, expected: list[str]) -> None:
    listed = entries(get(oncall, f"/history/?{query}"))
    if query:
        assert listed == expected
    else:  # the v1s were written today, before the story's (future) night
        assert listed[: len(expected)] == expected


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/history/?actor=alice&action=revert", ["incident-summary-v3"]),
        ("/history/?chain=chat&actor=alice", ["chat-v3", "chat-v2"]),
        ("/history/?chain=incident-summary&action=select&since=2030-01-01T02:00", ["incident-summary-v2"]),
        ("/history/?since=2030-01-01T02:00&until=2030-01-01T02:30", ["chat-v3", "incident-summary-v2", "chat-v2"]),
        ("/history/?actor=carol&action=select&until=2030-01-01T02:00", []),
        ("/chains/chat/history/?actor=carol", ["chat-v4"]),
        ("/chains/chat/history/?actor=alice&action=extend", ["chat-v3"]),
        ("/chains/chat/history/?action=revert&since=2030-01-01T03:00&until=2030-01-01T03:00", ["chat-v4"]),
        ("/chains/incident-summary/history/?actor=alice", ["incident-summary-v3"]),
    ],
    ids=[
        "actor-action",
        "chain-actor",
        "chain-action-since",
        "a-time-window",
        "nothing-matches-all-three",
        "one-chain-actor",
        "one-chain-actor-action",
        "one-chain-action-window",
        "the-other-chain",
    ],
)
def test_filters_combine(oncall: Client, url: str, expected: list[str]) -> None:
    assert entries(get(oncall, url)) == expected


@pytest.mark.usefixtures("story")
def test_one_chains_page_filters_without_a_chain_field(oncall: Client) -> None:
    html = get(oncall, "/chains/chat/history/?action=sync")
    assert entries(html) == ["chat-v1"]
    assert 'name="chain"' not in html
    assert 'name="chain"' in get(oncall, "/history/")


@pytest.mark.usefixtures("story")
def test_the_form_shows_the_filters_in_one_spelling_and_says_what_is_on(oncall: Client) -> None:
    html = get(oncall, "/history/?since=2030-01-01+02:00&actor=alice")
    assert re.search(r'<input type="datetime-local" name="since" value="2030-01-01T02:00"[^>]*id="filter_since"', html)
    assert 'value="alice"' in html
    assert "Only by alice · from 2030-01-01 02:00 UTC." in html
    assert '<a href="/history/">Clear filters</a>' in html


@pytest.mark.parametrize(
    ("query", "canonical"),
    [
        ("chain=&actor=alice&action=&since=&until=", "actor=alice"),
        ("since=2030-01-01+02:00", "since=2030-01-01T02%3A00"),
        ("until=2030-01-01T04:30%2B01:00", "until=2030-01-01T03%3A30"),
        ("action=select&page=2", "action=select"),
        ("chain=chat&chain=incident-summary", "chain=incident-summary"),
    ],
    ids=["the-form-s-empty-fields", "a-space-for-the-t", "an-offset", "an-old-page-number", "a-repeated-filter"],
)
def test_the_address_says_the_filters_once_in_one_spelling(oncall: Client, query: str, canonical: str) -> None:
    response = oncall.get(f"/history/?{query}")
    assert response.status_code == 302 and response["Location"] == f"/history/?{canonical}"
    assert oncall.get(response["Location"]).status_code == 200


@pytest.mark.usefixtures("story")
def test_the_actor_field_suggests_who_changed_things_lately(oncall: Client) -> None:
    html = get(oncall, "/history/")
    datalist = html.split('<datalist id="history-actors">')[1].split("</datalist>")[0]
    assert re.findall(r'<option value="([^"]+)">', datalist) == [
        "system:expiry",
        "dave",
        "carol",
        "alice",
        "system:sync",
    ]


@pytest.mark.usefixtures("story")
def test_a_filter_that_matches_nothing_says_so(oncall: Client) -> None:
    html = get(oncall, "/history/?actor=nobody")
    assert entries(html) == []
    assert 'No changes match these filters. <a href="/history/">Clear filters</a>' in html
    assert "No changes yet" not in html


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("since=yesterday", "since", "From (UTC): not a date and time: use YYYY-MM-DDTHH:MM in UTC"),
        ("until=2030-13-01T00:00", "until", "To (UTC): not a date and time"),
        ("until=9999-12-31", "until", "To (UTC): not a date and time"),
        ("since=2030-01-01T03:00&until=2030-01-01T02:00", "until", "To (UTC): is before From"),
        ("action=delete", "action", "Action: no action delete: use one of select, revert, extend, restore"),
        ("chain=nope", "chain", "Chain: no chain named nope: pick one of the list"),
        ("actor=" + "x" * 151, "actor", "Changed by: Ensure this value has at most 150 characters"),
    ],
    ids=["unparseable-date", "no-13th-month", "past-the-end-of-time", "until-before-since", "action", "chain", "actor"],
)
def test_a_bad_filter_is_an_error_on_its_field_and_lists_nothing(
    oncall: Client, query: str, field: str, message: str
) -> None:
    html = get(oncall, f"/history/?{query}", status=400)
    alert = html.split('role="alert"')[1].split("</div>")[0]
    assert f'<a href="#filter_{field}">{message}' in unescape(alert)
    control = re.search(rf'<(?:input|select)[^>]*id="filter_{field}"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in control
    assert f'id="filter_{field}_error"' in html
    assert '<details class="filters" open>' in html  # the form is open, with the error
    assert entries(html) == [] and '<ol class="history">' not in html
    assert "No changes are listed until the filter is fixed." in html


@pytest.mark.usefixtures("story")
@pytest.mark.parametrize(
    "query",
    ["older_than=abc", "older_than=0", "newer_than=99999999999", "older_than=2147483647", "older_than=1&newer_than=2"],
    ids=["not-a-number", "zero", "too-big", "no-such-row", "both"],
)
def test_a_bad_page_link_is_an_error_with_a_way_back(oncall: Client, query: str) -> None:
    html = get(oncall, f"/history/?{query}", status=400)
    alert = html.split('role="alert"')[1].split("</div>")[0]
    assert "Page link: " in alert and '<a href="/history/">Newest changes</a>' in alert
    assert entries(html) == []


@pytest.mark.usefixtures("story")
def test_a_page_link_of_another_chain_is_refused_on_a_chains_page(oncall: Client) -> None:
    other = Selection.history.get(chain__name="incident-summary", version=2).history_id
    html = get(oncall, f"/chains/chat/history/?older_than={other}", status=400)
    assert "names no change of this list" in html


# --- paging ------------------------------------------------------------------------------------


def rounds(count: int) -> None:
    """``count`` pins by alice, each reverted by carol: chat v2..v(2 count + 1)."""
    for n in range(count):
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=f"round {n}")
        services.revert_to_default(chain="chat", actor="carol", reason=f"back {n}")


def versions(html: str) -> list[int]:
    return [int(entry.rsplit("-v", 1)[1]) for entry in entries(html)]


def test_paging_keeps_the_filters_older_and_newer(oncall: Client) -> None:
    rounds(30)  # alice: v2, v4, ... v60
    first = get(oncall, "/history/?actor=alice")
    assert versions(first) == list(range(60, 10, -2))
    assert link(first, "Newer") is None and link(first, "Newest") is None
    older = link(first, "Older")
    assert older is not None and older.startswith("/history/?actor=alice&older_than=")
    second = get(oncall, older)
    assert versions(second) == [10, 8, 6, 4, 2]
    assert link(second, "Older") is None
    assert link(second, "Newest") == "/history/?actor=alice"
    newer = link(second, "Newer")
    assert newer is not None and "actor=alice" in newer
    assert versions(get(oncall, newer)) == versions(first)


def test_oldest_goes_to_the_first_changes_and_each_page_says_how_many_match(oncall: Client) -> None:
    rounds(30)  # chat v1..v61, incident-summary v1; alice made chat v2, v4, ... v60
    first = get(oncall, "/chains/chat/history/")
    assert "61 changes." in first
    oldest = link(first, "Oldest")
    assert oldest is not None and oldest.startswith("/chains/chat/history/?older_than=")
    last = get(oncall, oldest)
    assert versions(last) == list(range(25, 0, -1))  # a full page: the 25 oldest
    assert link(last, "Oldest") is None and link(last, "Older") is None
    assert versions(get(oncall, link(last, "Newer") or "")) == list(range(50, 25, -1))
    assert link(last, "Newest") == "/chains/chat/history/"

    filtered = get(oncall, "/history/?actor=alice")
    assert "30 changes match these filters." in filtered
    oldest = link(filtered, "Oldest")
    assert oldest is not None and oldest.startswith("/history/?actor=alice&older_than=")
    assert versions(get(oncall, oldest)) == list(range(50, 0, -2))


def test_a_list_that_fits_one_page_has_no_oldest_and_counts_one_change_in_the_singular(oncall: Client) -> None:
    html = get(oncall, "/chains/chat/history/")
    assert "1 change." in html
    assert link(html, "Oldest") is None and link(html, "Older") is None
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-9")
    assert "1 change matches these filters." in get(oncall, "/history/?actor=alice")


def test_the_count_stops_at_its_cap_and_says_so(oncall: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "HISTORY_COUNT_CAP", 10)
    rounds(6)  # chat v1..v13, incident-summary v1
    html = get(oncall, "/history/")
    assert "10+ changes." in html
    assert "14 changes" not in html
    assert "6 changes match these filters." in get(oncall, "/history/?actor=alice")


def test_one_chains_pages_go_by_version_to_the_first(oncall: Client) -> None:
    rounds(30)  # chat v1..v61
    pages = [get(oncall, "/chains/chat/history/")]
    while (older := link(pages[-1], "Older")) is not None:
        pages.append(get(oncall, older))
    assert [versions(p) for p in pages] == [
        list(range(61, 36, -1)),
        list(range(36, 11, -1)),
        list(range(11, 0, -1)),
    ]
    back = link(pages[2], "Newer")
    assert back is not None and versions(get(oncall, back)) == versions(pages[1])


def test_a_newer_page_near_the_top_is_the_newest_page(oncall: Client) -> None:
    rounds(15)  # chat v1..v31
    first = get(oncall, "/chains/chat/history/")
    second = get(oncall, link(first, "Older"))
    assert versions(second) == list(range(6, 0, -1))

    def newer_than(version: int) -> list[int]:
        row = Selection.history.get(chain__name="chat", version=version).history_id
        return versions(get(oncall, f"/chains/chat/history/?newer_than={row}"))

    assert newer_than(3) == list(range(28, 3, -1))  # the page just above v3
    # Fewer than a page above v10: the newest page, whole, not a short one.
    assert newer_than(10) == versions(first)


# --- restore, roles ------------------------------------------------------------------------------


def test_restore_works_from_a_filtered_list(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason="INC-2")
    services.revert_to_default(chain="chat", actor="carol", reason="looked fine")
    html = get(oncall, "/chains/chat/history/?action=revert")
    assert entries(html) == ["chat-v3"]
    entry = html.split('id="chat-v3"')[1].split("</li>")[0]
    assert 'action="/chains/chat/history/3/restore"' in entry and 'id="restore-form-chat-3"' in entry
    assert 'form="restore-form-chat-3" value="INC-2 — restored v2 (undo v3, revert by carol)"' in entry
    assert "Restore pin_secondary…" in entry
    data = {"reason": "INC-2 — restored v2 (undo v3, revert by carol)", "expected_version": "3"}
    assert oncall.post("/chains/chat/history/3/restore", data, follow=True).status_code == 200  # the review
    done = oncall.post("/chains/chat/history/3/restore", {**data, "confirmed": "yes"})
    assert done.status_code == 302
    live = Selection.objects.get(chain__name="chat")
    assert (live.version, live.action, live.preset.name) == (4, "restore", "pin_secondary")


@pytest.mark.usefixtures("story")
def test_a_viewer_filters_too_but_gets_no_restore(viewer: Client) -> None:
    html = get(viewer, "/history/?actor=alice")
    assert entries(html) == ["incident-summary-v3", "chat-v3", "chat-v2"]
    assert "restore-form" not in html and "Reason for restoring" not in html


# --- cost --------------------------------------------------------------------------------------


def queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        get(client, url)
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.parametrize(
    "url",
    [
        "/history/",
        "/history/?actor=alice&action=select&since=2020-01-01T00:00",
        "/chains/chat/history/",
        "/chains/chat/history/?action=revert&until=2100-01-01",
        "/",
    ],
    ids=["all", "all-filtered", "one-chain", "one-chain-filtered", "dashboard"],
)
def test_the_query_count_does_not_grow_with_the_history(oncall: Client, url: str) -> None:
    # A few changes of each action first: every filtered page lists one (a page that lists none
    # has no spend to read around its changes, one query less).
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="first")
    services.revert_to_default(chain="chat", actor="carol", reason="back")
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="first again")
    few = queries(oncall, url)
    services.revert_to_default(chain="chat", actor="carol", reason="back")
    rounds(30)
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="pinned again")
    many = queries(oncall, url)
    assert few and len(many) == len(few), "\n".join(many)
    counts = [q for q in many if "COUNT(" in q and "historicalselection" in q]
    assert all(f"LIMIT {HISTORY_COUNT_CAP + 1}" in q for q in counts), "no count over the whole history"
    assert len(counts) == (url != "/"), "the history pages count what matches, capped"


@pytest.mark.parametrize("url", ["/", "/history/", "/chains/chat/history/"], ids=["dashboard", "all", "one-chain"])
def test_the_query_count_does_not_grow_with_the_pinned_chains(oncall: Client, url: str) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="first")
    one = queries(oncall, url)
    services.select_preset(chain="incident-summary", preset="local_only", actor="alice", reason="second")
    both = queries(oncall, url)
    assert len(both) == len(one), "\n".join(both)


def test_a_deep_page_costs_two_queries_more_than_the_first(oncall: Client) -> None:
    rounds(30)
    first = get(oncall, "/history/")
    second = link(first, "Older")
    # Two more: the cursor's row, and whether anything is newer than the page.
    assert len(queries(oncall, second)) == len(queries(oncall, "/history/")) + 2
