"""Guarded pins on the pages, through Django's test client: the "Guard this pin" box on the pin
form (off, on with GUARD_PINS_BY_DEFAULT, on when the person came from an alert or the card's
suggestion), carried through the review to the service; the guard on the chain's card and the
dashboard's; switching it off (a reason at its field, a viewer refused); what a guard did once
it acted, until the chain changes again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from audit.alerts import raise_alert
from audit.models import AlertKind
from presets import guards, services
from presets.models import Chain, GuardState, PinGuard, Selection
from tests.health_reports import vendor_a_failing, vendor_a_healthy

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 2, 0, tzinfo=UTC)
REASON = "INC-4411 vendor_a 5xx"
# What the guard restores on the evidence audit.guards words (tests/test_guards.py weighs it).
EVIDENCE = (
    "guard: vendor_b/large did worse than vendor_a/large did before the pin, for 3 min: 48.0 % errors against "
    "1.0 % (margin 10 points). Now 48.0 % errors (120 attempts from 3 instances); before the pin 1.0 % errors "
    "(900 attempts from 3 instances)."
)


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    """Every test at 02:00 UTC on a Thursday, before anyone signs in."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.status_code
    return response.content.decode()


def text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))).strip()


def box(html: str) -> str:
    found = re.search(r'<input type="checkbox" name="guard"[^>]*>', html)
    assert found, "no guard box on the pin form"
    return found.group(0)


def box_checked(html: str) -> bool:
    return " checked" in box(html)


def part(html: str, pattern: str) -> str:
    """The first element ``pattern`` opens, as text ("" when there is none)."""
    found = re.search(pattern + r".*?</(?:p|div)>", html, re.S)
    return text(found.group(0)) if found else ""


def dashboard_card(html: str, chain: str = "chat") -> str:
    found = re.search(rf'<section class="card[^"]*" aria-labelledby="chain-{chain}".*?</section>', html, re.S)
    assert found, f"no card of {chain}"
    return found.group(0)


def live_card(html: str) -> str:
    found = re.search(r'<section class="card[^"]*" aria-labelledby="live-heading".*?</section>', html, re.S)
    assert found, "no live card"
    return found.group(0)


def pin_data(**fields: str) -> dict[str, str]:
    """The pin form as the chain page posts it: with the box (``guard_asked``), unticked."""
    return {
        "preset": "pin_secondary",
        "duration_minutes": "60",
        "reason": REASON,
        "expected_version": "1",
        "guard_asked": "True",
        **fields,
    }


def review_and_pin(client: Client, data: dict[str, str]) -> tuple[str, Any]:
    """The review page of ``data``, then the confirmation the review page posts (its hidden fields)."""
    review = client.post("/chains/chat/select", data, follow=True).content.decode()
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', review))
    hidden.pop("csrfmiddlewaretoken", None)
    done = client.post("/chains/chat/select", {**hidden, "reason": REASON, "confirmed": "yes"}, follow=True)
    return review, done


def guarded_pin(by: str = "alice") -> PinGuard:
    services.select_preset(
        chain="chat", preset="pin_secondary", actor=by, reason=REASON, expires_at=timedelta(hours=2), guard=True
    )
    return PinGuard.objects.get(chain__name="chat", pin_version=Selection.objects.get(chain__name="chat").version)


def provider_alert(kind: str = AlertKind.PROVIDER_FAILING) -> None:
    raise_alert(
        kind=kind,
        chain=Chain.objects.get(name="chat"),
        version=1,
        message="vendor_a/large on chat: 48 % errors",
        details={},
        now=timezone.now(),
        subject="vendor_a/large",
    )


# --- the box on the pin form ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "by_default", "checked"),
    [
        ("/chains/chat/?preset=pin_secondary", False, False),
        ("/chains/chat/?preset=pin_secondary", True, True),
        ("/chains/chat/?preset=pin_secondary&from=alert", False, True),
        ("/chains/chat/?from=alert", False, True),
    ],
    ids=["off-by-default", "on-with-the-setting", "on-from-an-alert", "on-from-an-alert-without-a-preset"],
)
def test_the_guard_box_is_ticked_by_the_setting_or_when_coming_from_an_alert(
    oncall: Client, settings: Any, url: str, by_default: bool, checked: bool
) -> None:
    settings.GUARD_PINS_BY_DEFAULT = by_default
    html = page(oncall, url)

    assert box_checked(html) is checked
    assert 'aria-describedby="id_guard_helptext"' in box(html)
    assert "For its first 30 min: if the fleet finds the pin's first step clearly worse" in text(html)


