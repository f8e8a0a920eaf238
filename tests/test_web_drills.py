"""Failover drills on the on-call pages, through Django's test client: the chain page's Drills
card (the form with the chain's hops and the faults in words, the running drill with the
fleet's counts, the planned ones, the recent ones), starting and planning in one POST each,
the domain's refusals at their field with nothing written (a pinned chain, one drill at a
time), aborting and cancelling from the card and from the report, what a viewer sees and may
not do, the report page for every verdict with its plots, and each preset's and each chain's
last drill."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
import time_machine
from django.test import Client

from audit import drills as fleet_drills
from audit.models import Alert, AlertKind, FleetInstance
from pages import plots
from presets import drills, services
from presets.models import Chain, Drill, Selection, ServiceToken
from presets.wire import LATENCY_BOUNDS_MS
from tests.conftest import make_token

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 12, 10, 1, 0, tzinfo=UTC)
REASON = "Q4 failover drill of vendor_a"
BUCKETS = len(LATENCY_BOUNDS_MS) + 1


@pytest.fixture(autouse=True)
def clock() -> Iterator[Any]:
    """Every test at T0, before anyone signs in."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def live(chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain)


def text(html: str) -> str:
    """``html`` as words; a term, a cell and an item end with a space."""
    html = re.sub(r"</(dt|dd|th|td|li)>", r" </\1>", html)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))).strip()


def field_error(html: str, field_id: str) -> str:
    match = re.search(rf'<p class="field-error" id="{field_id}_error">(.*?)</p>', html, re.S)
    return text(match.group(1)) if match else ""


def section(html: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}".*?</section>', html, re.S)
    assert match, f"no section {section_id}"
    return match.group()


def drills_card(html: str) -> str:
    """The chain page's Drills card (its last </section>, the card holding no other)."""
    match = re.search(r'<section id="drills".*?</section>\s*<p><a href="/chains/', html, re.S)
    assert match, "no Drills card"
    return match.group()


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    html = response.content.decode()
    assert "{#" not in html and "{%" not in html, f"a template comment or tag shows on {url}"
    return html


def drill_data(**fields: str) -> dict[str, str]:
    return {
        "hop": "1",
        "fault": "server_error",
        "share": "10",
        "services": "",
        "minutes": "15",
        "zone": "UTC",
        "starts_at": "",
        "repeat_days": "",
        "reason": REASON,
        **fields,
    }


def start(**kw: Any) -> Drill:
    values: dict[str, Any] = {"chain": "chat", "hop": 1, "fault": "server_error", "share": 10, "reason": REASON}
    values.update(kw)
    return fleet_drills.start_drill(actor=values.pop("actor", "carol"), **values)


def report(drill: Drill, client: str = "checkout/pod-0", *, token: str = "checkout", **counts: Any) -> None:
    section_ = fleet_drills.Section(id=drill.pk, **counts)
    chain = Chain.objects.get(name=drill.chain.name)
    now = counts.pop("now", datetime.now(UTC))
    assert fleet_drills.record(chain=chain, token=token, client=client, section=section_, now=now)
    fleet_drills.check_stop(drill=drill.pk, now=now)


def latency(*counts: int) -> tuple[int, ...]:
    return (*counts, *(0,) * (BUCKETS - len(counts)))


def judged(clock: Any, drill: Drill) -> Drill:
    """``drill`` run to its end and judged by the beat's sweep."""
    clock.move_to(drill.ends_at + timedelta(seconds=1))
    fleet_drills.run_drills()
    clock.move_to(drill.ends_at + timedelta(seconds=20))
    fleet_drills.run_drills()
    drill.refresh_from_db()
    assert drill.is_judged, drill.verdict
    return drill


def passed(clock: Any, **kw: Any) -> Drill:
    drill = start(minutes=5, **kw)
    report(drill, requests=100, drilled=10, ended_on={"2": 10})
    return judged(clock, drill)


# --- the card --------------------------------------------------------------------------------------


