"""The on-call pages through Django's test client: what they show, who may change what, and
that every change goes review -> confirm -> service, writing nothing on any refusal."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from presets import services
from presets.models import Selection

pytestmark = pytest.mark.usefixtures("synced")

REASON = "INC-4411 vendor_a returns 200s with garbage"


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def history_count(chain: str = "chat") -> int:
    return Selection.history.filter(chain__name=chain).count()


def pin(preset: str = "pin_secondary", *, actor: str = "carol", reason: str = REASON) -> Selection:
    return services.select_preset(chain="chat", preset=preset, actor=actor, reason=reason)


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    html = response.content.decode()
    assert "{#" not in html and "{%" not in html, f"a template comment or tag shows on {url}"
    return html


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def hidden_value(html: str, name: str) -> str:
    match = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', html)
    assert match, f"no hidden {name}"
    return match.group(1)


def select_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "preset": "pin_secondary",
        "duration_minutes": "240",
        "reason": REASON,
        "expected_version": "1",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


PAGES = ["/", "/chains/chat/", "/chains/chat/history/", "/history/", "/alerts/"]


# --- signing in ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", PAGES)
def test_every_page_needs_a_signed_in_user(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_the_login_page_signs_in_and_lands_on_the_dashboard(client: Client, alice: User) -> None:
    html = page(client, "/accounts/login/")
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "chat" in page(client, "/")


def test_a_wrong_password_shows_an_error_summary(client: Client, alice: User) -> None:
    response = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()


def test_signing_out_is_a_post_that_lands_on_the_login_page(oncall: Client) -> None:
    response = oncall.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert oncall.get("/").status_code == 302


# --- what the pages show --------------------------------------------------------------------


def test_the_dashboard_shows_each_chain_with_its_live_preset_steps_and_state(
    oncall: Client,
) -> None:
    html = page(oncall, "/")
    for chain in ("chat", "incident-summary"):
        assert f'data-chain="{chain}" data-version="1"' in html
    assert html.count('class="badge badge-default">Default<') == 2 * 2  # the strip's line and the card
    assert "vendor_a/large" in html and "self_hosted/8b" in html
    assert "system:sync" in html
    assert "The default preset: no expiry." in html


def test_a_pinned_chain_shows_a_pinned_badge_a_countdown_and_who_why(oncall: Client) -> None:
    pin(actor="alice")
    html = page(oncall, "/")
    assert 'class="badge badge-pinned">Pinned<' in html
    assert "expires in 4 h</time>" in html
    assert "data-countdown" in html
    assert REASON in html and "alice" in html


def test_a_pin_older_than_the_alert_threshold_is_marked_stale(oncall: Client, settings) -> None:
    settings.PIN_ALERT_AFTER_MINUTES = 60
    pin()
    assert "Stale pin" not in page(oncall, "/")
    with time_machine.travel(timezone.now() + timedelta(minutes=61)):
        html = page(oncall, "/")
    assert 'class="badge badge-stale">Stale pin<' in html
    assert "Pinned for 1 h 1 min: past the 60 min alert threshold" in html


def test_the_chain_page_shows_each_preset_with_what_it_changes_and_its_marking(
    oncall: Client,
) -> None:
    html = page(oncall, "/chains/chat/")
    choice = {
        name: re.split(r'id="preset-|</fieldset>', html.split(f'id="preset-{name}"')[1])[0]
        for name in ("pin_secondary", "drop_vendor_b", "local_only")
    }
    assert "<strong>New head:</strong> vendor_b/large" in choice["pin_secondary"]
    assert "<strong>Drops:</strong>" not in choice["pin_secondary"]
    assert "Same head as live" in choice["drop_vendor_b"]
    assert "<strong>Drops:</strong> vendor_b" in choice["drop_vendor_b"]
    assert "<strong>Drops:</strong> vendor_a, vendor_b" in choice["local_only"]
    assert "Degraded" in choice["local_only"]
    assert "Self-hosted 8b only: shorter, weaker answers." in choice["local_only"]
    # the default is reached with "Revert to default", not offered as a pin
    assert 'value="normal"' not in html


def test_the_chain_page_offers_the_default_duration_and_a_hidden_version(oncall: Client) -> None:
    html = page(oncall, "/chains/chat/")
    assert '<option value="240" selected>4 h (default)</option>' in html
    assert '<option value="1440">24 h (longest allowed)</option>' in html
    assert '<input type="hidden" name="expected_version" value="1"' in html


def test_a_preset_chosen_on_the_dashboard_is_preselected_and_the_reason_focused(
    oncall: Client,
) -> None:
    html = page(oncall, "/chains/chat/?preset=local_only")
    assert re.search(r'value="local_only"[^>]*checked', html)
    assert re.search(r'<input type="text" name="reason"[^>]*autofocus', html)


def test_on_a_pinned_chain_revert_and_extend_come_first(oncall: Client) -> None:
    pin()
    html = page(oncall, "/chains/chat/")
    assert html.index('id="revert"') < html.index('id="extend"') < html.index('id="choose"')
    # One way to revert on the chain page: the quick actions there only extend.
    assert html.count('action="/chains/chat/revert"') == 1
    assert html.count("Revert to normal…") == 1
    assert f'value="{REASON} — end pin of pin_secondary (v2): back to default"' in html
    assert re.search(r'value="pin_secondary"[^>]*disabled', html)


def test_a_chain_pinned_to_its_only_other_preset_offers_revert_not_a_pin(oncall: Client) -> None:
    services.select_preset(chain="incident-summary", preset="local_only", actor="carol", reason="INC-3")
    html = page(oncall, "/chains/incident-summary/")
    assert "no other reviewed preset to pin" in html
    assert 'action="/chains/incident-summary/select"' not in html
    assert 'action="/chains/incident-summary/revert"' in html


def test_an_unknown_chain_is_not_found(oncall: Client) -> None:
    assert oncall.get("/chains/nope/").status_code == 404
    assert oncall.post("/chains/nope/select", select_data(confirmed="yes")).status_code == 404


# --- pinning: review, then confirm ------------------------------------------------------------


def test_pinning_is_a_review_then_a_confirmation_then_the_chain_page(oncall: Client) -> None:
    review = oncall.post("/chains/chat/select", select_data(), follow=True)
    assert review.status_code == 200
    html = review.content.decode()
    assert "Pin pin_secondary on chat?" in html
    assert "Pin pin_secondary for 4 h" in html
    assert "<strong>New head:</strong> vendor_b/large" in html
    assert hidden_value(html, "expected_version") == "1"
    assert live().version == 1, "the review writes nothing"

    done = oncall.post("/chains/chat/select", select_data(confirmed="yes"))
    assert done.status_code == 302 and done["Location"] == "/chains/chat/"
    assert live().preset.name == "pin_secondary" and live().updated_by == "alice"
    html = page(oncall, "/chains/chat/")
    assert "chat is now v2: pin_secondary, pinned until" in html
    assert 'data-version="2"' in html
    document = oncall.get("/api/v1/chains/chat").json()
    assert (document["version"], document["preset"]) == (2, "pin_secondary")


@pytest.mark.parametrize("confirmed", [None, "yes"], ids=["review", "confirm"])
@pytest.mark.parametrize("reason", ["", "   \n"], ids=["empty", "whitespace"])
def test_a_blank_reason_shows_a_form_error_and_writes_nothing(
    oncall: Client, reason: str, confirmed: str | None
) -> None:
    response = oncall.post("/chains/chat/select", select_data(reason=reason, confirmed=confirmed), follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="error-summary" role="alert"' in html
    assert '<a href="#id_reason">Reason: is required: say why' in html
    assert 'aria-invalid="true"' in html
    assert (live().version, history_count()) == (1, 1)


def test_a_missing_preset_and_a_blank_reason_are_reported_together(oncall: Client) -> None:
    response = oncall.post("/chains/chat/select", select_data(preset=None, reason=""), follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    assert '<a href="#id_preset">Preset: choose one of the presets</a>' in html
    assert '<a href="#id_reason">Reason: is required' in html


def test_a_reason_over_500_characters_is_refused_by_the_service_rule(oncall: Client) -> None:
    response = oncall.post("/chains/chat/select", select_data(reason="x" * 501, confirmed="yes"), follow=True)
    assert response.status_code == 400
    assert "is 501 characters; keep it to 500" in response.content.decode()
    assert live().version == 1


def test_an_unknown_preset_and_a_too_long_pin_are_form_errors(oncall: Client) -> None:
    unknown = oncall.post("/chains/chat/select", select_data(preset="made_up", confirmed="yes"), follow=True)
    assert unknown.status_code == 400
    assert "does not exist on chat" in unknown.content.decode()
    too_long = oncall.post("/chains/chat/select", select_data(duration_minutes="1441"), follow=True)
    assert too_long.status_code == 400
    assert "Pin for: 24 h 1 min is longer than the longest pin, 24 h" in too_long.content.decode()
    not_a_number = oncall.post("/chains/chat/select", select_data(duration_minutes="soon"), follow=True)
    assert not_a_number.status_code == 400
    assert live().version == 1


# Django's own words for a bad value: none reaches an on-call person.
STOCK = re.compile(r"Ensure this value|Enter a (whole )?number|Enter a valid|This field is required|Null characters")
MINUTES = "give a whole number of minutes from 1 to 1440, e.g. 240"


def summary_and_field(html: str, field_id: str) -> tuple[str, str]:
    """The error summary's words and those beside the field ``field_id``, as text."""
    summary = re.search(r'<div class="error-summary".*?</div>', html, re.S)
    field = re.search(rf'<p class="field-error" id="{field_id}_error">(.*?)</p>', html, re.S)
    assert summary and field, f"no error summary or no error at {field_id}"
    return unescape(re.sub(r"<[^>]+>", " ", summary.group(0))), unescape(field.group(1))


