"""The alerts page and what every page shows of alerts, the CSRF failure page, and refusals
logged on one line, through Django's test client."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext

from audit import actions, alerts, provider_alerts
from audit import delivery as alert_delivery
from audit.models import Alert
from pages.errors import WayBack, way_back
from pages.templatetags.oncall import clock_times
from presets import services
from presets.models import Chain, Selection
from tests.health_reports import vendor_a_failing

pytestmark = pytest.mark.usefixtures("synced")

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
REASON = "INC-7 vendor_a returns garbage"


def page(client: Client, url: str = "/alerts/") -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def text_of(html: str) -> str:
    """The page's words, as a person reads them: tags dropped, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def items(html: str) -> list[str]:
    """Each alert on the page, in order, as its words."""
    return [text_of(item).strip() for item in re.findall(r'<li class="alert-item.*?</ul>\s*</li>', html, re.S)]


def pin(chain: str = "chat", preset: str = "pin_secondary", **kwargs: Any) -> Selection:
    return services.select_preset(chain=chain, preset=preset, actor="alice", reason=REASON, **kwargs)


def stale_alert(clock: Any, chain: str = "chat", preset: str = "pin_secondary") -> Alert:
    """Pin ``chain`` now and sweep 61 minutes later: its stale_pin alert, open."""
    pin(chain, preset)
    clock.shift(timedelta(minutes=61))
    alerts.sweep_stale_pins()
    return Alert.objects.get(kind="stale_pin", chain__name=chain, resolved_at__isnull=True)


def expired_alert(clock: Any, chain: str = "incident-summary", preset: str = "local_only") -> Alert:
    """Pin ``chain`` for 30 minutes and let it expire: its pin_expired alert."""
    pin(chain, preset, expires_at=timedelta(minutes=30))
    clock.shift(timedelta(minutes=31))
    assert services.expire_pins(chain_ids=[Chain.objects.get(name=chain).pk]) == 1
    return Alert.objects.get(kind="pin_expired", chain__name=chain)


# --- the alerts page ----------------------------------------------------------------------------