def test_the_card_offers_every_hop_but_the_last_and_the_six_faults_in_words(oncall: Client) -> None:
    card = drills_card(page(oncall, "/chains/chat/"))
    form = re.search(r'<form method="post" action="/chains/chat/drills".*?</form>', card, re.S).group()
    hops = re.search(r'<select name="hop".*?</select>', form, re.S).group()
    assert re.findall(r'<option value="(\d)"[^>]*>([^<]*)</option>', hops) == [
        ("1", "Hop 1: vendor_a/large (then vendor_b/large)"),
        ("2", "Hop 2: vendor_b/large (then self_hosted/8b)"),
    ]
    faults = re.search(r'<select name="fault".*?</select>', form, re.S).group()
    assert re.findall(r"<option[^>]*>([^<]*)</option>", faults) == [
        "Server error (HTTP 500)",
        "Rate limiting (HTTP 429)",
        "No answer (a timeout)",
        "First chunk too late",
        "Stream cut before its first chunk",
        "Empty or invalid answer",
    ]
    assert 'name="share" value="10"' in form and 'name="minutes" value="15"' in form
    assert "How long it runs: at most 1 h." in text(form)
    assert 'type="datetime-local"' in form and "data-plan-times" in form and "data-unbound" in form
    assert "Empty: now." in text(form) and "Empty: once." in text(form)
    assert "No drill is running or planned on chat." in text(card)
    assert "normal (default): never drilled" in text(card)
    assert "chat has not been drilled yet." in text(card)


def test_a_chain_of_one_step_has_nothing_to_drill(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="local_only", actor="carol", reason="INC-1")
    card = drills_card(page(oncall, "/chains/chat/"))
    assert "chat serves one step: there is nothing to fall back to, so nothing to drill." in text(card)
    assert 'action="/chains/chat/drills"' not in card


# --- starting and planning -------------------------------------------------------------------------


def test_starting_a_drill_runs_it_at_once_and_lands_on_its_report(oncall: Client) -> None:
    response = oncall.post("/chains/chat/drills", drill_data(share="2.5"))

    drill = Drill.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/drills/{drill.pk}/"
    assert (drill.state, drill.hop, drill.fault, drill.share_bp, drill.services, drill.created_by) == (
        "running",
        1,
        "server_error",
        250,
        [],
        "alice",
    )
    assert (drill.starts_at, drill.ends_at, drill.started_version) == (T0, T0 + timedelta(minutes=15), 2)
    html = page(oncall, response["Location"])
    assert "Verdict: Running" in text(html)
    assert (
        f"Drill #{drill.pk} started on chat (v2): hop 1 (vendor_a/large) fails with a server error (HTTP 500) "
        "for 2.5 % of requests of every service, until 01:15 UTC." in text(html)
    )


def test_starting_names_the_services_by_their_tokens(oncall: Client) -> None:
    make_token("checkout", "read")
    make_token("search", "read")
    response = oncall.post("/chains/chat/drills", drill_data(services="checkout, search", share="2.5"))
    assert response.status_code == 302
    drill = Drill.objects.get()
    assert (drill.state, drill.hop, drill.fault, drill.share_bp, drill.services) == (
        "running",
        1,
        "server_error",
        250,
        ["checkout", "search"],
    )
    assert (live().version, live().action, live().updated_by) == (2, "drill", "alice")
    assert live().to_document()["drill"]["id"] == drill.pk
    assert len(drill.service_digests) == 2


