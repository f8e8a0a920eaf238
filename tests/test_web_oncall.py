"""On-call pages without dead ends, through Django's test client: change URLs opened with a GET,
review pages never cached, extending that never shortens (and a separate way to end a pin
earlier), who pinned and why kept after an extension, an honest review of the default preset,
danger and caution on the confirm button, quiet idle-head warnings, the one-line-per-chain
strip and one-click revert / +1 h / +4 h, the incident reason carried by every generated reason,
"nothing to do" when a conflicting change already did what was asked, and a shortened pin
reading as shortened."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from presets import services
from presets.exceptions import InvalidInput
from presets.models import Selection
from tests.health_reports import vendor_a_failing

pytestmark = pytest.mark.usefixtures("synced")

REASON = "INC-4411 vendor_a returns 200s with garbage"


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def history_count() -> int:
    return Selection.history.filter(chain__name="chat").count()


def pin(preset: str = "pin_secondary", *, actor: str = "carol", reason: str = REASON, **kwargs: Any) -> Selection:
    return services.select_preset(chain="chat", preset=preset, actor=actor, reason=reason, **kwargs)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def confirm_button(html: str) -> str:
    match = re.search(r'<button type="submit" class="button ([\w-]+)" name="confirmed"', html)
    assert match, "no confirm button"
    return match.group(1)


def review(client: Client, url: str, *, follow: bool | None = None, **data: Any) -> Any:
    """POST a change's form; a review (not ``confirmed``) follows its redirect to the GET that
    shows it (Post/Redirect/Get), a confirmation only when asked to."""
    data.setdefault("expected_version", str(live().version))
    data.setdefault("reason", REASON)
    return client.post(url, data, follow=not data.get("confirmed") if follow is None else follow)


# --- change URLs opened with a GET (a bookmark, or signing in again mid-change) -------------------


@pytest.mark.parametrize(
    ("url", "lands_on"),
    [
        ("/chains/chat/select", "/chains/chat/"),
        ("/chains/chat/revert", "/chains/chat/"),
        ("/chains/chat/extend", "/chains/chat/"),
        ("/chains/chat/history/2/restore", "/chains/chat/history/"),
    ],
)
def test_a_get_of_a_change_url_lands_on_its_page_saying_nothing_was_changed(
    oncall: Client, url: str, lands_on: str
) -> None:
    pin()
    response = oncall.get(url, follow=True)

    assert response.redirect_chain == [(lands_on, 302)]
    assert "Nothing was changed" in response.content.decode()
    assert (live().version, history_count()) == (2, 2)


def test_signing_in_again_after_the_session_expired_mid_change_lands_on_the_chain_page(
    client: Client, alice: User
) -> None:
    # The session ended while the review page was open: confirming sends the person to sign in.
    confirmed = client.post("/chains/chat/select", {"preset": "pin_secondary", "confirmed": "yes"})
    assert confirmed.status_code == 302
    login = confirmed["Location"]
    assert login.startswith("/accounts/login/?next=/chains/chat/select")

    signed_in = client.post(
        login, {"username": "alice", "password": "alice-pass-123", "next": "/chains/chat/select"}, follow=True
    )

    assert signed_in.redirect_chain[-1] == ("/chains/chat/", 302)
    assert signed_in.status_code == 200
    assert "Nothing was changed" in signed_in.content.decode()
    assert live().version == 1


def test_a_head_of_a_change_url_redirects_without_leaving_a_message_for_later(oncall: Client) -> None:
    response = oncall.head("/chains/chat/select")

    assert (response.status_code, response["Location"]) == (302, "/chains/chat/")
    assert "Nothing was changed" not in oncall.get("/chains/chat/").content.decode()


def test_a_get_of_an_unknown_chains_change_url_is_a_404(oncall: Client) -> None:
    assert oncall.get("/chains/nope/select").status_code == 404


def test_head_answers_on_the_reading_pages(oncall: Client) -> None:
    for url in ("/", "/chains/chat/", "/alerts/"):
        assert oncall.head(url).status_code == 200, url


# --- review pages ---------------------------------------------------------------------------------


def test_a_review_page_is_never_stored_by_the_browser(oncall: Client) -> None:
    response = review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60")

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert "Pin pin_secondary for 1 h" in response.content.decode()


def test_selecting_the_default_preset_reviews_as_what_it_does(oncall: Client) -> None:
    pin()
    response = review(oncall, "/chains/chat/select", preset="normal", duration_minutes="240")
    html = response.content.decode()

    assert "Serve chat&#x27;s default, normal, again?" in html
    assert "Revert to normal" in html and "Pin normal" not in html
    assert "No expiry." in text(html.split('id="after-heading"')[1])
    assert "This ends the pin of pin_secondary: vendor_a/large serves first again." in text(html)


# --- extend never shortens; ending a pin earlier is its own, clearly worded change ---------------


def test_extend_refuses_to_shorten_a_pin_in_the_service_the_api_and_the_pages(oncall: Client, writer: Client) -> None:
    pin(expires_at=timedelta(hours=8))
    until = live().expires_at

    with pytest.raises(InvalidInput) as refused:
        services.extend_pin(chain="chat", expires_at=timedelta(minutes=30), actor="carol", reason="r")
    assert "extending never shortens a pin" in refused.value.message
    api = writer.post(
        "/api/v1/chains/chat/extend", {"reason": "r", "duration_minutes": 30}, content_type="application/json"
    )
    assert api.status_code == 400
    assert api.json()["error"]["details"]["field"] == "duration_minutes"
    assert "extending never shortens a pin" in api.json()["error"]["message"]
    page = review(oncall, "/chains/chat/extend", duration_minutes="30")
    assert page.status_code == 400
    assert "extending never shortens a pin" in page.content.decode()

    assert (live().version, live().expires_at) == (2, until)


def test_ending_a_pin_earlier_is_reviewed_as_such_and_recorded(oncall: Client, writer: Client) -> None:
    pin(expires_at=timedelta(hours=8))
    now = timezone.now()
    response = review(oncall, "/chains/chat/extend", duration_minutes="30", shorten="true")
    html = response.content.decode()
    assert "End the pin of pin_secondary on chat earlier?" in html
    assert "End the pin at" in html

    confirmed = review(
        oncall, "/chains/chat/extend", duration_minutes="30", shorten="true", confirmed="yes", reason="INC-1 over"
    )

    assert confirmed.status_code == 302
    selection = live()
    assert selection.action == "extend" and selection.reason == "INC-1 over"
    assert selection.expires_at is not None
    assert timedelta(minutes=29) < selection.expires_at - now <= timedelta(minutes=31)
    # Shortening must shorten: a later expiry is refused with the way to extend instead.
    later = writer.post(
        "/api/v1/chains/chat/extend",
        {"reason": "r", "duration_minutes": 600, "shorten": True},
        content_type="application/json",
    )
    assert later.status_code == 400
    assert "to keep it longer, extend it" in later.json()["error"]["message"]
    assert (
        writer.post(
            "/api/v1/chains/chat/extend", {"reason": "r", "shorten": "yes"}, content_type="application/json"
        ).status_code
        == 400
    )


def test_plus_one_hour_adds_to_the_current_expiry(oncall: Client) -> None:
    pin(expires_at=timedelta(hours=2))
    until = live().expires_at
    assert until is not None

    response = review(oncall, "/chains/chat/extend", add_minutes="60")
    assert "(+1 h)" in response.content.decode()
    done = review(oncall, "/chains/chat/extend", add_minutes="60", confirmed="yes")

    assert done.status_code == 302
    assert live().expires_at == until + timedelta(hours=1)


def test_the_card_keeps_who_pinned_and_why_after_an_extension(oncall: Client) -> None:
    pin(actor="carol", reason="INC-4411 vendor_a garbage")
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="dave", reason="still bad at 04:00")

    card = text(page_card(oncall))

    assert "By carol" in card
    assert "Why INC-4411 vendor_a garbage" in card
    assert "Then extended by dave" in card and "still bad at 04:00" in card


def page_card(client: Client, chain: str = "chat") -> str:
    html = client.get("/").content.decode()
    match = re.search(rf'<section class="card[^"]*"[^>]*data-chain="{chain}".*?</section>', html, re.S)
    assert match
    return match.group(0)


# --- danger and caution on the confirm button ------------------------------------------------------


def test_a_degraded_preset_dropping_vendors_gets_a_danger_confirm_saying_why(oncall: Client) -> None:
    html = review(oncall, "/chains/chat/select", preset="local_only", duration_minutes="60").content.decode()

    assert confirm_button(html) == "button-danger"
    note = text(re.search(r'<div class="danger-note".*?</div>', html, re.S).group(0))  # type: ignore[union-attr]
    assert "local_only is marked degraded: Self-hosted 8b only: shorter, weaker answers." in note
    assert "vendor_a, vendor_b will get no chat traffic" in note


def test_a_preset_whose_head_is_failing_now_gets_a_danger_confirm(oncall: Client, reader: Client) -> None:
    with time_machine.travel(timezone.now(), tick=False):
        vendor_a_failing(reader)
        html = review(oncall, "/chains/chat/select", preset="drop_vendor_b", duration_minutes="60").content.decode()

    assert confirm_button(html) == "button-danger"
    assert "its head is failing now: vendor_a: 50.0 % errors" in text(html)


def test_a_safe_pin_keeps_the_plain_confirm_and_a_revert_gets_caution(oncall: Client) -> None:
    html = review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60").content.decode()
    assert confirm_button(html) == "button-primary"
    assert "danger-note" not in html

    pin()
    html = review(oncall, "/chains/chat/revert").content.decode()
    assert confirm_button(html) == "button-caution"
    assert "This ends the pin of pin_secondary: vendor_a/large serves first again." in text(html)


# --- the dashboard: one line per chain, one-click changes ------------------------------------------


def test_the_strip_has_one_line_per_chain_with_state_expiry_who_and_why(oncall: Client) -> None:
    pin(actor="carol", reason="INC-4411 vendor_a garbage")
    html = oncall.get("/").content.decode()
    strip = re.search(r'<ul class="now-strip".*?</ul>', html, re.S)
    assert strip

    items = [text(item) for item in re.findall(r"<li .*?</li>", strip.group(0), re.S)]
    assert items == [
        "chat pin_secondary Pinned expires in 4 h pinned by carol : INC-4411 vendor_a garbage",
        "incident-summary normal Default system:sync : chain created from presets file presets.example.json "
        + items[1].split("presets.example.json ")[1],
    ]
    assert html.index("now-strip") < html.index('class="card')


def test_revert_and_extend_are_one_click_from_the_dashboard_then_a_review(oncall: Client) -> None:
    pin()
    card = page_card(oncall)
    forms = re.findall(r'<form method="post" action="([^"]+)" class="inline-form">(.*?)</form>', card, re.S)
    actions = {re.search(r"<button[^>]*>([^<]+)</button>", body).group(1): (url, body) for url, body in forms}  # type: ignore[union-attr]
    assert set(actions) == {"Revert to normal…", "+1 h", "+4 h"}

    url, body = actions["Revert to normal…"]
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body))
    reviewed = oncall.post(url, fields, follow=True)

    assert reviewed.status_code == 200
    assert "Revert chat to its default, normal?" in reviewed.content.decode()
    assert fields["reason"] == f"{REASON} — end pin of pin_secondary (v2): back to default"
    assert live().version == 2  # reviewed, not made


@pytest.mark.parametrize("meanwhile", ["reverted", "expired"])
def test_a_quick_extend_confirmed_after_the_pin_ended_says_so_never_a_server_error(
    oncall: Client, meanwhile: str
) -> None:
    pin(expires_at=timedelta(hours=2))
    reviewed_version = str(live().version)
    assert "(+1 h)" in review(oncall, "/chains/chat/extend", add_minutes="60").content.decode()
    if meanwhile == "reverted":
        services.revert_to_default(chain="chat", actor="bob", reason="vendor_a is back")
        confirmed = review(
            oncall,
            "/chains/chat/extend",
            add_minutes="60",
            confirmed="yes",
            expected_version=reviewed_version,
            follow=True,
        )
    else:
        with time_machine.travel(timezone.now() + timedelta(hours=3)):
            confirmed = review(
                oncall,
                "/chains/chat/extend",
                add_minutes="60",
                confirmed="yes",
                expected_version=reviewed_version,
                follow=True,
            )

    assert confirmed.status_code == 409, confirmed.status_code
    page = text(confirmed.content.decode())
    assert "chat has no pin to extend any more" in page
    assert "Your change was not made" in page
    assert (live().preset.name, live().expires_at) == ("normal", None), "nothing was pinned again"


def test_an_unexpected_error_is_a_styled_page_with_a_way_back(rf: Any) -> None:
    from controlplane.urls import handler500

    request = rf.get("/chains/chat/")
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        response = handler500(request)

    assert response.status_code == 500
    page = text(response.content.decode())
    assert "Something went wrong on the control plane's side" in page
    assert "may or may not have been made" in page
    assert 'href="/"' in response.content.decode()


# --- the incident reason is carried: generated text is added to it, never replaces it -------------

INCIDENT = "INC-101 vendor_a 500s"


def quick_forms(client: Client) -> dict[str, dict[str, str]]:
    """The dashboard card's one-click forms of chat, by button: their hidden fields."""
    forms = re.findall(r'<form method="post" action="[^"]+" class="inline-form">(.*?)</form>', page_card(client), re.S)
    return {
        re.search(r"<button[^>]*>([^<]+)</button>", body).group(1): dict(  # type: ignore[union-attr]
            re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body)
        )
        for body in forms
    }


