"""Planned pins on the on-call pages, through Django's test client: planning on the chain page
(times in UTC or a named zone, stored as the UTC instant), refusals on their field with nothing
written, the chain's plans with their state, times and history, change, cancel and start
anyway, what a viewer sees and may not do, the dashboard's next plan and a suspended plan's
alert with its way to settle it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
import time_machine
from django.test import Client

from audit.models import Alert, AlertKind
from presets import plans, services
from presets.models import PlanEvent, PlannedPin, Selection

pytestmark = pytest.mark.usefixtures("synced")

# A Wednesday; the US clocks go forward on Sunday 2027-03-14 at 02:00 (EST -> EDT).
T0 = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
REASON = "CHG-812 vendor_a maintenance window"


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    """Every test at T0, before anyone signs in (a session lasts hours, not months)."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))).strip()


def field_error(html: str, field_id: str) -> str:
    """The error shown at the field ``field_id``, as words ("" when none)."""
    match = re.search(rf'<p class="field-error" id="{field_id}_error">(.*?)</p>', html, re.S)
    return text(match.group(1)) if match else ""


def plan_data(**fields: str) -> dict[str, str]:
    return {
        "preset": "pin_secondary",
        "zone": "UTC",
        "starts_at": "2027-03-11T02:00",
        "ends_at": "2027-03-11T04:00",
        "reason": REASON,
        **fields,
    }


def planned(
    starts_at: datetime = T0 + timedelta(hours=14), hours: int = 2, preset: str = "pin_secondary", chain: str = "chat"
) -> PlannedPin:
    return plans.plan_pin(
        chain=chain,
        preset=preset,
        starts_at=starts_at,
        ends_at=starts_at + timedelta(hours=hours),
        actor="alice",
        reason=REASON,
    )


def suspended(clock: Any) -> PlannedPin:
    """A plan of pin_secondary from T0+1h, suspended at its start: carol pinned drop_vendor_b
    after it was planned."""
    held = planned(T0 + timedelta(hours=1))
    services.select_preset(
        chain="chat",
        preset="drop_vendor_b",
        actor="carol",
        reason="INC-9 vendor_b leaks",
        expires_at=timedelta(hours=4),
    )
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    assert plans.run_plans().suspended == [held.pk]
    held.refresh_from_db()
    return held


def chain_page(client: Client, url: str = "/chains/chat/") -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


# --- planning ------------------------------------------------------------------------------------


def test_planning_through_the_form_stores_the_plan_and_shows_it_on_the_chain_page(oncall: Client, clock: Any) -> None:
    response = oncall.post("/chains/chat/plans", plan_data())

    held = PlannedPin.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/chains/chat/#plan-{held.pk}"
    assert (held.preset.name, held.planned_by, held.reason, held.state) == ("pin_secondary", "alice", REASON, "planned")
    assert (held.starts_at, held.ends_at) == (
        datetime(2027, 3, 11, 2, tzinfo=UTC),
        datetime(2027, 3, 11, 4, tzinfo=UTC),
    )
    assert live().version == 1  # nothing is live until its start

    html = chain_page(oncall)
    assert f"Planned pin #{held.pk} on chat: at 02:00 UTC Thu 2027-03-11: pin_secondary until 04:00 UTC" in text(html)
    item = text(re.search(rf'<li class="plan plan-planned" id="plan-{held.pk}".*?</li>\s*</ol>', html, re.S).group())
    assert f"Plan #{held.pk} pin_secondary planned" in item
    assert f"At 02:00 UTC Thu 2027-03-11: pin_secondary until 04:00 UTC, planned by alice because {REASON}" in item
    assert '<dt>Starts</dt><dd><time datetime="2027-03-11T02:00:00Z">Thu 11 Mar 02:00 UTC</time>' in html
    assert '<dt>Ends</dt><dd><time datetime="2027-03-11T04:00:00Z">Thu 11 Mar 04:00 UTC</time>' in html
    assert f"planned by alice, Wed 10 Mar 12:00 UTC: {REASON}" in item
    # Each time also carries its instant, for the script to show it on the browser's clock.
    assert 'data-local="2027-03-11T02:00:00Z"' in html and 'data-local="2027-03-11T04:00:00Z"' in html