@pytest.mark.parametrize(
    "url,fields,field_id,words",
    [
        ("/chains/chat/select", {"duration_minutes": "0"}, "id_duration_minutes", MINUTES),
        ("/chains/chat/select", {"duration_minutes": "abc"}, "id_duration_minutes", MINUTES),
        ("/chains/chat/select", {"duration_minutes": "1.5"}, "id_duration_minutes", MINUTES),
        ("/chains/chat/extend", {"duration_minutes": "0"}, "extend_duration_minutes", MINUTES),
        ("/chains/chat/extend", {"duration_minutes": "abc"}, "extend_duration_minutes", MINUTES),
        ("/chains/chat/extend", {"duration_minutes": "30", "add_minutes": "x"}, "extend_duration_minutes", None),
        ("/chains/chat/select", {"preset": "no such preset!"}, "id_preset", "that is not one of the presets"),
    ],
    ids=["pin-0", "pin-abc", "pin-1.5", "extend-0", "extend-abc", "extend-add-not-a-number", "preset-not-a-name"],
)
def test_an_edited_value_is_told_in_plain_words_once(
    oncall: Client, url: str, fields: dict[str, str], field_id: str, words: str | None
) -> None:
    pin()  # extend needs a pin
    posted = {"preset": "pin_secondary", "duration_minutes": "60", "reason": REASON, "expected_version": "2", **fields}
    response = oncall.post(url, posted, follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    assert not STOCK.search(text_of(html)), STOCK.search(text_of(html))
    if words is None:  # a hidden field: the page is out of date, said once in the summary
        assert text_of(html).count("The page is out of date") == 1
        assert "the minutes to add are not a whole number" in text_of(html)
        return
    label = {"id_duration_minutes": "Pin for", "extend_duration_minutes": "Keep it pinned for", "id_preset": "Preset"}
    summary, at_field = summary_and_field(html, field_id)
    # Each problem once in the summary, naming the field, and once beside the field: no second
    # message for the same problem ("choose how long" after the length was refused).
    assert summary.count(f"{label[field_id]}: {words}") == 1
    assert summary.count(words) == 1
    assert at_field.count(words) == 1 and at_field.strip().startswith(words)
    assert "choose how long" not in html
    assert live().version == 2


def test_a_post_without_the_page_version_is_refused(oncall: Client) -> None:
    response = oncall.post("/chains/chat/select", select_data(expected_version=None, confirmed="yes"), follow=True)
    assert response.status_code == 400
    assert "The page is out of date" in response.content.decode()
    assert live().version == 1


# --- conflicts ------------------------------------------------------------------------------


def test_a_change_made_meanwhile_is_a_conflict_showing_who_what_why_and_asking_again(
    oncall: Client,
) -> None:
    page(oncall, "/chains/chat/")  # alice loads v1 ...
    pin("local_only", actor="carol", reason="INC-9 both vendors down")  # ... carol pins first
    response = oncall.post("/chains/chat/select", select_data(confirmed="yes"), follow=True)
    assert response.status_code == 409
    html = response.content.decode()
    assert "chat changed since you loaded the page" in html
    assert "<strong>v2</strong>: select of <strong>local_only</strong> by <strong>carol</strong>" in html
    assert "INC-9 both vendors down" in html
    assert "Your change was <strong>not</strong> made" in html
    assert (live().version, live().preset.name) == (2, "local_only"), "nothing overwritten"
    # asked again against what is live now: confirming once more applies it
    assert hidden_value(html, "expected_version") == "2"
    assert "Pin pin_secondary for 4 h" in html
    again = oncall.post("/chains/chat/select", select_data(expected_version="2", confirmed="yes"))
    assert again.status_code == 302
    assert (live().version, live().preset.name) == (3, "pin_secondary")


def test_the_review_already_shows_a_change_made_since_the_page_was_loaded(oncall: Client) -> None:
    pin("local_only", actor="carol", reason="INC-9 both vendors down")
    response = oncall.post("/chains/chat/select", select_data(expected_version="1"), follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "chat changed since you loaded the page" in html and "carol" in html
    assert hidden_value(html, "expected_version") == "2"
    assert live().version == 2


# --- revert, extend, restore -----------------------------------------------------------------


def test_revert_to_default_after_a_confirmation(oncall: Client) -> None:
    pin()
    data = {"reason": "vendor_a recovered", "expected_version": "2"}
    review = oncall.post("/chains/chat/revert", data, follow=True)
    assert review.status_code == 200 and "Revert chat to its default, normal?" in review.content.decode()
    assert live().version == 2
    done = oncall.post("/chains/chat/revert", {**data, "confirmed": "yes"})
    assert done.status_code == 302
    assert (live().version, live().preset.name, live().expires_at) == (3, "normal", None)
    assert "chat is now v3: normal (default, no expiry)." in page(oncall, "/chains/chat/")


def test_extend_keeps_the_pin_with_a_new_expiry_from_now(oncall: Client) -> None:
    pin()
    data = {"reason": "still broken", "expected_version": "2", "duration_minutes": "480"}
    review = oncall.post("/chains/chat/extend", data, follow=True)
    assert review.status_code == 200 and "Extend the pin of pin_secondary on chat?" in review.content.decode()
    done = oncall.post("/chains/chat/extend", {**data, "confirmed": "yes"})
    assert done.status_code == 302
    selection = live()
    assert (selection.version, selection.preset.name, selection.action) == (
        3,
        "pin_secondary",
        "extend",
    )
    assert timedelta(hours=7, minutes=59) < selection.expires_at - timezone.now() <= timedelta(hours=8)


def offered(html: str, select_id: str) -> list[str]:
    """The values a select on the page offers."""
    body = re.search(rf'<select name="duration_minutes"[^>]*id="{select_id}"[^>]*>(.*?)</select>', html, re.S)
    assert body, f"no select {select_id}"
    return re.findall(r'<option value="(\d+)"', body.group(1))


def test_only_lengths_that_would_be_accepted_are_offered(oncall: Client) -> None:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="carol", reason=REASON, expires_at=timedelta(hours=6)
    )
    html = page(oncall, "/chains/chat/")
    # Keeping it longer: only lengths that end after 6 h from now; the first one chosen.
    assert offered(html, "extend_duration_minutes") == ["480", "720", "1440"]
    assert re.search(r'<option value="480" selected>', html)
    # Ending it earlier: only lengths that end before then.
    assert offered(html, "shorten_duration_minutes") == ["15", "30", "60", "120"]
    # +1 h and +4 h fit under the 24 h maximum.
    assert 'aria-label="Extend the pin of chat by 1 h"' in html and 'aria-label="Extend the pin of chat by 4 h"' in html


def test_a_pin_at_the_longest_offers_no_extension_and_says_why(oncall: Client) -> None:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="carol", reason=REASON, expires_at=timedelta(hours=23)
    )
    html = page(oncall, "/chains/chat/")
    assert 'aria-label="Extend the pin of chat by 1 h"' in html  # 23 h + 1 h is the longest
    assert 'aria-label="Extend the pin of chat by 4 h"' not in html
    assert offered(html, "extend_duration_minutes") == ["1440"]
    services.extend_pin(chain="chat", actor="carol", reason=REASON, expires_at=timedelta(hours=24))
    html = page(oncall, "/chains/chat/")
    assert "Extend the pin of chat by" not in html
    assert 'id="extend_duration_minutes"' not in html
    assert "It already ends at the latest a pin may: 24 h from now" in html
    dashboard = page(oncall, "/")
    assert "Extend the pin of chat by" not in dashboard and "Revert to normal…" in dashboard