def restore_prefill(client: Client, version: int) -> str:
    html = client.get("/chains/chat/history/").content.decode()
    match = re.search(rf'form="restore-form-chat-{version}" value="([^"]*)"', html)
    assert match, f"no restore of v{version}"
    return unescape(match.group(1))


def confirm(client: Client, url: str, **data: Any) -> Any:
    assert review(client, url, **data).status_code == 200
    return review(client, url, confirmed="yes", **data)


def test_a_restore_after_a_revert_keeps_the_incident_reason_first(oncall: Client) -> None:
    pin(actor="carol", reason=INCIDENT)  # v2
    services.revert_to_default(chain="chat", actor="bob", reason="vendor_a looks fine")  # v3

    reason = restore_prefill(oncall, 3)
    assert reason == f"{INCIDENT} — restored v2 (undo v3, revert by bob)"
    assert confirm(oncall, "/chains/chat/history/3/restore", reason=reason).status_code == 302

    card = text(page_card(oncall))
    assert f"Why {INCIDENT} — restored v2" in card
    # Each history row keeps its own reason.
    rows = dict(Selection.history.filter(chain__name="chat").values_list("version", "reason"))
    assert (rows[2], rows[3], rows[4]) == (INCIDENT, "vendor_a looks fine", reason)
    # Undoing the pin itself (back to the default) carries the incident of the pin it ends.
    assert restore_prefill(oncall, 2) == f"{INCIDENT} — restored v1 (undo v2, select by carol)"