@pytest.mark.parametrize(
    ("zone", "starts_at", "ends_at", "stored"),
    [
        ("UTC", "2027-03-14T01:00", "2027-03-14T04:00", ("2027-03-14T01:00:00Z", "2027-03-14T04:00:00Z")),
        # Across the US change: 01:00 EST is 06:00 UTC, 04:00 EDT is 08:00 UTC (two hours, not three).
        (
            "America/New_York",
            "2027-03-14T01:00",
            "2027-03-14T04:00",
            ("2027-03-14T06:00:00Z", "2027-03-14T08:00:00Z"),
        ),
        ("Europe/Paris", "2027-03-14T01:00", "2027-03-14T04:00", ("2027-03-14T00:00:00Z", "2027-03-14T03:00:00Z")),
        # An offset typed with the time is taken as it says, whatever the zone.
        (
            "America/New_York",
            "2027-03-14T01:00+00:00",
            "2027-03-14T04:00Z",
            ("2027-03-14T01:00:00Z", "2027-03-14T04:00:00Z"),
        ),
    ],
    ids=["utc", "new-york-across-dst", "paris", "offset-typed"],
)
def test_times_are_read_on_the_chosen_clock_and_stored_as_their_utc_instant(
    oncall: Client, clock: Any, zone: str, starts_at: str, ends_at: str, stored: tuple[str, str]
) -> None:
    response = oncall.post("/chains/chat/plans", plan_data(zone=zone, starts_at=starts_at, ends_at=ends_at))

    assert response.status_code == 302
    held = PlannedPin.objects.get()
    assert (plans.plan_entry(held)["starts_at"][:19] + "Z", plans.plan_entry(held)["ends_at"][:19] + "Z") == stored


def test_without_a_zone_the_times_are_utc(oncall: Client, clock: Any) -> None:
    data = plan_data()
    del data["zone"]
    assert oncall.post("/chains/chat/plans", data).status_code == 302
    assert PlannedPin.objects.get().starts_at == datetime(2027, 3, 11, 2, tzinfo=UTC)


def test_the_plan_form_offers_the_chains_other_presets_and_utc_as_its_clock(oncall: Client, clock: Any) -> None:
    html = chain_page(oncall)
    form = re.search(r'<form method="post" action="/chains/chat/plans".*?</form>', html, re.S).group()
    assert re.findall(r'<option value="([\w-]*)"', form) == ["", "drop_vendor_b", "local_only", "pin_secondary", "UTC"]
    assert ">local_only (degraded)</option>" in form
    assert 'type="datetime-local"' in form and "data-plan-times" in form and "data-unbound" in form
    assert 'Start <span class="zone-name" data-zone-name>in UTC</span>' in form