def test_planning_a_drill_lands_on_it_on_the_chain_page(oncall: Client) -> None:
    response = oncall.post(
        "/chains/chat/drills",
        drill_data(zone="Europe/Paris", starts_at="2026-12-10T04:30", minutes="30", repeat_days="7", hop="2"),
    )

    drill = Drill.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/chains/chat/#drill-{drill.pk}"
    assert (drill.state, drill.starts_at, drill.ends_at, drill.repeat_days) == (
        "planned",
        datetime(2026, 12, 10, 3, 30, tzinfo=UTC),
        datetime(2026, 12, 10, 4, 0, tzinfo=UTC),
        7,
    )
    assert live().version == 1  # nothing is in the document until its start
    html = oncall.get(response["Location"]).content.decode()
    assert f"Drill #{drill.pk} planned on chat from 03:30 UTC to 04:00 UTC: hop 2 (vendor_b/large)" in text(html)
    item = text(re.search(rf'<li class="drill drill-planned" id="drill-{drill.pk}".*?</li>', html, re.S).group())
    assert f"Drill #{drill.pk} Planned" in item
    assert "Starts Thu 10 Dec 03:30 UTC" in item and "Ends Thu 10 Dec 04:00 UTC" in item
    assert "Repeats every 7 days" in item and f"Why {REASON}" in item
    assert f"Cancel drill #{drill.pk}" in item
    assert 'data-local="2026-12-10T03:30:00Z"' in html


@pytest.mark.parametrize(
    ("fields", "field_id", "error"),
    [
        ({"hop": "3"}, "drill_hop", "hop 3 would leave chat nothing to fall back to (3 step(s))"),
        ({"share": "30"}, "drill_share", "30 % is out of range: drill from 0.1 % to 25 % of requests"),
        ({"share": "many"}, "drill_share", "'many' is not a number"),
        ({"share": ""}, "drill_share", "give the share of requests to drill, in percent"),
        ({"minutes": "61"}, "drill_minutes", "61 is out of range: give a whole number from 1 to 60"),
        ({"services": "nobody"}, "drill_services", "no live token named nobody"),
        ({"fault": "meteor"}, "drill_fault", "'meteor' is not a fault a drill knows"),
        ({"reason": "  "}, "drill_reason", "is required"),
        ({"starts_at": "2026-12-10T00:30"}, "drill_starts_at", "00:30 UTC"),
        ({"starts_at": "tomorrow"}, "drill_starts_at", "not a date and time"),
        ({"repeat_days": "0.5"}, "drill_repeat_days", "is not a whole number"),
    ],
    ids=[
        "last-hop",
        "share-too-big",
        "share-not-a-number",
        "no-share",
        "too-long",
        "unknown-service",
        "unknown-fault",
        "blank-reason",
        "start-passed",
        "start-not-a-time",
        "repeat-not-whole",
    ],
)
def test_a_refused_drill_says_why_at_its_field_and_writes_nothing(
    oncall: Client, fields: dict[str, str], field_id: str, error: str
) -> None:
    posted = oncall.post("/chains/chat/drills", drill_data(**fields))
    assert posted.status_code == 302 and posted["Location"].startswith("/chains/chat/drills?review=")

    response = oncall.get(posted["Location"])
    assert response.status_code == 400
    html = response.content.decode()
    assert error in field_error(html, field_id), text(html)[:3000]
    assert "No drill was started. Fix this and try again" in text(html)
    assert (Drill.objects.count(), live().version) == (0, 1)
    # What was typed is kept, the reason focused.
    if fields.get("reason") is None:
        assert f'value="{REASON}"' in html
        assert re.search(r'<input type="text" name="reason"[^>]*autofocus[^>]*id="drill_reason"', html)


def test_a_drill_is_refused_while_the_chain_is_pinned_and_nothing_is_half_applied(oncall: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason="INC-9")

    response = oncall.post("/chains/chat/drills", drill_data(), follow=True)

    assert response.status_code == 409
    html = response.content.decode()
    form = re.search(r'<form method="post" action="/chains/chat/drills".*?</form>', html, re.S).group()
    refusal = text(re.search(r'<p class="field-error">(.*?)</p>', form, re.S).group(1))
    assert refusal.startswith("chat: the drill cannot start now: it serves the pin pin_secondary (v2 by carol) until")
    assert "a drill never runs while the chain is pinned: revert the pin first, or plan the drill after it" in refusal
    assert "05:00 UTC (in 4 h)" in refusal  # the pin's end, in the pages' words
    assert "No drill was started" in text(html)
    assert (Drill.objects.count(), live().version, live().preset.name) == (0, 2, "pin_secondary")