def test_quick_actions_add_to_the_incident_reason(oncall: Client) -> None:
    pin(reason=INCIDENT)  # v2
    forms = quick_forms(oncall)
    assert forms["Revert to normal…"]["reason"] == f"{INCIDENT} — end pin of pin_secondary (v2): back to default"
    assert forms["+1 h"]["reason"] == f"{INCIDENT} — keep pin_secondary pinned (v2): +1 h"

    assert confirm(oncall, "/chains/chat/extend", **forms["+1 h"]).status_code == 302  # v3
    assert live().reason == f"{INCIDENT} — keep pin_secondary pinned (v2): +1 h"
    # The next click carries the incident again, not the text the last one added.
    forms = quick_forms(oncall)
    assert forms["+4 h"]["reason"] == f"{INCIDENT} — keep pin_secondary pinned (v3): +4 h"
    assert confirm(oncall, "/chains/chat/revert", **forms["Revert to normal…"]).status_code == 302  # v4
    assert live().reason == f"{INCIDENT} — end pin of pin_secondary (v3): back to default"
    assert f"Why {INCIDENT} — end pin of pin_secondary" in text(page_card(oncall))


def test_restoring_a_restored_pin_carries_the_incident_once(oncall: Client) -> None:
    pin(reason=INCIDENT)  # v2
    services.revert_to_default(chain="chat", actor="bob", reason="fine")  # v3
    services.restore(
        chain="chat", version=3, actor="alice", reason=f"{INCIDENT} — restored v2 (undo v3, revert by bob)"
    )
    services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="dave", reason="still bad")  # v5
    services.revert_to_default(chain="chat", actor="bob", reason="fine now")  # v6

    assert restore_prefill(oncall, 6) == f"{INCIDENT} — restored v5 (undo v6, revert by bob)"