# --- refusals: at their field, nothing written ----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field_id", "error"),
    [
        ({"starts_at": "2027-03-10T11:00"}, "plan_starts_at", "is not in the future: to pin now, select the preset"),
        ({"ends_at": "2027-03-11T01:00"}, "plan_ends_at", "is not after the start"),
        ({"ends_at": "2027-03-12T03:00"}, "plan_ends_at", "longer than the longest pin of 1440"),
        ({"starts_at": "2027-07-01T02:00", "ends_at": "2027-07-01T03:00"}, "plan_starts_at", "more than 90 days ahead"),
        ({"preset": "normal"}, "plan_preset", "'normal' is chat's default"),
        ({"preset": "nope"}, "plan_preset", "'nope' does not exist on chat: use one of"),
        ({"reason": "  "}, "plan_reason", "required"),
        ({"starts_at": "tomorrow"}, "plan_starts_at", "not a date and time: use YYYY-MM-DDTHH:MM"),
        ({"ends_at": ""}, "plan_ends_at", "give the end"),
        ({"zone": "Mars/Olympus_Mons"}, "plan_zone", "no time zone named 'Mars/Olympus_Mons'"),
        (
            {"zone": "America/New_York", "starts_at": "2027-03-14T02:30", "ends_at": "2027-03-14T04:00"},
            "plan_starts_at",
            "02:30 does not exist on Sun 14 Mar 2027 in America/New_York: the clocks go forward then",
        ),
        (
            {"zone": "America/New_York", "starts_at": "2027-03-14T00:30", "ends_at": "2026-11-01T01:30"},
            "plan_ends_at",
            "01:30 happens twice on Sun 01 Nov 2026 in America/New_York (the clocks go back then): give it in UTC",
        ),
    ],
    ids=[
        "past-start",
        "end-before-start",
        "too-long",
        "too-far-ahead",
        "the-default",
        "unknown-preset",
        "blank-reason",
        "not-a-time",
        "no-end",
        "unknown-zone",
        "skipped-by-the-clock",
        "shown-twice-by-the-clock",
    ],
)
def test_a_refused_plan_shows_why_at_its_field_and_writes_nothing(
    oncall: Client, clock: Any, fields: dict[str, str], field_id: str, error: str
) -> None:
    response = oncall.post("/chains/chat/plans", plan_data(**fields), follow=True)

    assert response.status_code == 400
    html = response.content.decode()
    assert error in field_error(html, field_id), text(html)[:2000]
    assert "Nothing was planned. Fix this and try again" in text(html)
    assert (PlannedPin.objects.count(), PlanEvent.objects.count(), live().version) == (0, 0, 1)
    # What was typed is kept, on the clock it was typed on.
    assert f'value="{REASON}"' in html or fields.get("reason")
    zone = fields.get("zone", "UTC")
    assert re.search(rf'<option value="{re.escape(zone)}" selected>', html)


def test_an_overlapping_plan_is_refused_at_the_start_naming_the_other(oncall: Client, clock: Any) -> None:
    other = planned(datetime(2027, 3, 11, 3, tzinfo=UTC))

    response = oncall.post("/chains/chat/plans", plan_data(preset="local_only"), follow=True)

    assert response.status_code == 400
    error = field_error(response.content.decode(), "plan_starts_at")
    assert error.startswith(f"overlaps plan #{other.pk} (planned: pin_secondary from ") and "planned by alice" in error
    assert list(PlannedPin.objects.values_list("pk", flat=True)) == [other.pk]


def test_a_refusal_is_shown_by_a_get_so_back_never_sends_the_post_again(oncall: Client, clock: Any) -> None:
    posted = oncall.post("/chains/chat/plans", plan_data(ends_at="2027-03-11T01:00"))

    assert posted.status_code == 302 and posted["Location"].startswith("/chains/chat/plans?review=")
    again = oncall.get(posted["Location"])
    assert again.status_code == 400 and "is not after the start" in again.content.decode()
    assert PlannedPin.objects.count() == 0


def test_a_plan_sent_after_the_session_expired_is_filled_in_again_once_signed_in(
    client: Client, alice: Any, clock: Any
) -> None:
    sent = client.post("/chains/chat/plans", plan_data(zone="America/New_York"))
    login = sent["Location"]
    assert login.startswith("/accounts/login/?next=/chains/chat/plans")

    signed_in = client.post(
        login, {"username": "alice", "password": "alice-pass-123", "next": "/chains/chat/plans"}, follow=True
    )

    assert signed_in.redirect_chain[-1] == ("/chains/chat/", 302)
    html = signed_in.content.decode()
    assert "Nothing was changed on chat: your session had expired" in text(html)
    form = re.search(r'<form method="post" action="/chains/chat/plans".*?</form>', html, re.S).group()
    assert f'value="{REASON}"' in form and 'value="2027-03-11T02:00"' in form
    # On the clock it was typed on: the script leaves a form filled in as it is.
    assert '<option value="America/New_York" selected>' in form and "data-unbound" not in form
    assert re.search(r'<input type="text" name="reason"[^>]*autofocus[^>]*id="plan_reason"', form)
    assert PlannedPin.objects.count() == 0