def test_one_drill_at_a_time_on_a_chain(oncall: Client) -> None:
    first = start()
    response = oncall.post("/chains/chat/drills", drill_data(hop="2"), follow=True)
    assert response.status_code == 409
    refusal = text(re.search(r'<p class="field-error">(.*?)</p>', response.content.decode(), re.S).group(1))
    assert refusal.startswith(f"chat: drill {first.pk} is running from 01:00 UTC")
    assert refusal.endswith("one drill at a time on a chain: abort it first, or pick a window after it")
    assert list(Drill.objects.values_list("pk", flat=True)) == [first.pk]


def test_a_provider_alert_open_on_the_chain_refuses_a_start(oncall: Client) -> None:
    chain = Chain.objects.get(name="chat")
    Alert.objects.create(
        kind=AlertKind.PROVIDER_FAILING, chain=chain, version=1, subject="vendor_b/large", message="x", details={}
    )
    response = oncall.post("/chains/chat/drills", drill_data(), follow=True)
    assert response.status_code == 409
    assert "the provider alert on vendor_b/large (provider_failing" in text(response.content.decode())
    assert not Drill.objects.exists()


def test_a_drill_sent_after_the_session_expired_is_filled_in_again_once_signed_in(client: Client, alice: Any) -> None:
    sent = client.post("/chains/chat/drills", drill_data(hop="2", share="3", starts_at="2026-12-10T04:00"))
    login = sent["Location"]
    assert login.startswith("/accounts/login/?next=/chains/chat/drills")

    signed_in = client.post(
        login, {"username": "alice", "password": "alice-pass-123", "next": "/chains/chat/drills"}, follow=True
    )

    assert signed_in.redirect_chain[-1] == ("/chains/chat/", 302)
    html = signed_in.content.decode()
    assert "Nothing was changed on chat: your session had expired" in text(html)
    form = re.search(r'<form method="post" action="/chains/chat/drills".*?</form>', html, re.S).group()
    assert f'value="{REASON}"' in form and 'name="share" value="3"' in form and 'value="2026-12-10T04:00"' in form
    assert re.search(r'<option value="2" selected>', form) and "data-unbound" not in form
    assert re.search(r'<input type="text" name="reason"[^>]*autofocus[^>]*id="drill_reason"', form)
    assert not Drill.objects.exists()


def test_a_get_of_a_drill_url_changes_nothing_and_lands_on_the_chain_page(oncall: Client) -> None:
    drill = start()
    for url in ("/chains/chat/drills", f"/chains/chat/drills/{drill.pk}/abort"):
        response = oncall.get(url, follow=True)
        assert response.redirect_chain == [("/chains/chat/", 302)], url
        assert "Nothing was changed" in response.content.decode()
    drill.refresh_from_db()
    assert drill.state == "running"


# --- the running drill on the card ------------------------------------------------------------------


def test_the_running_drill_shows_the_fleets_counts_and_its_report(oncall: Client) -> None:
    drill = start()
    report(drill, requests=60, drilled=6, ended_on={"2": 6})
    report(drill, "checkout/pod-1", requests=40, drilled=4, ended_on={"2": 4})

    html = page(oncall, "/chains/chat/")
    item = text(re.search(rf'<li class="drill drill-running" id="drill-{drill.pk}".*?</li>', html, re.S).group())
    assert f"Drill #{drill.pk} Running" in item
    assert "Hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests of every service." in item
    assert "Drilled 10 of 100 requests (10.0 %), 0 failed for the caller, 2 instances taking part." in item
    assert "(ends in 15 min)" in item and "By carol" in item
    assert f'href="/drills/{drill.pk}/"' in html and f"Watch drill #{drill.pk}'s report" in item
    assert f"Abort drill #{drill.pk}" in item
    # The live card says so too.
    card = text(re.search(r'<section class="card.*?</section>', html, re.S).group())
    assert f"Drill running Drill #{drill.pk}: watch its report" in card