def test_a_pin_ending_soon_offers_no_earlier_end(oncall: Client) -> None:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="carol", reason=REASON, expires_at=timedelta(minutes=14)
    )
    html = page(oncall, "/chains/chat/")
    assert 'id="shorten_duration_minutes"' not in html
    assert "sooner than this form can set: to end it now, revert." in html


def test_a_refused_extension_is_summed_up_at_the_top_in_on_call_words(oncall: Client) -> None:
    pin()  # 4 h
    data = {"reason": "still broken", "expected_version": "2", "duration_minutes": "60"}
    with time_machine.travel(timezone.now().replace(hour=1, minute=0), tick=False):
        response = oncall.post("/chains/chat/extend", data, follow=True)
    html = response.content.decode()
    assert response.status_code == 400
    assert "{#" not in html
    summary = html.index('class="error-summary"')
    # Above the live card, focused when the page opens, announced, in the pages' words.
    assert summary < html.index('id="live-heading"')
    assert re.search(r'<div class="error-summary" role="alert" tabindex="-1" autofocus', html)
    assert "The pin was not extended. Fix this and try again:" in html
    text = unescape(re.sub(r"<[^>]+>", "", html[summary : html.index("</div>", summary)]))
    assert '"shorten": true' not in text and "T0" not in text
    assert "that would end the pin at 02:00 UTC (in 1 h), before its current expiry" in text
    assert 'use "End the pin earlier" on the chain page' in text