def test_a_get_of_a_plan_url_changes_nothing_and_lands_on_the_chain_page(oncall: Client, clock: Any) -> None:
    held = planned()
    for url in ("/chains/chat/plans", f"/chains/chat/plans/{held.pk}/cancel", f"/chains/chat/plans/{held.pk}/start"):
        response = oncall.get(url, follow=True)
        assert response.redirect_chain == [("/chains/chat/", 302)], url
        assert "Nothing was changed" in response.content.decode()
    held.refresh_from_db()
    assert held.state == "planned"


def test_an_unknown_plan_or_chain_is_not_found(oncall: Client, clock: Any) -> None:
    held = planned()
    assert oncall.post("/chains/chat/plans/999/cancel", {"reason": "r"}).status_code == 404
    # A plan is found on its own chain only.
    assert oncall.post(f"/chains/incident-summary/plans/{held.pk}/cancel", {"reason": "r"}).status_code == 404
    assert oncall.post("/chains/nope/plans", plan_data()).status_code == 404


# --- cancel, change, start anyway ---------------------------------------------------------------


def test_cancelling_a_plan_asks_why_and_records_it(oncall: Client, clock: Any) -> None:
    held = planned()

    blank = oncall.post(f"/chains/chat/plans/{held.pk}/cancel", {"reason": ""}, follow=True)
    assert blank.status_code == 400
    assert "required" in field_error(blank.content.decode(), f"plan{held.pk}_cancel_reason")
    assert f'<details class="plan-action" id="plan-{held.pk}-cancel" open>' in blank.content.decode()
    held.refresh_from_db()
    assert held.state == "planned"

    done = oncall.post(f"/chains/chat/plans/{held.pk}/cancel", {"reason": "CHG-812 postponed"}, follow=True)
    assert done.redirect_chain == [(f"/chains/chat/#plan-{held.pk}", 302)]
    assert f"Plan #{held.pk} on chat cancelled: it will not start." in text(done.content.decode())
    held.refresh_from_db()
    assert (held.state, held.state_reason) == ("cancelled", "cancelled by alice: CHG-812 postponed")
    html = done.content.decode()
    assert f'<li class="plan plan-cancelled" id="plan-{held.pk}"' in html
    assert "cancelled by alice, Wed 10 Mar 12:00 UTC: CHG-812 postponed" in text(html)
    assert f'action="/chains/chat/plans/{held.pk}/' not in html  # nothing left to do to it


def test_changing_a_plan_moves_its_window_and_says_so(oncall: Client, clock: Any) -> None:
    held = planned()
    html = chain_page(oncall)
    # The change form is prefilled with the plan, in UTC, with its instants for the script.
    form = re.search(rf'action="/chains/chat/plans/{held.pk}/change".*?</form>', html, re.S).group()
    assert 'value="2027-03-11T02:00"' in form and 'data-instant="2027-03-11T02:00:00Z"' in form
    assert re.search(r'<option value="pin_secondary" selected>', form)

    response = oncall.post(
        f"/chains/chat/plans/{held.pk}/change",
        plan_data(
            preset="drop_vendor_b",
            zone="America/New_York",
            starts_at="2027-03-14T01:00",
            ends_at="2027-03-14T04:00",
            reason="CHG-812 moved to Sunday",
        ),
        follow=True,
    )

    assert response.redirect_chain == [(f"/chains/chat/#plan-{held.pk}", 302)]
    held.refresh_from_db()
    assert (held.preset.name, held.starts_at, held.ends_at) == (
        "drop_vendor_b",
        datetime(2027, 3, 14, 6, tzinfo=UTC),
        datetime(2027, 3, 14, 8, tzinfo=UTC),
    )
    words = text(response.content.decode())
    assert f"Plan #{held.pk} changed: at 06:00 UTC Sun 2027-03-14: drop_vendor_b until 08:00 UTC" in words
    assert "changed by alice, Wed 10 Mar 12:00 UTC: CHG-812 moved to Sunday" in words