def test_aborting_from_the_card_takes_it_out_at_once(oncall: Client) -> None:
    drill = start()
    html = page(oncall, "/chains/chat/")
    form = re.search(rf'<form method="post" action="/chains/chat/drills/{drill.pk}/abort".*?</form>', html, re.S)
    assert 'value="stopped by hand"' in form.group() and 'name="back" value="chain"' in form.group()

    response = oncall.post(
        f"/chains/chat/drills/{drill.pk}/abort", {"reason": "checkout latency up", "back": "chain"}, follow=True
    )

    assert response.redirect_chain == [(f"/chains/chat/#drill-{drill.pk}", 302)]
    drill.refresh_from_db()
    assert (drill.state, drill.verdict, drill.reasons) == (
        "ended",
        "aborted",
        ["aborted by alice: checkout latency up"],
    )
    assert "drill" not in live().to_document() and live().updated_by == "alice"
    words = text(response.content.decode())
    assert f"Drill #{drill.pk} on chat aborted: chat is now v3, without it." in words
    recent = text(re.search(r'<ul class="drill-list">.*?</ul>', response.content.decode(), re.S).group())
    assert f"Drill #{drill.pk} Aborted Thu 10 Dec 01:00 UTC at v2, by carol" in recent
    assert "aborted by alice: checkout latency up" in recent
    assert f'action="/chains/chat/drills/{drill.pk}/abort"' not in response.content.decode()


def test_aborting_from_the_report_lands_back_on_it(oncall: Client) -> None:
    drill = start()
    html = page(oncall, f"/drills/{drill.pk}/")
    assert 'name="back" value="report"' in html and 'data-live-every="5000"' in html

    response = oncall.post(
        f"/chains/chat/drills/{drill.pk}/abort", {"reason": "stopped by hand", "back": "report"}, follow=True
    )

    assert response.redirect_chain == [(f"/drills/{drill.pk}/", 302)]
    html = response.content.decode()
    assert text(section(html, "drill-verdict")) == "Verdict: Aborted Aborted by alice: stopped by hand"
    assert "Abort drill" not in html and "data-live-every" not in html


def test_an_abort_without_a_reason_is_refused_at_its_field(oncall: Client) -> None:
    drill = start()
    # Shown again where it was sent from: the chain page's card, or the report.
    for back, shown in (("chain", '<section id="drills"'), ("report", f'data-drill-report="{drill.pk}"')):
        response = oncall.post(f"/chains/chat/drills/{drill.pk}/abort", {"reason": " ", "back": back}, follow=True)
        assert response.status_code == 400, back
        assert response.redirect_chain[0][0].startswith(f"/chains/chat/drills/{drill.pk}/abort?review="), back
        html = response.content.decode()
        assert shown in html, back
        assert "is required" in field_error(html, f"drill{drill.pk}_abort_reason"), back
        assert f"Drill #{drill.pk} was not aborted. Fix this and try again" in text(html)
        assert f'<form method="post" action="/chains/chat/drills/{drill.pk}/abort"' in html
    drill.refresh_from_db()
    assert drill.state == "running"


def test_aborting_a_drill_that_ended_meanwhile_says_so(oncall: Client) -> None:
    drill = start()
    drills.abort_drill(drill=drill.pk, actor="carol", reason="customer demo")
    response = oncall.post(f"/chains/chat/drills/{drill.pk}/abort", {"reason": "stop", "back": "report"}, follow=True)
    assert response.status_code == 400
    html = response.content.decode()
    summary = text(re.search(r'<div class="error-summary".*?</div>', html, re.S).group())
    assert f"Drill #{drill.pk} was not aborted" in summary
    assert f"drill {drill.pk} has already ended (aborted); nothing to abort" in summary
    assert "Verdict: Aborted" in text(html) and f"Abort drill #{drill.pk}" not in html
    assert Drill.objects.get(pk=drill.pk).reasons == ["aborted by carol: customer demo"]


def test_cancelling_a_planned_drill(oncall: Client) -> None:
    drill = start(start=T0 + timedelta(hours=2))
    response = oncall.post(
        f"/chains/chat/drills/{drill.pk}/abort", {"reason": "not needed any more", "back": "chain"}, follow=True
    )
    assert response.redirect_chain == [(f"/chains/chat/#drill-{drill.pk}", 302)]
    assert f"Drill #{drill.pk} on chat cancelled: it will not start." in text(response.content.decode())
    drill.refresh_from_db()
    assert (drill.verdict, drill.reasons) == ("aborted", ["cancelled before its start by alice: not needed any more"])
    assert live().version == 1