def test_coming_from_an_alert_puts_the_typing_in_the_pin_forms_reason_even_on_a_pinned_chain(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="carol", reason="INC-1")
    html = page(oncall, "/chains/chat/?from=alert")

    reason = re.search(r'<input[^>]*id="id_reason"[^>]*>', html)
    assert reason and " autofocus" in reason.group(0), "the pin form's reason does not take the focus"
    assert not re.search(r'<input[^>]*id="revert_reason"[^>]*autofocus', html)


@pytest.mark.parametrize("kind", [AlertKind.PROVIDER_FAILING, AlertKind.PROVIDER_CREDENTIALS])
def test_an_open_provider_alert_leads_on_call_to_the_pin_form_with_the_box_ticked(
    oncall: Client, viewer: Client, kind: str
) -> None:
    provider_alert(kind)
    link = re.search(
        r'<a class="button" href="([^"]+)">Pin another preset on chat, guarded…</a>', page(oncall, "/alerts/")
    )

    assert link, "no link to a guarded pin on the alert"
    assert unescape(link.group(1)) == "/chains/chat/?from=alert"
    assert box_checked(page(oncall, unescape(link.group(1))))
    assert "Pin another preset" not in page(viewer, "/alerts/")


def test_the_cards_healthier_now_suggestion_leads_to_the_box_ticked(oncall: Client, reader: Client) -> None:
    vendor_a_failing(reader)
    suggestion = re.search(r'<p class="suggestion".*?href="([^"]+)"', dashboard_card(page(oncall, "/")), re.S)

    assert suggestion, "no suggestion on chat's card"
    url = unescape(suggestion.group(1))
    assert url == "/chains/chat/?preset=pin_secondary&from=alert"
    assert box_checked(page(oncall, url))


# --- carried through the review to the service -------------------------------------------------


def test_a_ticked_box_is_reviewed_as_guarded_and_makes_the_guard(oncall: Client, reader: Client) -> None:
    vendor_a_healthy(reader)  # evidence enough to judge the pin by
    review, done = review_and_pin(oncall, pin_data(guard="on"))

    assert part(review, r'<p class="guard-note[^"]*" id="guard-note">') == (
        "Guarded for 30 min: if vendor_b/large does clearly worse than vendor_a/large did before the pin, "
        "normal (v1) is restored, once."
    )
    assert '<span class="badge badge-guard">Guarded</span>' in review  # on "After you confirm"
    assert done.status_code == 200 and done.redirect_chain[-1][0] == "/chains/chat/"
    guard = PinGuard.objects.get(chain__name="chat")
    assert (guard.pin_version, guard.state, guard.pinned_by) == (2, GuardState.WATCHING, "alice")
    assert guard.bake_until == T0 + timedelta(minutes=30)


@pytest.mark.parametrize("evidence", ["failing", "none"])
def test_the_review_says_the_guard_will_not_act_where_it_could_not(
    oncall: Client, reader: Client, evidence: str
) -> None:
    # The pin made from a provider alert, whose head is failing: restoring it would not help.
    if evidence == "failing":
        vendor_a_failing(reader)
    review, done = review_and_pin(oncall, pin_data(guard="on"))

    note = part(review, r'<p class="guard-note[^"]*" id="guard-note">')
    why = (
        "vendor_a/large is failing now (50.0 % errors, p95 2500 ms (300 attempts from 3 instances)): restoring it "
        "would not help"
        if evidence == "failing"
        else "there is too little evidence about vendor_a/large now to judge by (no errors (0 attempts from 0 "
        "instances); needs 20 attempts from 3 instances)"
    )
    assert note == f"The guard will not act: {why}. Nothing undoes this pin by itself."
    assert '<span class="badge badge-guard">Guarded</span>' not in review
    assert done.status_code == 200 and Selection.objects.get(chain__name="chat").version == 2


@pytest.mark.parametrize("by_default", [False, True], ids=["setting-off", "setting-on"])
def test_an_unticked_box_is_reviewed_as_not_guarded_and_makes_no_guard_whatever_the_setting(
    oncall: Client, settings: Any, by_default: bool
) -> None:
    settings.GUARD_PINS_BY_DEFAULT = by_default
    review, done = review_and_pin(oncall, pin_data())

    assert part(review, r'<p class="guard-note[^"]*" id="guard-note">') == (
        "Not guarded: nothing undoes this pin by itself before its expiry."
    )
    assert done.status_code == 200 and Selection.objects.get(chain__name="chat").version == 2
    assert not PinGuard.objects.exists()


@pytest.mark.parametrize("by_default", [False, True], ids=["setting-off", "setting-on"])
def test_a_form_sent_without_the_box_is_guarded_as_the_setting_says(
    oncall: Client, settings: Any, by_default: bool
) -> None:
    settings.GUARD_PINS_BY_DEFAULT = by_default
    data = pin_data()
    del data["guard_asked"]  # a page loaded before the box existed
    review_and_pin(oncall, data)

    assert PinGuard.objects.filter(chain__name="chat").exists() is by_default