def test_extending_a_chain_that_is_not_pinned_shows_the_service_refusal(oncall: Client) -> None:
    response = oncall.post(
        "/chains/chat/extend",
        {"reason": "x", "expected_version": "1", "duration_minutes": "60", "confirmed": "yes"},
        follow=True,
    )
    assert response.status_code == 400
    assert "chat is not pinned: only a pin can be extended" in response.content.decode()


def test_extending_a_pin_that_ended_meanwhile_shows_what_happened_and_no_confirm(
    oncall: Client,
) -> None:
    pin()
    services.revert_to_default(chain="chat", actor="carol", reason="fixed")
    data = {"reason": "still broken", "expected_version": "2", "duration_minutes": "60"}
    response = oncall.post("/chains/chat/extend", data, follow=True)
    html = response.content.decode()
    assert "chat has no pin to extend any more" in html
    assert "revert of <strong>normal</strong> by <strong>carol</strong>" in html
    assert 'name="confirmed"' not in html


def test_restore_from_history_undoes_one_change_with_a_prefilled_reason(oncall: Client) -> None:
    pin()
    services.revert_to_default(chain="chat", actor="carol", reason="looked fine")
    html = page(oncall, "/chains/chat/history/")
    assert f'value="{REASON} — restored v2 (undo v3, revert by carol)"' in html
    assert "Restore pin_secondary…" in html
    review = oncall.post(
        "/chains/chat/history/3/restore",
        {"reason": "undo v3: not fixed yet", "expected_version": "3"},
        follow=True,
    )
    assert review.status_code == 200
    assert "Undo v3 on chat: serve pin_secondary again?" in review.content.decode()
    assert live().version == 3
    done = oncall.post(
        "/chains/chat/history/3/restore",
        {"reason": "undo v3: not fixed yet", "expected_version": "3", "confirmed": "yes"},
    )
    assert done.status_code == 302 and done["Location"] == "/chains/chat/"
    selection = live()
    assert (selection.version, selection.preset.name, selection.action) == (
        4,
        "pin_secondary",
        "restore",
    )
    assert selection.reason == "undo v3: not fixed yet"