def test_an_unknown_drill_or_one_of_another_chain_is_not_found(oncall: Client) -> None:
    drill = start()
    assert oncall.get("/drills/999/").status_code == 404
    assert oncall.post("/chains/chat/drills/999/abort", {"reason": "r"}).status_code == 404
    assert oncall.post(f"/chains/incident-summary/drills/{drill.pk}/abort", {"reason": "r"}).status_code == 404
    assert oncall.post("/chains/nope/drills", drill_data()).status_code == 404
    assert Drill.objects.get().state == "running"


# --- viewers ---------------------------------------------------------------------------------------


def test_a_viewer_sees_the_drills_but_no_form_or_button(viewer: Client) -> None:
    drill = start()
    card = drills_card(page(viewer, "/chains/chat/"))
    assert f'id="drill-{drill.pk}"' in card and "Running" in card
    assert "<form" not in card and "<button" not in card and "Start or plan a drill" not in card
    report_page = page(viewer, f"/drills/{drill.pk}/")
    assert "Verdict: Running" in text(report_page)
    assert "<button" not in report_page.split('<main id="main"')[1] and "Abort drill" not in report_page


@pytest.mark.parametrize("action", ["start", "abort"])
def test_a_viewers_post_is_forbidden_and_changes_nothing(viewer: Client, action: str) -> None:
    drill = start()
    url = "/chains/chat/drills" if action == "start" else f"/chains/chat/drills/{drill.pk}/abort"
    response = viewer.post(url, {**drill_data(hop="2"), "back": "report"})
    assert response.status_code == 403
    drill.refresh_from_db()
    assert (Drill.objects.count(), drill.state, live().version) == (1, "running", 2)


# --- the report page ---------------------------------------------------------------------------------


def _planned(clock: Any) -> Drill:
    return start(start=T0 + timedelta(hours=1))


def _running(clock: Any) -> Drill:
    drill = start()
    report(drill, requests=100, drilled=10, ended_on={"2": 10})
    return drill


def _judging(clock: Any) -> Drill:
    drill = start(minutes=5)
    clock.move_to(drill.ends_at + timedelta(seconds=1))
    fleet_drills.run_drills()
    return drill


def _passed(clock: Any) -> Drill:
    return passed(clock)


def _failed(clock: Any) -> Drill:
    return judged(clock, start(minutes=5))  # nobody drilled: nothing proven


def _aborted(clock: Any) -> Drill:
    drill = start()
    report(drill, requests=50, drilled=5, failed=1, ended_on={"2": 4})  # a stop condition
    drill.refresh_from_db()
    return drill


@pytest.mark.parametrize(
    ("make", "badge", "words", "live_page", "abort"),
    [
        (_planned, "Planned", "Planned: it starts by itself at Thu 10 Dec 02:00 UTC", True, "Cancel drill"),
        (_running, "Running", "Running until 01:15 UTC (ends in 15 min). This page follows it", True, "Abort drill"),
        (_judging, "Ended: being judged", "the verdict comes once the fleet's last reports are in, 15 s", True, ""),
        (_passed, "Passed", "All 10 drilled request(s) were served by the fallback (10 served", False, ""),
        (_failed, "Failed", "No request was drilled: nothing was proven", False, ""),
        (_aborted, "Aborted", "Aborted: 1 drilled request(s) failed for the caller, and it allows none", False, ""),
    ],
    ids=["planned", "running", "judging", "passed", "failed", "aborted"],
)
def test_the_report_page_renders_each_verdict(
    oncall: Client, clock: Any, make: Any, badge: str, words: str, live_page: bool, abort: str
) -> None:
    drill = make(clock)
    html = page(oncall, f"/drills/{drill.pk}/")
    verdict = text(section(html, "drill-verdict"))
    assert verdict.startswith(f"Verdict: {badge}"), verdict
    assert words in verdict, verdict
    assert ('data-live-every="5000"' in html) is live_page
    if abort:
        assert f"{abort} #{drill.pk}" in html
    else:
        assert "Abort drill" not in html and "Cancel drill" not in html
    assert f"<title>Drill #{drill.pk} on chat" in html
    what = text(section(html, "drill-what"))
    assert "Hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests of every service." in what
    assert f"By carol Why {REASON}" in what
    assert "Stops if a drilled request fails for the caller, or hop 2 fails more than 10 % of its attempts" in what