def test_a_pin_that_keeps_the_head_is_reviewed_as_unguarded_and_gets_no_guard(oncall: Client) -> None:
    review, done = review_and_pin(oncall, pin_data(preset="drop_vendor_b", guard="on"))

    assert part(review, r'<p class="guard-note[^"]*" id="guard-note">') == (
        "Not guarded: the pin keeps the first step vendor_a/large, so the guard would have nothing to compare."
    )
    assert done.status_code == 200 and Selection.objects.get(chain__name="chat").preset.name == "drop_vendor_b"
    assert not PinGuard.objects.exists()


def test_a_refused_pin_keeps_the_box_as_it_was_sent(oncall: Client) -> None:
    refused = oncall.post("/chains/chat/select", pin_data(guard="on", reason="  "), follow=True)

    assert refused.status_code == 400
    assert box_checked(refused.content.decode())
    refused = oncall.post("/chains/chat/select", pin_data(reason="  "), follow=True)
    assert not box_checked(refused.content.decode())


def test_signing_in_again_mid_pin_keeps_the_box_as_it_was(client: Client, alice: User, settings: Any) -> None:
    settings.GUARD_PINS_BY_DEFAULT = True
    posted = client.post("/chains/chat/select", {**pin_data(), "confirmed": "yes"})  # unticked, signed out
    client.get(posted["Location"])
    signed_in = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "alice-pass-123", "next": "/chains/chat/select"},
        follow=True,
    )

    assert signed_in.redirect_chain[-1][0] == "/chains/chat/"
    assert not box_checked(signed_in.content.decode())
    assert not PinGuard.objects.exists()


# --- the guard on the cards -------------------------------------------------------------------


def test_the_chain_card_shows_the_guard_its_line_and_its_end_on_both_clocks(oncall: Client) -> None:
    guarded_pin()
    card = live_card(page(oncall, "/chains/chat/"))

    assert part(card, r'<div class="guard guard-watching" id="guard">\s*<p') == (
        "Guard watching Guarded until 02:30 UTC: restores v1 normal if vendor_b/large does clearly worse than "
        "vendor_a/large did"
    )
    # The script writes the browser's clock into the place beside the UTC time (as a plan's).
    assert (
        '<time datetime="2026-12-10T02:30:00Z">02:30 UTC</time><span class="local-time" '
        'data-local="2026-12-10T02:30:00Z" data-local-prefix="your time: "></span>' in card
    )
    assert '<span class="badge badge-guard">Guarded</span>' in card
    assert "Switch the guard off…" in card


def test_the_dashboard_marks_a_watching_guard_only(oncall: Client) -> None:
    assert "Guarded" not in dashboard_card(page(oncall, "/"))
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON, guard=False)
    assert "Guarded" not in dashboard_card(page(oncall, "/"))

    services.revert_to_default(chain="chat", actor="alice", reason="INC-4411 over")
    guard = guarded_pin()
    assert '<span class="badge badge-guard">Guarded</span>' in dashboard_card(page(oncall, "/"))
    assert "Guarded" not in dashboard_card(page(oncall, "/"), "incident-summary")
    services.extend_pin(chain="chat", expires_at=timedelta(hours=3), actor="alice", reason="INC-4411 longer")
    assert "Guarded" in dashboard_card(page(oncall, "/")), "an extension keeps the guard"

    guards.switch_off(chain="chat", actor="alice", reason="slow on purpose")
    assert "Guarded" not in dashboard_card(page(oncall, "/"))
    assert PinGuard.objects.get(pk=guard.pk).state == GuardState.OFF


def test_a_new_pin_replacing_a_guarded_one_is_not_marked_guarded(oncall: Client) -> None:
    guarded_pin()
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="carol", reason="INC-5", guard=False)

    assert "Guarded" not in dashboard_card(page(oncall, "/"))
    assert 'id="guard"' not in page(oncall, "/chains/chat/")


# --- switching it off -------------------------------------------------------------------------


def test_switching_the_guard_off_takes_one_post_with_a_reason_and_says_so(oncall: Client) -> None:
    guard = guarded_pin()
    done = oncall.post("/chains/chat/guard/off", {"reason": "vendor_b is slow on purpose tonight"})

    assert done.status_code == 302 and done["Location"] == "/chains/chat/#guard"
    html = page(oncall, done["Location"])
    assert "The guard on chat's pin (v2) is off: it will not undo this pin." in text(html)
    guard.refresh_from_db()
    assert (guard.state, guard.state_reason) == (
        GuardState.OFF,
        "switched off by alice: vendor_b is slow on purpose tonight",
    )
    assert part(live_card(html), r'<div class="guard guard-off" id="guard">\s*<p') == (
        "Guard off Switched off by alice: vendor_b is slow on purpose tonight"
    )
    assert "Switch the guard off" not in html and "Guarded</span>" not in html