def test_each_alert_links_to_its_chain_page(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        expired_alert(clock)
        html = page(oncall)
    assert re.search(r'on\s+<a href="/chains/chat/">chat</a>', html)
    assert re.search(r'on\s+<a href="/chains/incident-summary/">incident-summary</a>', html)


def test_open_alerts_come_first_then_the_recent_rest_newest_first(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin("incident-summary", "local_only")  # stays pinned: its stale alert stays open
        pin("chat", expires_at=timedelta(minutes=90))
        clock.shift(timedelta(minutes=61))
        assert alerts.sweep_stale_pins().raised == 2
        clock.shift(timedelta(minutes=30))
        assert services.expire_pins() == 1  # chat: pin_expired, and its stale alert resolved
        html = page(oncall)

    order = [(item.split()[0], item.split()[1], item.split()[3]) for item in items(html)]
    assert order == [
        ("Open", "stale_pin", "incident-summary"),
        ("Event", "pin_expired", "chat"),
        ("Resolved", "stale_pin", "chat"),
    ]
    assert html.index("Open now") < html.index("incident-summary") < html.index("Recent") < html.index("pin_expired")


def test_with_nothing_open_the_page_says_so_above_the_recent_alerts(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        expired_alert(clock)
        words = text_of(page(oncall))
    assert "Open now Nothing open. Recent Event pin_expired" in words


def test_an_expired_pin_is_an_event_not_a_resolved_alert(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        alert = expired_alert(clock)
        html = page(oncall)
    assert alert.resolved_at == alert.created_at  # raised resolved: it reports what happened
    [item] = items(html)
    assert item.split()[:2] == ["Event", "pin_expired"]
    assert "Resolved" not in item and "resolved" not in item
    assert '<span class="badge badge-event">Event</span>' in html


def test_a_stale_pin_reads_open_then_resolved_with_what_ended_it(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        [item] = items(page(oncall))
        assert item.startswith("Open stale_pin on chat v2")
        clock.shift(timedelta(minutes=4))
        services.revert_to_default(chain="chat", actor="carol", reason="vendor_a is back")
        alerts.sweep_stale_pins()
        [item] = items(page(oncall))
    assert item.startswith("Resolved stale_pin on chat v2")
    assert "Raised 03:01 UTC · resolved 03:05 UTC: pin ended by v3: revert to normal by carol: vendor_a is back" in item


def test_a_stale_pins_words_say_how_long_it_has_been_pinned_when_shown_not_when_raised(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        raised = items(page(oncall))[0]
        clock.shift(timedelta(minutes=45))
        services.extend_pin(chain="chat", actor="alice", reason="keep it", expires_at=timedelta(hours=5))
        [later] = items(page(oncall))
    assert "has served pin pin_secondary for 1 h 1 min" in raised
    assert "has served pin pin_secondary for 1 h 46 min" in later
    assert "(pinned at v2 by alice: INC-7 vendor_a returns garbage)" in later
    assert "it expires at 08:46 UTC. Keep it on purpose (extend) or revert to normal." in later  # the extension's
    alert.refresh_from_db()
    assert "for 1 h 1 min" in alert.message and "06:00:00Z" in alert.message  # stored, and sent, as raised


# --- what an open alert offers to do -------------------------------------------------------------


def suggested_links(html: str) -> dict[str, str]:
    """Each button to a suggested action's review on the page: its words -> its address."""
    found = re.findall(r'<a class="button[^"]*" href="(/act/[^"]+)">(.*?)</a>', html, re.S)
    return {text_of(words).strip(): href for href, words in found}


def offered(href: str) -> actions.Action:
    """The action a page's link carries, as its review reads it."""
    return actions.read_link(href.split("/")[2])


def test_an_open_stale_pin_offers_the_actions_its_notifications_offer_each_opening_its_review(
    oncall: Client,
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        links = suggested_links(page(oncall))
        assert list(links) == ["Extend 1 h on chat…", "Revert to default on chat…"]
        # The very actions Slack's buttons carry (``actions.for_alert``): kind, version, reason.
        at = int(T0.timestamp()) + 61 * 60
        assert [offered(href) for href in links.values()] == [replace(a, at=at) for a in actions.for_alert(alert)]
        review = oncall.get(oncall.get(links["Extend 1 h on chat…"])["Location"]).content.decode()
    assert "Extend the pin of pin_secondary on chat?" in review
    assert 'value="Extended chat still pinned to pin_secondary after 1 h 1 min"' in review
    assert Selection.objects.get(chain__name="chat").version == 2  # opening it changed nothing


def test_a_viewer_and_a_resolved_alert_are_offered_no_change(oncall: Client, viewer: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        assert suggested_links(page(viewer)) == {}
        assert len(suggested_links(page(oncall))) == 2
        services.revert_to_default(chain="chat", actor="carol", reason="vendor_a is back")
        alerts.sweep_stale_pins()
        assert suggested_links(page(oncall)) == {}


def test_an_alert_open_longer_than_a_deep_link_lasts_still_opens_its_review(oncall: Client, settings: Any) -> None:
    settings.DEEP_LINK_MAX_AGE_HOURS = 1
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        clock.shift(timedelta(hours=2))  # the alert was raised 2 h ago, its pin still live
        href = suggested_links(page(oncall))["Revert to default on chat…"]
        response = oncall.get(href)
    assert response.status_code == 302 and "?review=" in response["Location"], response.get("Location")


def test_a_spend_alert_under_a_pin_offers_one_way_to_end_it_beside_the_spend_step_by_step(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False):
        selection = pin()
        alerts.raise_alert(
            kind="spend",
            chain=selection.chain,
            version=selection.version,
            subject="total",
            message="chat's spend runs at $12.00 an hour, over its bound of $10.00",
            details={"words": "$12.00 an hour, over its bound of $10.00", "pin": "pin_secondary"},
            now=T0,
        )
        html = page(oncall)
    [item] = items(html)
    assert list(suggested_links(html)) == ["Revert to default on chat…"]
    assert "End the pin" not in item and "#revert" not in html
    assert 'href="/chains/chat/#spend">Spend of chat, step by step</a>' in html


def test_a_failing_provider_offers_its_suggested_pin_and_the_pin_form_guarded(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False):
        alerts.raise_alert(
            kind="provider_failing",
            chain=Selection.objects.get(chain__name="chat").chain,
            version=1,
            subject="vendor_a/large",
            message="vendor_a/large on chat: 48 % errors",
            details={"suggested": {"preset": "pin_secondary", "reason": "error rate 0 %"}},
            now=T0,
        )
        html = page(oncall)
    assert list(suggested_links(html)) == ["Pin pin_secondary on chat…"]
    assert 'href="/chains/chat/?from=alert">Pin another preset on chat, guarded…</a>' in html


def test_a_failing_providers_alert_shows_the_figures_now_and_for_how_long(
    oncall: Client, reader: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PROVIDER_FAILING_ERROR_PERCENT = 20
    settings.PROVIDER_FAILING_MIN_ATTEMPTS = 20
    settings.PROVIDER_FAILING_MINUTES = 5
    settings.PROVIDER_ALERT_MIN_INSTANCES = 3
    monkeypatch.setattr(provider_alerts, "EVALUATE_EVERY_S", 3600.0)  # the test says when to judge
    with time_machine.travel(T0, tick=False) as clock:
        vendor_a_failing(reader)
        assert provider_alerts.sweep().raised == 1
        clock.shift(timedelta(minutes=2))
        vendor_a_failing(reader)
        vendor_a_failing(reader)
        [item] = items(page(oncall))
    alert = Alert.objects.get(kind="provider_failing")
    assert "150 of 300 attempts" in alert.message  # as raised, and as sent
    assert item.startswith("Open provider_failing vendor_a/large on chat")
    assert (
        "vendor_a/large on chat: 50.0 % errors (mostly 5xx) over the last 5 min, 450 of 900 attempts; "
        "failing for 2 min, since 02:00 UTC." in item
    )
    assert "150 of 300" not in item


def test_times_in_a_message_read_as_the_pages_write_them_and_the_stored_message_keeps_iso(
    oncall: Client,
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        html = page(oncall)
    [item] = items(html)
    assert "it expires at 06:00 UTC. Keep it on purpose" in item
    assert "2026-11-29T06:00:00Z" not in item
    assert '<time datetime="2026-11-29T06:00:00Z">06:00 UTC</time>' in html
    alert.refresh_from_db()
    assert "it expires at 2026-11-29T06:00:00Z." in alert.message  # stored, and sent, as it was
    assert alert.to_document()["message"] == alert.message  # the webhook's body


NOW = datetime(2026, 11, 29, 3, 1, tzinfo=UTC)
MESSAGES = [
    ("expires at 2026-11-29T06:00:00Z.", 'expires at <time datetime="2026-11-29T06:00:00Z">06:00 UTC</time>.'),
    ("at 2026-11-30T15:51:03.512Z", 'at <time datetime="2026-11-30T15:51:03.512Z">Mon 30 Nov 15:51 UTC</time>'),
    ("2026-11-29T08:00:00+02:00", '<time datetime="2026-11-29T08:00:00+02:00">06:00 UTC</time>'),
    ("<b>2026-11-29T06:00Z</b>", '&lt;b&gt;<time datetime="2026-11-29T06:00Z">06:00 UTC</time>&lt;/b&gt;'),
    ("until 2026-11-29T06:00:00Z: it", 'until <time datetime="2026-11-29T06:00:00Z">06:00 UTC</time>: it'),
    ("month 2026-13-45T06:00:00Z", "month 2026-13-45T06:00:00Z"),
    ("no zone 2026-11-29T06:00:00", "no zone 2026-11-29T06:00:00"),
    ("", ""),
]


@pytest.mark.parametrize(
    ("message", "shown"),
    MESSAGES,
    ids=["today", "another day", "offset", "escaped", "before a colon", "not a time", "no zone", "empty"],
)
def test_clock_times_rewrites_each_iso_instant_and_escapes_the_rest(message: str, shown: str) -> None:
    with time_machine.travel(NOW, tick=False):
        assert clock_times(message) == shown


def test_a_reason_in_a_message_stays_escaped_next_to_a_rewritten_time(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="<b>x</b> since 01:00")
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        html = page(oncall)
    assert "&lt;b&gt;x&lt;/b&gt; since 01:00" in html and "<b>x</b>" not in html


# --- delivery state -----------------------------------------------------------------------------


def test_the_delivery_to_each_notifier_is_said_in_words(oncall: Client, settings: Any, webhook: Any) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.ALERT_EMAILS = ["oncall@example.com"]
    webhook.answers = [500]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        assert "Webhook: pending, not tried yet Email: pending, not tried yet" in items(page(oncall))[0]
        clock.shift(alert_delivery.DELIVERY_LEASE + timedelta(seconds=1))
        assert "Webhook: pending, not tried yet: is a worker running?" in items(page(oncall))[0]
        clock.shift(-alert_delivery.DELIVERY_LEASE - timedelta(seconds=1))

        alert_delivery.deliver_alert(alert_id=alert.pk)
        [item] = items(page(oncall))
        assert "Webhook: pending, attempt 1 failed: webhook answered HTTP 500 Internal Server Error; " in item
        assert "next try at about 03:01 UTC Email: delivered 03:01 UTC" in item  # webhook, then email

        clock.shift(timedelta(minutes=10))  # no worker took the retry
        [item] = items(page(oncall))
        assert "the next try was due 03:01 UTC: is a worker running?" in item


def test_a_delivery_given_up_says_failed_with_its_last_error(oncall: Client, settings: Any, webhook: Any) -> None:
    settings.ALERT_WEBHOOK_URL = webhook.url
    settings.ALERT_DELIVERY_MAX_ATTEMPTS = 1
    webhook.answers = [503]
    with time_machine.travel(T0, tick=False) as clock:
        alert = stale_alert(clock)
        alert_delivery.deliver_alert(alert_id=alert.pk)
        html = page(oncall)
    failed = "Webhook: failed after 1 attempt, not retried: webhook answered HTTP 503 Service Unavailable"
    assert failed in text_of(html)
    assert '<li class="delivery delivery-failed">' in html


def test_an_alert_with_no_webhook_or_email_says_it_was_only_logged(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)
        [item] = items(page(oncall))
    assert item.endswith("Only logged: no webhook or email is set up.")


# --- the open count in the top nav ---------------------------------------------------------------


def alerts_link(html: str) -> str:
    """The nav's Alerts link: its label for screen readers, if any, and its words."""
    match = re.search(r'<a href="/alerts/"[^>]*?(?: aria-label="([^"]*)")?>(.*?)</a>', html, re.S)
    assert match, "no Alerts link in the nav"
    label, words = match.groups()
    return f"{text_of(words)} [{label}]" if label else text_of(words)


@pytest.mark.parametrize(
    "url", ["/", "/chains/chat/", "/chains/chat/history/", "/history/", "/alerts/", "/chains/nope/"]
)
def test_every_signed_in_page_shows_the_open_alert_count_in_the_nav(oncall: Client, url: str) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        stale_alert(clock)  # open
        expired_alert(clock)  # an event: not open
        response = oncall.get(url)
    assert alerts_link(response.content.decode()) == "Alerts(1) [Alerts, 1 open]"


def test_with_nothing_open_the_nav_says_alerts_alone(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        expired_alert(clock)
        assert alerts_link(page(oncall, "/")) == "Alerts"


def alert_queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    return [q["sql"] for q in queries.captured_queries if '"audit_alert"' in q["sql"]]


def test_the_count_is_one_query_and_only_on_pages_that_show_the_nav(oncall: Client, client: Client) -> None:
    [count] = alert_queries(oncall, "/history/")
    assert "COUNT(" in count and "resolved_at" in count
    client.logout()
    assert alert_queries(client, "/accounts/login/") == []


# --- the CSRF failure page ------------------------------------------------------------------------


def form_token(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match, "no CSRF token in the form"
    return match.group(1)


def sign_in(client: Client, username: str, password: str) -> None:
    token = form_token(client.get("/accounts/login/").content.decode())
    response = client.post(
        "/accounts/login/", {"username": username, "password": password, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302


@pytest.fixture
def stale_form(alice: User) -> tuple[Client, str]:
    """Alice's browser (CSRF checks on) with the chain page's form token from before she
    signed out and in again: the form that can no longer be sent."""
    browser = Client(enforce_csrf_checks=True)
    sign_in(browser, "alice", "alice-pass-123")
    old_token = form_token(page(browser, "/chains/chat/"))
    browser.post("/accounts/logout/", {"csrfmiddlewaretoken": old_token})
    sign_in(browser, "alice", "alice-pass-123")
    return browser, old_token


def select_data(token: str) -> dict[str, str]:
    return {
        "preset": "pin_secondary",
        "duration_minutes": "240",
        "reason": REASON,
        "expected_version": "1",
        "confirmed": "yes",
        "csrfmiddlewaretoken": token,
    }


def test_a_form_from_before_signing_in_again_shows_the_page_and_changes_nothing(
    stale_form: tuple[Client, str],
) -> None:
    browser, old_token = stale_form
    before = Selection.history.count()
    response = browser.post(
        "/chains/chat/select", select_data(old_token), headers={"referer": "http://testserver/chains/chat/select"}
    )

    assert response.status_code == 403
    assert [t.name for t in response.templates][:2] == ["403_csrf.html", "base.html"]
    html = response.content.decode()
    words = text_of(html)
    assert "Nothing was changed" in words
    assert "on a page opened before you last signed in (here or in another tab), or your session has expired" in words
    assert '<a class="button button-primary" href="/chains/chat/">Back to chain chat</a>' in html
    assert "Sign out" in words and alerts_link(html) == "Alerts"  # the site's layout, signed in
    assert "CSRF token from POST incorrect" in words
    assert Selection.history.count() == before
    assert Selection.objects.get(chain__name="chat").version == 1


def test_signed_out_the_page_offers_to_sign_in_again_and_come_back(alice: User) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.get("/accounts/login/")
    response = browser.post(
        "/accounts/login/",
        {"username": "alice", "password": "alice-pass-123", "csrfmiddlewaretoken": "x" * 64},
        headers={"referer": "http://testserver/chains/chat/history/"},
    )
    assert response.status_code == 403
    html = response.content.decode()
    link = '<a class="button button-primary" href="/accounts/login/?next=/chains/chat/history/">Sign in again</a>'
    assert link in html
    assert "Sign out" not in html


def test_without_the_cookie_the_page_asks_to_allow_cookies(alice: User) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = browser.post("/chains/chat/select", select_data("x" * 64))
    assert response.status_code == 403
    assert "Your browser did not send this site's security cookie" in text_of(response.content.decode())


WAYS_BACK = [
    ("/chains/chat/select", None, "/chains/chat/", "chain chat"),
    ("/chains/chat/select", "http://testserver/chains/chat/?preset=b", "/chains/chat/?preset=b", "chain chat"),
    ("/chains/chat/history/3/restore", "http://testserver/history/?page=2", "/history/?page=2", "the history"),
    ("/chains/chat/history/3/restore", None, "/chains/chat/", "chain chat"),
    ("/chains/chat/revert", "http://testserver/alerts/", "/alerts/", "the alerts"),
    ("/chains/chat/revert", "https://evil.example/history/", "/chains/chat/", "chain chat"),
    ("/chains/chat/revert", "http://testserver//evil.example/history/", "/chains/chat/", "chain chat"),
    ("/chains/chat/revert", "javascript:alert(1)", "/chains/chat/", "chain chat"),
    ("/accounts/logout/", "http://testserver/admin/", "/", "the dashboard"),
    ("/nowhere", None, "/", "the dashboard"),
]


@pytest.mark.parametrize(
    ("path", "referer", "url", "label"),
    WAYS_BACK,
    ids=[
        "a change: its chain",
        "the referring page with its query",
        "restore from all history",
        "restore without a referer",
        "from the alerts page",
        "another site's referer is ignored",
        "a protocol-relative path is ignored",
        "a script URL is ignored",
        "not a page of ours: the dashboard",
        "unknown: the dashboard",
    ],
)
def test_the_way_back_is_a_page_of_ours(path: str, referer: str | None, url: str, label: str) -> None:
    headers = {"referer": referer} if referer else {}
    request = RequestFactory().post(path, headers=headers)
    assert way_back(request) == WayBack(url, label)


# --- refusals in the log -------------------------------------------------------------------------


@pytest.fixture
def log_output() -> Iterator[StringIO]:
    """What the configured console handler (settings.LOGGING) writes, with its filter and
    formatter: the log as it reaches the operator."""
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    stream = StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


def test_a_viewers_forbidden_post_is_one_warning_line_without_a_traceback(
    client: Client, bob: User, log_output: StringIO
) -> None:
    client.force_login(bob)
    response = client.post("/chains/chat/revert", {"reason": "forged", "expected_version": "1", "confirmed": "yes"})
    assert response.status_code == 403
    output = log_output.getvalue()
    [line] = [line for line in output.splitlines() if "/chains/chat/revert" in line]
    assert "Traceback" not in output
    assert line.endswith(
        "WARNING django.request Forbidden (Permission denied): /chains/chat/revert: "
        "changing a selection needs the oncall role (POST 403, user bob) "
        f"request_id={response['X-Request-ID']}"
    )


def test_a_csrf_failure_is_one_warning_line_naming_who(stale_form: tuple[Client, str], log_output: StringIO) -> None:
    browser, old_token = stale_form
    response = browser.post("/chains/chat/select", select_data(old_token))
    output = log_output.getvalue()
    [line] = [line for line in output.splitlines() if "/chains/chat/select" in line]
    assert "Traceback" not in output
    assert line.endswith(
        "WARNING django.security.csrf Forbidden (CSRF token from POST incorrect.): /chains/chat/select "
        f"(POST 403, user alice) request_id={response['X-Request-ID']}"
    )


def test_a_server_error_still_logs_its_traceback_at_error(alice: User, log_output: StringIO) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    with mock.patch("pages.views.recent_alerts", side_effect=RuntimeError("the alerts read broke")):
        response = client.get("/alerts/")
    assert response.status_code == 500
    output = log_output.getvalue()
    assert (
        f"ERROR django.request Internal Server Error: /alerts/ request_id={response['X-Request-ID']}\n"
        "Traceback (most recent call last):"
    ) in output
    assert output.rstrip().endswith("RuntimeError: the alerts read broke")


def test_other_records_pass_the_filter_untouched(log_output: StringIO) -> None:
    try:
        raise ValueError("a bug")
    except ValueError:
        logging.getLogger("presets.services").warning("kept with its traceback", exc_info=True)
    output = log_output.getvalue()
    assert "WARNING presets.services kept with its traceback\nTraceback" in output


def test_a_read_tokens_refused_write_names_the_token_never_its_secret(
    reader: Client, read_token: str, log_output: StringIO
) -> None:
    response = reader.post("/api/v1/chains/chat/revert", {"reason": "x"}, content_type="application/json")
    assert response.status_code == 403
    output = log_output.getvalue()
    [line] = [line for line in output.splitlines() if "/api/v1/chains/chat/revert" in line]
    assert line.endswith(
        "WARNING django.request Forbidden: /api/v1/chains/chat/revert (POST 403, user token:reader) "
        f"request_id={response['X-Request-ID']}"
    )
    assert read_token not in output


def test_an_open_alert_older_than_a_page_of_recent_ones_is_still_listed_first(oncall: Client) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        old = stale_alert(clock)
        chat = old.chain
        clock.shift(timedelta(minutes=1))
        Alert.objects.bulk_create(
            Alert(kind="pin_expired", chain=chat, version=100 + n, message=f"event {n}", resolved_at=T0)
            for n in range(120)
        )
        html = page(oncall)

    assert "stale_pin" in items(html)[0]
    assert html.count('<li class="alert-item') == 1 + 100  # every open one, then a page of the rest