def test_the_report_shows_totals_instances_those_left_out_and_both_plots(oncall: Client, clock: Any) -> None:
    make_token("checkout", "read")
    token = ServiceToken.objects.get(name="checkout")
    drill = start()
    chain = Chain.objects.get(name="chat")
    for client, version in (("checkout/pod-0", 2), ("checkout/old", 2), ("checkout/slow", 1)):
        FleetInstance.objects.create(
            chain=chain,
            client=client,
            applied_version=version,
            version_seen_at=T0,
            first_seen_at=T0,
            last_seen_at=T0 + timedelta(seconds=30),
            token=token,
        )
    report(
        drill,
        requests=100,
        drilled=10,
        ended_on={"2": 9, "3": 1},
        fallback_attempts=10,
        latency_drilled=latency(0, 5, 5),
        latency_other=latency(90),
    )
    clock.move_to(T0 + timedelta(minutes=2))
    report(drill, requests=50, drilled=5, ended_on={"2": 5}, latency_drilled=latency(0, 5), latency_other=latency(45))

    html = page(oncall, f"/drills/{drill.pk}/")
    totals = text(section(html, "drill-totals"))
    assert "Drilled 15 of 150 requests (10.0 %)" in totals
    assert "Served by hop 2: 14, hop 3: 1" in totals
    assert "Failed for the caller 0 (0 missed their deadline, 0 refused)" in totals
    assert "Fallback hop 2 10 attempts, 0 failed" in totals
    assert "Instances 1 took part, 1 read it but did not take part, 1 did not poll it" in totals
    instances = text(section(html, "drill-instances"))
    assert "checkout checkout/pod-0 15 of 150 (10.0 %) hop 2: 14, hop 3: 1 0" in instances
    assert "Read it but did not take part (1) " in instances and "checkout/old (checkout), read v2" in instances
    assert "Did not poll it (1) " in instances and "checkout/slow (checkout), at v1" in instances
    plots_ = section(html, "drill-plots")
    assert plots_.count('<svg class="plot"') == 2
    assert (
        '<title id="latency-plot-title">Latency per minute over 2 min, drilled requests against the others.' in plots_
    )
    assert (
        '<title id="hops-plot-title">Drilled requests per minute over 2 min, by the hop that served them: '
        "14 by hop 2, 1 by hop 3; 0 failed.</title>" in plots_
    )
    legend = text(re.search(r'<figure class="plot-figure" id="hops-plot">.*?</figure>', plots_, re.S).group())
    assert "served by hop 2 (vendor_b/large)" in legend and "served by hop 3 (self_hosted/8b)" in legend
    assert "failed for the caller" in legend
    # The figures the plots draw, minute by minute, in a table.
    table = text(re.search(r'<details class="drill-minutes">.*?</details>', plots_, re.S).group())
    assert "01:00 UTC 100 10 hop 2: 9, hop 3: 1 0" in table and "01:02 UTC 50 5 hop 2: 5 0" in table


def test_a_report_without_figures_says_so(oncall: Client) -> None:
    drill = start()
    html = page(oncall, f"/drills/{drill.pk}/")
    assert "No minute reported yet" in text(section(html, "drill-plots"))
    assert "No instance has reported taking part." in text(section(html, "drill-instances"))