# --- a conflict that leaves the chain as asked: nothing to do ------------------------------------


def test_a_revert_beaten_by_another_revert_says_there_is_nothing_to_do(oncall: Client) -> None:
    pin()
    assert review(oncall, "/chains/chat/revert").status_code == 200  # alice reviews at v2
    with time_machine.travel(datetime(2026, 11, 29, 2, 14, tzinfo=UTC), tick=False):
        services.revert_to_default(chain="chat", actor="bob", reason="vendor_a is back")  # v3
    confirmed = review(oncall, "/chains/chat/revert", confirmed="yes", expected_version="2", follow=True)

    page = text(confirmed.content.decode())
    assert "chat is already on its default preset normal (v3, reverted by bob at " in page
    assert "02:14 UTC): nothing to do" in page
    assert 'name="confirmed"' not in confirmed.content.decode()
    assert "changed since you loaded the page" not in page
    assert (live().version, history_count()) == (3, 3)


def test_an_extend_beaten_by_the_same_extend_says_there_is_nothing_to_do(oncall: Client) -> None:
    pin(expires_at=timedelta(hours=2))
    until = live().expires_at
    assert until is not None
    assert review(oncall, "/chains/chat/extend", add_minutes="60").status_code == 200
    services.extend_pin(chain="chat", expires_at=until + timedelta(hours=1), actor="bob", reason="same idea")  # v3
    confirmed = review(oncall, "/chains/chat/extend", add_minutes="60", confirmed="yes", expected_version="2")

    assert confirmed.status_code == 302
    page = text(oncall.get(confirmed["Location"]).content.decode())
    assert "chat is already pinned to pin_secondary until" in page and "(v3, extended by bob at" in page
    assert live().version == 3
    # A different change got there first: that is a conflict, asked again.
    services.extend_pin(chain="chat", expires_at=until + timedelta(hours=5), actor="bob", reason="longer")  # v4
    conflict = review(
        oncall, "/chains/chat/extend", add_minutes="60", confirmed="yes", expected_version="3", follow=True
    )
    assert conflict.status_code == 409
    assert "changed since you loaded the page" in text(conflict.content.decode())
    assert 'name="confirmed"' in conflict.content.decode()