def test_a_blank_restore_reason_is_asked_for_again_on_the_confirmation(oncall: Client) -> None:
    pin()
    response = oncall.post("/chains/chat/history/2/restore", {"reason": " ", "expected_version": "2"}, follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'role="alert"' in html and "is required" in html
    assert 'id="confirm_reason"' in html
    assert live().version == 2


def test_history_rows_say_why_they_cannot_be_restored(oncall: Client) -> None:
    pin()
    html = page(oncall, "/chains/chat/history/")
    # The restore service's own refusal, shown instead of a button that would fail.
    assert "Restore: v1 created chat; it has no previous value to restore" in html
    assert "Restore normal…" in html  # v2 replaced normal, which is not live


# --- history pages --------------------------------------------------------------------------


def test_history_shows_actor_action_previous_new_reason_and_expiry(oncall: Client) -> None:
    pin(actor="alice")
    html = page(oncall, "/chains/chat/history/")
    entry = html.split('id="chat-v2"')[1].split("</li>")[0]
    assert "select" in entry and "alice" in entry and REASON in entry
    transition = re.sub(r"<[^>]+>", "", entry.split('class="transition">')[1].split("</p>")[0])
    assert transition == "normal (v1) →to pin_secondary"
    assert "UTC" in entry.split("<dt>Expiry</dt>")[1]


def test_history_is_paginated_newest_first(oncall: Client) -> None:
    for n in range(15):
        pin("pin_secondary", reason=f"round {n}")
        services.revert_to_default(chain="chat", actor="carol", reason=f"back {n}")
    first = page(oncall, "/chains/chat/history/")
    assert 'id="chat-v31"' in first and 'id="chat-v7"' in first and 'id="chat-v6"' not in first
    older = re.search(r'href="([^"]+)" rel="next">Older</a>', first)
    assert older, "no link to older changes"
    second = page(oncall, older.group(1).replace("&amp;", "&"))
    assert 'id="chat-v1"' in second and 'id="chat-v31"' not in second and 'rel="next"' not in second


def test_the_history_of_all_chains_lists_every_chain(oncall: Client) -> None:
    pin()
    html = page(oncall, "/history/")
    assert 'id="chat-v2"' in html and 'id="incident-summary-v1"' in html


# --- roles, CSRF, escaping -----------------------------------------------------------------


@pytest.mark.parametrize("url", PAGES)
def test_a_viewer_sees_no_change_buttons(viewer: Client, url: str) -> None:
    pin()
    html = page(viewer, url)
    assert 'action="/chains/' not in html
    assert "Review and pin" not in html and "Restore " not in html and "Revert" not in html


def test_a_viewer_is_told_changes_need_the_oncall_role(viewer: Client) -> None:
    assert "changes need the on-call role" in page(viewer, "/chains/chat/")


def test_the_dashboard_tells_a_viewer_it_is_read_only_and_whom_to_ask(viewer: Client, oncall: Client) -> None:
    hint = "Read only: you can see every chain, but changes need the on-call role. Ask an admin for it."
    html = page(viewer, "/")
    assert hint in html
    assert html.index(hint) < html.index('class="card')  # before the first card, where one reads first
    assert hint not in page(oncall, "/")


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/chains/chat/select", select_data(expected_version="2", confirmed="yes")),
        ("/chains/chat/revert", {"reason": "r", "expected_version": "2", "confirmed": "yes"}),
        (
            "/chains/chat/extend",
            {"reason": "r", "expected_version": "2", "duration_minutes": "60", "confirmed": "yes"},
        ),
        (
            "/chains/chat/history/2/restore",
            {"reason": "r", "expected_version": "2", "confirmed": "yes"},
        ),
    ],
    ids=["select", "revert", "extend", "restore"],
)
def test_a_forged_post_by_a_viewer_is_forbidden_and_writes_nothing(viewer: Client, url: str, data: dict) -> None:
    pin()
    response = viewer.post(url, data)
    assert response.status_code == 403
    assert (live().version, history_count()) == (2, 2)