def test_switching_off_without_a_reason_is_refused_at_the_field(oncall: Client) -> None:
    guarded_pin()
    refused = oncall.post("/chains/chat/guard/off", {"reason": "  "}, follow=True)

    assert refused.status_code == 400
    html = refused.content.decode()
    assert "The guard was not switched off. Fix this and try again:" in text(html)
    error = re.search(r'<p class="field-error" id="guard_reason_error">(.*?)</p>', html, re.S)
    assert error and text(error.group(1)) == "is required: say why (e.g. the incident number)"
    assert re.search(r'<details class="guard-switch" open>', html), "the form is not open at its error"
    assert PinGuard.objects.get().state == GuardState.WATCHING


@pytest.mark.parametrize("meanwhile", ["switched-off", "reverted"])
def test_switching_off_a_guard_that_stopped_meanwhile_is_refused_and_says_why(oncall: Client, meanwhile: str) -> None:
    guarded_pin()
    if meanwhile == "switched-off":
        guards.switch_off(chain="chat", actor="carol", reason="INC-4411 slow on purpose")
        why = "chat's live pin (v2) has no guard on to switch off"
    else:
        services.revert_to_default(chain="chat", actor="carol", reason="INC-4411 over")
        why = "chat serves its default (v3): no pin, no guard to switch off"
    refused = oncall.post("/chains/chat/guard/off", {"reason": "slow on purpose"}, follow=True)

    assert refused.status_code == 400
    assert why in text(refused.content.decode())


def test_a_viewer_sees_the_guard_without_the_switch_and_may_not_post_it(viewer: Client) -> None:
    guarded_pin()
    html = page(viewer, "/chains/chat/")

    assert "Guard watching" in text(html) and "Switch the guard off" not in html
    assert viewer.post("/chains/chat/guard/off", {"reason": "no"}).status_code == 403
    assert PinGuard.objects.get().state == GuardState.WATCHING


def test_the_switchs_reason_typed_before_the_session_expired_is_filled_in_again(client: Client, alice: User) -> None:
    guarded_pin()
    posted = client.post("/chains/chat/guard/off", {"reason": "INC-4411 slow on purpose"})
    client.get(posted["Location"])
    signed_in = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "alice-pass-123", "next": "/chains/chat/guard/off"},
        follow=True,
    )

    html = signed_in.content.decode()
    assert signed_in.redirect_chain[-1][0] == "/chains/chat/"
    assert re.search(r'<details class="guard-switch" open>', html)
    assert re.search(r'<input[^>]*value="INC-4411 slow on purpose"[^>]*id="guard_reason"', html)
    assert PinGuard.objects.get().state == GuardState.WATCHING


# --- what a guard did -------------------------------------------------------------------------


def test_what_a_guard_did_is_on_both_cards_until_the_chain_changes_again(oncall: Client, clock: Any) -> None:
    guard = guarded_pin()
    clock.move_to(T0 + timedelta(minutes=9))
    restored = guards.restore(guard=guard.pk, reason=EVIDENCE, evidence={})
    assert restored is not None and restored.version == 3

    said = "The guard undid pin pin_secondary (v2 by alice) at 02:09 UTC: restored normal as v3: " + EVIDENCE
    chain_html = page(oncall, "/chains/chat/")
    assert part(live_card(chain_html), r'<p class="guard-acted">') == said
    assert (
        '<time datetime="2026-12-10T02:09:00Z">02:09 UTC</time><span class="local-time" '
        'data-local="2026-12-10T02:09:00Z" data-local-prefix="your time: "></span>' in chain_html
    )
    assert 'id="guard"' not in chain_html  # the restored default has no guard of its own
    card = dashboard_card(page(oncall, "/"))
    assert part(card, r'<p class="guard-acted">') == said
    assert "Guarded</span>" not in card

    services.select_preset(chain="chat", preset="drop_vendor_b", actor="carol", reason="INC-5")
    assert "The guard undid" not in page(oncall, "/chains/chat/")
    assert "The guard undid" not in page(oncall, "/")


def test_a_restored_pin_extended_since_no_longer_shows_what_the_guard_did(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="carol", reason="INC-1")  # v2, vendor_a head
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON, guard=True)  # v3
    guard = PinGuard.objects.get()
    restored = guards.restore(guard=guard.pk, reason=EVIDENCE, evidence={})
    assert restored is not None and (restored.version, restored.preset.name) == (4, "drop_vendor_b")
    assert "The guard undid pin pin_secondary (v3 by alice)" in text(page(oncall, "/chains/chat/"))

    services.extend_pin(chain="chat", expires_at=timedelta(hours=5), actor="carol", reason="INC-1 longer")
    assert "The guard undid" not in page(oncall, "/chains/chat/")