def test_the_latency_plot_breaks_its_lines_where_a_minute_has_no_figure() -> None:
    def minute(at: str, p50: int | None) -> dict[str, Any]:
        lat = {"p50": p50, "p95": p50}
        return {
            "minute": at,
            "requests": 1,
            "drilled": 1,
            "failed": 0,
            "ended_on": {"2": 1},
            "latency_ms": {"drilled": lat, "other": lat},
        }

    figure = str(
        plots.latency_figure(
            [
                minute("2026-12-10T01:00:00Z", 100),
                minute("2026-12-10T01:01:00Z", 250),
                minute("2026-12-10T01:02:00Z", None),
                minute("2026-12-10T01:03:00Z", 500),
            ]
        )
    )
    assert figure.count("<polyline") == 4 and figure.count("<circle") == 4  # a run of two, then a dot, each series
    assert ">500 ms</text>" in figure and ">01:00</text>" in figure and ">01:03</text>" in figure


# --- the badge: each preset's and each chain's last drill ------------------------------------------------


def test_each_preset_shows_its_last_drill_linking_to_its_report(oncall: Client, clock: Any) -> None:
    drill = passed(clock)
    html = page(oncall, "/chains/chat/")
    lines = text(re.search(r'<ul class="preset-drills">.*?</ul>', html, re.S).group())
    assert "normal (default): Drill passed Drilled 01:00 UTC at v2" in lines
    assert "pin_secondary: never drilled" in lines
    assert (
        f'<a href="/drills/{drill.pk}/">Drilled <time datetime="2026-12-10T01:00:00Z">01:00 UTC</time> at v2</a>'
        in html
    )
    recent = text(re.search(r'<ul class="drill-list">.*?</ul>', html, re.S).group())
    assert f"Drill #{drill.pk} Passed Thu 10 Dec 01:00 UTC at v2, by carol" in recent


def test_a_pinnable_preset_shows_its_last_drill_on_its_choice(oncall: Client) -> None:
    # A drill runs on an unpinned chain, so mostly on its default; one that ran on a pin whose
    # end had passed (not yet reverted) was pin_secondary's.
    chain = Chain.objects.get(name="chat")
    drill = Drill.objects.create(
        chain=chain,
        hop=1,
        fault="timeout",
        share_bp=500,
        starts_at=T0 - timedelta(days=2),
        ends_at=T0 - timedelta(days=2) + timedelta(minutes=10),
        reason=REASON,
        created_by="carol",
        created_at=T0 - timedelta(days=2),
        state="ended",
        verdict="failed",
        reasons=["no request was drilled: nothing was proven"],
        preset=chain.presets.get(name="pin_secondary"),
        started_version=7,
    )
    html = page(oncall, "/chains/chat/")
    choice = re.search(r'<div class="choice[^"]*" id="preset-pin_secondary">.*?<div class="choice-about"', html, re.S)
    assert f'<a href="/drills/{drill.pk}/">' in choice.group()
    assert "Drill failed Drilled Tue 08 Dec 01:00 UTC at v7" in text(choice.group())
    other = re.search(r'<div class="choice[^"]*" id="preset-drop_vendor_b">.*?<div class="choice-about"', html, re.S)
    assert "Drill" not in text(other.group())


def test_the_dashboard_shows_each_chains_last_drill_and_a_running_one(oncall: Client, clock: Any) -> None:
    first = passed(clock)
    clock.move_to(T0 + timedelta(hours=1))
    running = start()

    html = page(oncall, "/")
    chat = re.search(r'<section class="card[^"]*" aria-labelledby="chain-chat".*?</section>', html, re.S).group()
    assert f"Drill running Drill #{running.pk}: watch its report" in text(chat)
    note = re.search(r'<p class="drill-note"><span class="last-drill">.*?</p>', chat, re.S).group()
    assert f'<a href="/drills/{first.pk}/">' in note
    assert text(note) == "Drill passed Drilled 01:00 UTC at v2 (normal)"
    strip = text(re.search(r'<ul class="now-strip".*?</ul>', html, re.S).group())
    assert "chat normal Default Drill running" in strip
    other = re.search(r'<section class="card[^"]*" aria-labelledby="chain-incident-summary".*?</section>', html, re.S)
    assert "drill" not in text(other.group()).lower()