def test_changes_are_posts_only(oncall: Client) -> None:
    assert oncall.put("/chains/chat/select").status_code == 405
    assert oncall.get("/chains/chat/select").status_code == 302  # to the chain page: nothing changed
    assert live().version == 1


def test_a_post_without_the_csrf_token_is_refused(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    html = page(client, "/chains/chat/")
    refused = client.post("/chains/chat/select", select_data(confirmed="yes"))
    assert refused.status_code == 403
    assert live().version == 1
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    accepted = client.post("/chains/chat/select", select_data(confirmed="yes", csrfmiddlewaretoken=token))
    assert accepted.status_code == 302
    assert live().version == 2


def test_a_script_in_a_reason_is_shown_as_text_everywhere(oncall: Client) -> None:
    pin(reason='<script>alert("x")</script> & <b>bold</b>')
    for url in ("/", "/chains/chat/", "/chains/chat/history/", "/history/"):
        html = page(oncall, url)
        assert "<script>alert" not in html, url
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;" in html, url
    review = oncall.post("/chains/chat/revert", {"reason": "<img src=x onerror=alert(1)>", "expected_version": "2"})
    assert "<img src=x" not in review.content.decode()


def test_pages_have_no_inline_scripts_or_handlers(oncall: Client) -> None:
    pin()
    for url in PAGES:
        html = page(oncall, url)
        assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [], url
        assert not re.search(r"\son[a-z]+=", html), url
        assert 'name="viewport"' in html and 'name="color-scheme"' in html


# --- alerts ---------------------------------------------------------------------------------


def test_the_alerts_page_says_no_alerts_when_there_are_none(oncall: Client) -> None:
    assert "No alerts" in page(oncall, "/alerts/")


def test_the_alerts_page_lists_raised_alerts_escaped(oncall: Client) -> None:
    from audit.alerts import sweep_stale_pins

    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="pinned <b>bold</b>")
    with time_machine.travel(timezone.now() + timedelta(minutes=61)):
        sweep_stale_pins()
        html = page(oncall, "/alerts/")
    assert "stale_pin" in html and "Open" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html