def test_a_select_beaten_by_the_same_select_says_there_is_nothing_to_do(oncall: Client) -> None:
    assert review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60").status_code == 200
    pin(actor="bob", expires_at=timedelta(minutes=60))  # v2
    confirmed = review(
        oncall,
        "/chains/chat/select",
        preset="pin_secondary",
        duration_minutes="60",
        confirmed="yes",
        expected_version="1",
        follow=True,
    )

    assert "chat is already pinned to pin_secondary until" in text(confirmed.content.decode())
    assert live().version == 2


# --- a shortened pin reads as shortened -----------------------------------------------------------


def test_a_shortened_pin_reads_as_shortened_on_the_card_and_in_the_history(oncall: Client) -> None:
    with time_machine.travel(datetime(2026, 11, 29, 2, 0, tzinfo=UTC), tick=False):
        pin(expires_at=timedelta(hours=8))  # v2
        services.extend_pin(
            chain="chat", expires_at=timedelta(minutes=30), shorten=True, actor="dave", reason="INC-1 over"
        )  # v3
        card = text(page_card(oncall))
        history = text(oncall.get("/chains/chat/history/").content.decode())
        services.extend_pin(chain="chat", expires_at=timedelta(hours=6), actor="erin", reason="still bad")  # v4
        extended = text(page_card(oncall))

    assert "Then shortened by dave to 02:30 UTC" in card
    assert "extended" not in card
    assert "v3 shorten" in history and "v3 extend" not in history
    assert "Then extended by erin to 08:00 UTC" in extended