def test_a_refused_change_shows_why_at_the_field_of_that_plan(oncall: Client, clock: Any) -> None:
    held = planned()
    response = oncall.post(f"/chains/chat/plans/{held.pk}/change", plan_data(ends_at="2027-03-11T01:00"), follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    assert "is not after the start" in field_error(html, f"plan{held.pk}_change_ends_at")
    assert f'<details class="plan-action" id="plan-{held.pk}-change" open>' in html
    assert "The plan was not changed" in html
    held.refresh_from_db()
    assert held.ends_at == datetime(2027, 3, 11, 4, tzinfo=UTC)


def test_a_suspended_plan_says_why_and_what_starting_it_would_replace(oncall: Client, clock: Any) -> None:
    held = suspended(clock)
    html = chain_page(oncall)
    item = text(re.search(rf'<li class="plan plan-suspended" id="plan-{held.pk}".*?</li>\s*</ol>', html, re.S).group())

    assert f"Plan #{held.pk} pin_secondary suspended" in item
    assert (
        "Did not start by itself. What stops it starting by itself now: chat was changed by carol at 12:00 UTC "
        "after it was planned"
    ) in item
    assert (
        "Starting it replaces the pin of drop_vendor_b (v2, pinned by carol, until 16:00 UTC) "
        "with pin_secondary until 15:00 UTC, now."
    ) in item
    assert f"Start plan #{held.pk} anyway" in item and f"Cancel plan #{held.pk}" in item
    assert "suspended by system:schedule" in item
    assert '<input type="hidden" name="expected_version" value="2">' in html
    # The live card says so too, loudly, with the way to settle it.
    card = text(re.search(r'<section class="card.*?</section>', html, re.S).group())
    assert f"Plan suspended Plan #{held.pk} did not start by itself" in card


def suspended_by_a_live_pin(clock: Any) -> PlannedPin:
    """A plan of pin_secondary from T0+1h to T0+3h, suspended at its start because carol's pin
    of drop_vendor_b, there when it was planned, is live until T0+2h."""
    services.select_preset(
        chain="chat", preset="drop_vendor_b", actor="carol", reason="INC-9", expires_at=timedelta(hours=2)
    )
    held = planned(T0 + timedelta(hours=1))
    clock.move_to(T0 + timedelta(hours=1, seconds=5))
    assert plans.run_plans().suspended == [held.pk]
    held.refresh_from_db()
    assert held.state_reason.startswith("chat serves the pin drop_vendor_b (v2 by carol, until 2027-03-10T14:00:00Z)")
    return held


def plan_item(html: str, held: PlannedPin) -> str:
    return text(re.search(rf'<li class="plan plan-suspended" id="plan-{held.pk}".*?</li>\s*</ol>', html, re.S).group())


def plan_note(html: str) -> str:
    return text(re.search(r'<div class="plan-note plan-note-suspended">.*?</div>', html, re.S).group())


def test_a_suspended_plan_says_why_it_waits_on_the_chain_as_it_is_now_not_as_it_was(oncall: Client, clock: Any) -> None:
    held = suspended_by_a_live_pin(clock)
    clock.move_to(T0 + timedelta(hours=1, minutes=10))
    services.revert_to_default(chain="chat", actor="bob", reason="INC-9 over")
    services.select_preset(chain="chat", preset="local_only", actor="bob", reason="INC-10 vendor_a down")
    now = "What stops it starting by itself now: chat was changed by bob at 13:10 UTC after it was planned (v3, revert"
    then = "chat serves the pin drop_vendor_b (v2 by carol, until 14:00 UTC)"

    html = chain_page(oncall)
    item = plan_item(html, held)
    why = text(re.search(r'<p class="plan-why plan-why-suspended">.*?</p>', html, re.S).group())
    assert why.startswith(f"Did not start by itself. {now}") and then not in why
    assert f"suspended by system:schedule, Wed 10 Mar 13:00 UTC: {then}" in item  # its history keeps it
    assert "Starting it replaces the pin of local_only (v4, pinned by bob" in item
    assert plan_note(html).startswith(f"Plan suspended Plan #{held.pk} did not start by itself. {now}")
    assert then not in plan_note(html)
    dashboard = chain_page(oncall, "/")
    assert plan_note(dashboard).startswith(f"Plan suspended Plan #{held.pk} did not start by itself. {now}")
    alert = text(
        re.search(r'<li class="alert-item alert-open">.*?</ul>\s*</li>', chain_page(oncall, "/alerts/"), re.S).group()
    )
    assert f"{now}" in alert and f"When raised: chat: planned pin #{held.pk} did not start by itself: {then}" in alert


def test_a_suspended_plan_nothing_stops_now_says_so_and_waits_for_a_person(oncall: Client, clock: Any) -> None:
    held = suspended_by_a_live_pin(clock)
    clock.move_to(T0 + timedelta(hours=2, minutes=1))  # carol's pin has expired: the system's change
    nothing = (
        "Nothing on chat stops it starting now, but a suspended plan waits for a person: start it anyway, or cancel it."
    )

    html = chain_page(oncall)
    assert f"Did not start by itself. {nothing} Why it was suspended at the time is in its history below." in plan_item(
        html, held
    )
    assert f"Plan #{held.pk} did not start by itself. {nothing}" in plan_note(html)
    assert f"Plan #{held.pk} did not start by itself. {nothing}" in plan_note(chain_page(oncall, "/"))
    alerts = text(chain_page(oncall, "/alerts/"))
    assert f"{nothing} When raised: chat: planned pin #{held.pk}" in alerts
    held.refresh_from_db()
    assert (held.state, live().version) == ("suspended", 3)  # reading the pages started nothing


def test_starting_a_suspended_plan_anyway_pins_it_until_its_end(oncall: Client, clock: Any) -> None:
    held = suspended(clock)

    response = oncall.post(
        f"/chains/chat/plans/{held.pk}/start",
        {"reason": "CHG-812 carol agreed", "expected_version": "2"},
        follow=True,
    )

    assert response.redirect_chain == [(f"/chains/chat/#plan-{held.pk}", 302)]
    held.refresh_from_db()
    assert (held.state, held.started_version) == ("started", 3)
    assert (live().version, live().preset.name, live().expires_at) == (3, "pin_secondary", held.ends_at)
    assert f"Plan #{held.pk} started anyway. chat is now v3: pin_secondary, pinned until 15:00 UTC" in text(
        response.content.decode()
    )
    assert Alert.objects.get(kind=AlertKind.PLAN_SUSPENDED).resolved_at is not None


def test_starting_a_plan_on_a_chain_changed_since_the_page_was_loaded_is_refused(oncall: Client, clock: Any) -> None:
    held = suspended(clock)
    services.revert_to_default(chain="chat", actor="carol", reason="INC-9 over")  # v3, after the page was read

    response = oncall.post(
        f"/chains/chat/plans/{held.pk}/start", {"reason": "CHG-812 go", "expected_version": "2"}, follow=True
    )

    assert response.status_code == 400
    html = response.content.decode()
    assert "chat changed since the page was loaded: it is now v3, normal (reverted by carol at 13:00 UTC)" in text(html)
    held.refresh_from_db()
    assert (held.state, live().version) == ("suspended", 3)
    # The page now says what it replaces, on the version it posts back; the reason is kept.
    assert "Starting it replaces chat's default, normal (v3) with pin_secondary until 15:00 UTC, now." in text(html)
    assert '<input type="hidden" name="expected_version" value="3">' in html
    assert 'value="CHG-812 go"' in html


def test_a_change_landing_between_the_pages_check_and_the_lock_is_refused_not_a_500(
    oncall: Client, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = suspended(clock)
    real_start = plans.start_plan_anyway

    def changed_meanwhile(**kwargs: Any) -> PlannedPin:
        services.revert_to_default(chain="chat", actor="carol", reason="INC-9 over")  # v3, under way
        return real_start(**kwargs)

    monkeypatch.setattr(plans, "start_plan_anyway", changed_meanwhile)
    response = oncall.post(
        f"/chains/chat/plans/{held.pk}/start", {"reason": "CHG-812 go", "expected_version": "2"}, follow=True
    )

    assert response.status_code == 409
    assert "chat changed since v2: it is now v3" in text(response.content.decode())
    held.refresh_from_db()
    assert (held.state, live().version, live().preset.name) == ("suspended", 3, "normal")


def test_a_suspended_plan_whose_preset_is_live_already_offers_no_start(oncall: Client, clock: Any) -> None:
    held = suspended(clock)
    services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason="INC-9 by hand")
    html = chain_page(oncall)
    # The plans' own refusal, as 'plans start' and the API say it.
    assert "'pin_secondary' is already live on chat: extend the pin instead, or cancel the plan." in text(html)
    assert f'action="/chains/chat/plans/{held.pk}/start"' not in html
    assert f'action="/chains/chat/plans/{held.pk}/cancel"' in html


def test_the_service_refuses_to_start_a_plan_that_is_not_suspended(oncall: Client, clock: Any) -> None:
    held = planned()
    response = oncall.post(
        f"/chains/chat/plans/{held.pk}/start", {"reason": "go", "expected_version": "1"}, follow=True
    )
    assert response.status_code == 400
    assert "only a suspended plan is started by hand" in text(response.content.decode())
    assert live().version == 1


def test_a_link_to_a_plans_form_opens_it_with_the_reason_focused(oncall: Client, clock: Any) -> None:
    held = planned()
    html = chain_page(oncall, f"/chains/chat/?plan={held.pk}&action=cancel")
    assert f'<details class="plan-action" id="plan-{held.pk}-cancel" open>' in html
    assert re.findall(r"<input[^>]*autofocus[^>]*>", html) == [
        m for m in re.findall(r"<input[^>]*>", html) if f'id="plan{held.pk}_cancel_reason"' in m
    ]


# --- viewers ---------------------------------------------------------------------------------------


def test_a_viewer_sees_the_plans_but_no_form(viewer: Client, clock: Any) -> None:
    held = suspended(clock)
    html = chain_page(viewer)
    assert f'id="plan-{held.pk}"' in html and "suspended" in html
    assert 'action="/chains/' not in html and "Plan a pin" not in html
    for url in ("/chains/chat/", "/", "/alerts/"):
        shown = chain_page(viewer, url)
        assert f'href="/chains/chat/#plan-{held.pk}"' in shown, url
        assert f"Start plan #{held.pk} anyway" not in shown and "action=start" not in shown, url


@pytest.mark.parametrize("action", ["plans", "change", "cancel", "start"])
def test_a_viewers_post_is_forbidden_and_changes_nothing(viewer: Client, clock: Any, action: str) -> None:
    held = suspended(clock)
    url = "/chains/chat/plans" if action == "plans" else f"/chains/chat/plans/{held.pk}/{action}"
    response = viewer.post(url, {**plan_data(), "expected_version": "2"})
    assert response.status_code == 403
    held.refresh_from_db()
    assert (held.state, PlannedPin.objects.count(), PlanEvent.objects.count(), live().version) == ("suspended", 1, 2, 2)


# --- the dashboard and the alerts page --------------------------------------------------------------


def test_the_dashboard_shows_each_chains_next_plan(oncall: Client, clock: Any) -> None:
    soon = planned(datetime(2027, 3, 11, 2, tzinfo=UTC))
    planned(datetime(2027, 3, 12, 2, tzinfo=UTC))  # later: not on the card
    html = chain_page(oncall, "/")
    chat = text(re.search(r'<section class="card[^"]*" aria-labelledby="chain-chat".*?</section>', html, re.S).group())
    assert chat.count("Planned:") == 1
    assert (
        f"Planned: at 02:00 UTC Thu 2027-03-11: pin_secondary until 04:00 UTC, planned by alice because {REASON}"
        in chat
    )
    assert f'href="/chains/chat/#plan-{soon.pk}"' in html
    assert 'data-local="2027-03-11T02:00:00Z" data-local-prefix="your time: "' in html
    other = re.search(r'<section class="card[^"]*" aria-labelledby="chain-incident-summary".*?</section>', html, re.S)
    assert "Planned:" not in other.group()


def test_the_dashboard_shows_a_suspended_plan_loudly_with_its_way_to_settle_it(oncall: Client, clock: Any) -> None:
    held = suspended(clock)
    html = chain_page(oncall, "/")
    assert f"Plan #{held.pk} suspended: pin_secondary did not start by itself" in text(html)  # the strip
    note = re.search(r'<div class="plan-note plan-note-suspended">.*?</div>', html, re.S).group()
    assert "chat was changed by carol" in text(note)
    assert f'href="/chains/chat/?plan={held.pk}&amp;action=start"' in note
    assert f'href="/chains/chat/?plan={held.pk}&amp;action=cancel"' in note


def test_an_open_plan_suspended_alert_offers_start_and_cancel(oncall: Client, clock: Any) -> None:
    held = suspended(clock)
    html = chain_page(oncall, "/alerts/")
    item = re.search(r'<li class="alert-item alert-open">.*?</ul>\s*</li>', html, re.S).group()
    words = text(item)
    assert words.startswith(f"Open plan_suspended plan #{held.pk} on chat")
    assert f"chat: planned pin #{held.pk} did not start by itself: chat was changed by carol at 12:00 UTC" in words
    assert f"Start plan #{held.pk} anyway…" in words and f"Cancel plan #{held.pk}…" in words
    assert f'href="/chains/chat/?plan={held.pk}&amp;action=start"' in item
    assert "Alerts(1)" in text(html)

    # Following "Start … anyway…" lands on the plan's start form, its reason focused.
    start = chain_page(oncall, f"/chains/chat/?plan={held.pk}&action=start")
    assert re.search(rf'<input type="text" name="reason"[^>]*autofocus[^>]*id="plan{held.pk}_start_reason"', start)

    oncall.post(f"/chains/chat/plans/{held.pk}/cancel", {"reason": "CHG-812 not needed now"})
    resolved = chain_page(oncall, "/alerts/")
    assert "action=start" not in resolved and f'href="/chains/chat/#plan-{held.pk}"' in resolved
    assert "Resolved" in text(resolved) and "cancelled by alice: CHG-812 not needed now" in text(resolved)


def test_a_missed_plan_is_an_event_on_the_alerts_page(oncall: Client, clock: Any) -> None:
    held = planned(T0 + timedelta(hours=1))
    clock.move_to(T0 + timedelta(hours=4))
    assert plans.run_plans().missed == [held.pk]
    words = text(chain_page(oncall, "/alerts/"))
    assert f"Event plan_missed plan #{held.pk} on chat" in words and "Start plan" not in words
    assert f"Plan #{held.pk} on chat" in words
    assert f"Plan #{held.pk} pin_secondary missed" in text(chain_page(oncall))


def test_a_reason_with_markup_is_shown_as_text(oncall: Client, clock: Any) -> None:
    plans.plan_pin(
        chain="chat",
        preset="pin_secondary",
        starts_at=T0 + timedelta(hours=2),
        ends_at=T0 + timedelta(hours=3),
        actor="alice",
        reason='<script>alert("x")</script>',
    )
    for url in ("/", "/chains/chat/"):
        html = chain_page(oncall, url)
        assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html, url