def test_the_chain_page_shows_fleet_convergence_and_warns_about_an_idle_head(oncall: Client, reader) -> None:
    def served(provider: str) -> None:
        reader.post(
            "/api/v1/chains/chat/usage",
            {
                "client": "checkout/a",
                "providers": {provider: {"requests": 1, "last_served_at": timezone.now().isoformat()}},
            },
            content_type="application/json",
        )

    reader.get("/api/v1/chains/chat", headers={"X-Chain-Client": "checkout/a", "X-Chain-Applied-Version": "1"})
    html = page(oncall, "/chains/chat/")
    assert "1 of 1 instances on v1" in html
    assert "has not served" not in html  # no usage reported yet: nothing to warn about
    served("vendor_a")
    assert "vendor_b has not served a chat request in the last 24 h" in page(oncall, "/chains/chat/")
    served("vendor_b")
    assert "vendor_b has not served" not in page(oncall, "/chains/chat/")


def test_the_dashboard_says_when_instances_are_ahead_of_a_restored_server(oncall: Client, reader) -> None:
    for instance in ("a", "b", "c"):
        reader.get(
            "/api/v1/chains/chat", headers={"X-Chain-Client": f"checkout/{instance}", "X-Chain-Applied-Version": "1071"}
        )
    html = page(oncall, "/")
    assert "3 instances ahead of the server: restored database? run manage.py raise_epoch" in html


def test_the_favicon_is_served_to_anyone_and_named_by_every_page(client: Client) -> None:
    from django.contrib.staticfiles import finders

    icon = client.get("/favicon.ico")
    assert icon.status_code == 302
    assert icon["Location"].endswith("presets/favicon.svg")
    found = finders.find("presets/favicon.svg")
    assert found and "<svg" in Path(str(found)).read_text()
    login = client.get("/accounts/login/").content.decode()
    assert 'rel="icon"' in login and "favicon.svg" in login


def test_no_template_comment_spans_lines() -> None:
    """Django's ``{# #}`` comments are one line: one that spans lines is shown on the page."""
    templates = Path(__file__).resolve().parent.parent / "templates"
    spanning = [
        f"{path.relative_to(templates)}:{number}"
        for path in templates.rglob("*.html")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.count("{#") > line.count("#}")
    ]
    assert spanning == []