# --- following "Healthier now… Review <preset>" lands in the reason box ---------------------------


def reason_input(html: str, field_id: str = "id_reason") -> str:
    match = re.search(rf'<input[^>]*id="{field_id}"[^>]*>', html)
    assert match, f"no #{field_id}"
    return match.group(0)


def test_following_the_healthier_preset_suggestion_lands_with_the_reason_focused(
    oncall: Client, reader: Client
) -> None:
    vendor_a_failing(reader)
    link = re.search(
        r'<p class="suggestion".*?<a href="([^"]+)">Review pin_secondary', oncall.get("/").content.decode()
    )
    assert link, "no suggestion to follow"
    href = unescape(link.group(1))
    # Browsers skip autofocus on a page opened at a #fragment: typing would go nowhere.
    assert "#" not in href

    landed = oncall.get(href).content.decode()

    assert "autofocus" in reason_input(landed)
    assert landed.count("autofocus") == 1
    assert re.search(r'<input type="radio" name="preset" value="pin_secondary"[^>]*checked', landed)
    # Reviewing without typing a reason says where to type it, and the box has the focus again.
    refused = review(oncall, href.split("?")[0] + "select", preset="pin_secondary", duration_minutes="60", reason="")
    assert refused.status_code == 400
    html = refused.content.decode()
    assert '<a href="#id_reason">Reason: is required' in html
    assert "autofocus" in reason_input(html) and 'aria-invalid="true"' in reason_input(html)


# --- a change posted after the session expired: said so, and what was typed kept ----------------

TYPED = "INC-77 vendor_a times out on long prompts"


def post_signed_out(client: Client, url: str, **data: Any) -> Any:
    """A change's form sent after the session expired (the review page was open meanwhile)."""
    return client.post(url, {"expected_version": str(live().version), "reason": TYPED, "confirmed": "yes", **data})


def test_the_sign_in_page_says_the_session_expired_and_nothing_was_changed(client: Client, alice: User) -> None:
    posted = post_signed_out(client, "/chains/chat/select", preset="pin_secondary", duration_minutes="60")

    assert posted.status_code == 302 and posted["Location"].startswith("/accounts/login/?next=/chains/chat/select")
    sign_in = client.get(posted["Location"]).content.decode()
    assert 'class="message message-warning"' in sign_in
    assert "Your session had expired, so nothing was changed." in text(sign_in)
    assert live().version == 1


@pytest.mark.parametrize(
    ("url", "fields", "lands_on", "field_id"),
    [
        ("/chains/chat/select", {"preset": "pin_secondary", "duration_minutes": "60"}, "/chains/chat/", "id_reason"),
        ("/chains/chat/revert", {}, "/chains/chat/", "revert_reason"),
        ("/chains/chat/extend", {"duration_minutes": "480"}, "/chains/chat/", "extend_reason"),
        ("/chains/chat/extend", {"duration_minutes": "30", "shorten": "true"}, "/chains/chat/", "shorten_reason"),
        ("/chains/chat/history/2/restore", {}, "/chains/chat/history/2/restore?review=", "confirm_reason"),
    ],
    ids=["select", "revert", "extend", "shorten", "restore"],
)
def test_signing_in_again_warns_that_nothing_was_changed_and_keeps_the_typed_reason(
    client: Client, alice: User, url: str, fields: dict[str, str], lands_on: str, field_id: str
) -> None:
    pin(expires_at=timedelta(hours=2))  # v2: something to revert, extend and restore
    posted = post_signed_out(client, url, **fields)
    client.get(posted["Location"])  # the sign-in page
    signed_in = client.post(
        "/accounts/login/", {"username": "alice", "password": "alice-pass-123", "next": url}, follow=True
    )

    assert signed_in.redirect_chain[-1][0].startswith(lands_on)
    assert all("INC-77" not in unescape(hop) for hop, _ in signed_in.redirect_chain), "the reason rides in no URL"
    html = signed_in.content.decode()
    message = re.search(r'<p class="message message-(\w+)">Nothing was changed', html)
    assert message, "no 'Nothing was changed'"
    assert message.group(1) == "warning", "styled as a success"
    assert f'value="{TYPED}"' in reason_input(html, field_id)
    assert (live().version, history_count()) == (2, 2)
    # Kept once: the next visit starts from the page's own prefill.
    assert TYPED not in client.get("/chains/chat/").content.decode()


def test_a_warning_is_not_styled_as_a_success() -> None:
    css = (Path(__file__).parents[1] / "pages" / "static" / "presets" / "app.css").read_text()

    assert re.search(r"\.message-warning[^{]*\{[^}]*--caution-bg", css)


# --- Post/Redirect/Get: Back never offers to send a change's POST again ---------------------------


def test_a_review_post_redirects_to_a_get_that_shows_it_and_back_after_confirming_changes_nothing(
    oncall: Client,
) -> None:
    posted = review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60", follow=False)

    assert posted.status_code == 302
    shown_at = posted["Location"]
    assert shown_at.startswith("/chains/chat/select?review=")
    assert "INC-4411" not in unescape(shown_at), "the reason waits in the session, not in the URL"
    for _ in range(2):  # shown, then shown again by a reload: the same review, nothing made
        shown = oncall.get(shown_at)
        assert shown.status_code == 200 and "no-store" in shown["Cache-Control"]
        html = shown.content.decode()
        assert "Pin pin_secondary for 1 h" in html
        assert f'value="{REASON}"' in reason_input(html, "confirm_reason")
        assert 'name="csrfmiddlewaretoken"' in html and 'name="expected_version" value="1"' in html
    assert (live().version, history_count()) == (1, 1)

    done = review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60", confirmed="yes")
    assert (done.status_code, done["Location"]) == (302, "/chains/chat/")
    back = oncall.get(shown_at, follow=True)  # Back to the review after confirming

    assert back.redirect_chain == [("/chains/chat/", 302)]
    assert "chat is already pinned to pin_secondary until" in text(back.content.decode())
    assert (live().version, history_count()) == (2, 2)


def test_a_refused_review_redirects_to_a_get_that_shows_the_errors(oncall: Client) -> None:
    posted = review(oncall, "/chains/chat/select", preset="pin_secondary", reason="  ", follow=False)

    assert posted.status_code == 302 and "?review=" in posted["Location"]
    shown = oncall.get(posted["Location"])
    assert shown.status_code == 400
    assert '<a href="#id_reason">Reason: is required' in shown.content.decode()


def test_a_confirmation_refused_by_the_service_is_shown_by_a_get_that_never_applies_it(oncall: Client) -> None:
    posted = review(oncall, "/chains/chat/extend", duration_minutes="60", confirmed="yes")  # not pinned

    assert posted.status_code == 302
    for _ in range(2):
        shown = oncall.get(posted["Location"])
        assert shown.status_code == 400
        assert "chat is not pinned: only a pin can be extended" in shown.content.decode()
    assert (live().version, history_count()) == (1, 1)


def test_a_conflict_on_confirming_is_shown_by_a_get_that_never_applies_it(oncall: Client) -> None:
    pin("local_only", reason="INC-9 both vendors down")  # v2, while alice looked at v1
    posted = review(
        oncall,
        "/chains/chat/select",
        preset="pin_secondary",
        duration_minutes="60",
        confirmed="yes",
        expected_version="1",
    )

    assert posted.status_code == 302
    for _ in range(2):
        shown = oncall.get(posted["Location"])
        assert shown.status_code == 409
        html = text(shown.content.decode())
        assert "Your change was not made" in html and "INC-9 both vendors down" in html
    assert (live().version, live().preset.name) == (2, "local_only")


def test_a_review_token_shows_only_its_own_change_to_its_own_session(oncall: Client, alice: User) -> None:
    posted = review(oncall, "/chains/chat/select", preset="pin_secondary", duration_minutes="60", follow=False)
    token = posted["Location"].split("?")[1]
    elsewhere = Client()
    elsewhere.force_login(alice)

    for client, url in ((oncall, f"/chains/chat/revert?{token}"), (elsewhere, posted["Location"])):
        response = client.get(url, follow=True)
        assert response.redirect_chain == [("/chains/chat/", 302)], url
        assert "Nothing was changed" in response.content.decode()
    assert live().version == 1
