"""The pages, deep links and Slack with two environments (ENVIRONMENTS=staging,production):
every page acts on the environment its path names (``/env/staging/...``; the default's pages
keep their URLs), says which one it is (production loud, staging calm), offers the same page in
the other, and lists that environment's chains, history and alerts only. With one environment
the pages show none of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.test import Client, override_settings
from django.utils import timezone

from audit import actions, messages
from audit.alerts import raise_alert
from audit.models import Alert, AlertKind, ProviderHealthMinute
from audit.provider_health import minute_of
from presets import plans, services
from presets.history import entry, history_rows
from presets.models import Chain, Selection
from presets.presets_file import load_presets_file, parse_presets
from presets.providers import get_registry
from tests.notify_targets import BASE
from tests.test_deep_links import confirm
from tests.test_slack import (  # noqa: F401 - fake and linked are fixtures (slack_app)
    FakeSlack,
    command,
    fake,
    linked,
    modal_text,
    now_at,
    press,
    submit,
)
from tests.test_web_drills import drill_data

REASON = "INC-4411 vendor_a returns 200s with garbage"
TWO = ["staging", "production"]


@pytest.fixture
def two(synced: None, example_file: Path) -> Iterator[None]:
    """Two environments, each with the example presets synced: production's chains (the
    default's, as ``synced`` made them) and staging's."""
    with override_settings(ENVIRONMENTS=TWO):
        services.apply_presets(
            presets_file=load_presets_file(example_file, registry=get_registry()), environment="staging"
        )
        yield


@pytest.fixture
def only_in_staging(two: None, example_file: Path) -> str:
    """A chain staging has and production does not (not promoted yet): ``summaries``."""
    document = json.loads(example_file.read_text())
    document["chains"]["summaries"] = document["chains"]["incident-summary"]
    services.apply_presets(
        presets_file=parse_presets(json.dumps(document), registry=get_registry()), environment="staging"
    )
    return "summaries"


@pytest.fixture
def slack_app(two: None, request: pytest.FixtureRequest) -> FakeSlack:
    """tests/test_slack.py's fake Slack, alice and bob linked to their Slack users."""
    request.getfixturevalue("linked")
    return request.getfixturevalue("fake")


def live(environment: str = "production", chain: str = "chat") -> Selection:
    return Selection.objects.select_related("preset").get(chain__name=chain, chain__environment=environment)


def changes(environment: str, chain: str = "chat") -> int:
    return Selection.history.filter(chain__name=chain, chain__environment=environment).count()


def select_data(**overrides: str) -> dict[str, str]:
    return {
        "preset": "pin_secondary",
        "duration_minutes": "240",
        "reason": REASON,
        "expected_version": "1",
        **overrides,
    }


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def switcher(html: str) -> dict[str, tuple[str, bool]]:
    """The environment switcher's links: each environment's address, and whether it is marked current."""
    nav = re.search(r'<nav class="env-switch" aria-label="Environments">(.*?)</nav>', html, re.S)
    assert nav is not None, "no environment switcher"
    links = re.findall(r'<a href="([^"]+)" class="env-link"( aria-current="true")?>([^<]+)</a>', nav.group(1))
    return {name: (unescape(url), bool(current)) for url, current, name in links}


def band(html: str) -> str:
    """The environment band's kind (production or other) and its words."""
    found = re.search(
        r'<div class="env-band env-band-(\w+)" id="environment">.*?<p class="env-band-name">(.*?)</p>',
        html,
        re.S,
    )
    assert found is not None, "no environment band"
    return f"{found.group(1)}: {text_of(found.group(2))}"


def review(client: Client, url: str, data: dict[str, str]) -> tuple[str, Any]:
    """Send a change's form as its page does (not confirmed): the redirect to its review, then the review."""
    response = client.post(url, data)
    assert response.status_code == 302 and "?review=" in response["Location"], response
    return response["Location"], client.get(response["Location"])


# --- a change acts on its page's environment only ---------------------------------------------------


def test_a_pin_made_on_the_staging_chain_page_never_changes_production(two: None, oncall: Client) -> None:
    url, shown = review(oncall, "/env/staging/chains/chat/select", select_data())
    assert url.startswith("/env/staging/chains/chat/select?review=")
    assert shown.status_code == 200
    html = shown.content.decode()
    assert re.search(r'<form method="post" action="/env/staging/chains/chat/select" class="confirm-bar"', html)
    assert "This changes staging, not production." in text_of(html)
    assert live("staging").version == 1  # the review changed nothing

    done = confirm(oncall, shown)
    assert (done.status_code, done["Location"]) == (302, "/env/staging/chains/chat/")
    staging, production = live("staging"), live("production")
    assert (staging.version, staging.preset.name, staging.updated_by) == (2, "pin_secondary", "alice")
    assert (production.version, production.preset.name, production.expires_at) == (1, "normal", None)
    assert changes("production") == 1
    assert "chat is now v2: pin_secondary, pinned until" in text_of(page(oncall, done["Location"]))


def test_a_pin_made_on_the_production_chain_page_never_changes_staging(two: None, oncall: Client) -> None:
    done = oncall.post("/chains/chat/select", select_data(confirmed="yes"))
    assert (done.status_code, done["Location"]) == (302, "/chains/chat/")
    assert (live("production").version, live("production").preset.name) == (2, "pin_secondary")
    assert (live("staging").version, live("staging").preset.name) == (1, "normal")
    assert changes("staging") == 1


def test_extend_revert_and_restore_act_on_their_page_s_environment(two: None, oncall: Client) -> None:
    for environment in TWO:
        services.select_preset(
            chain="chat", environment=environment, preset="pin_secondary", actor="carol", reason=REASON
        )
    pinned_until = live("production").expires_at

    extended = oncall.post(
        "/env/staging/chains/chat/extend",
        {"add_minutes": "60", "reason": "longer", "expected_version": "2", "confirmed": "yes"},
    )
    assert extended["Location"] == "/env/staging/chains/chat/"
    assert live("staging").version == 3 and live("production").expires_at == pinned_until

    reverted = oncall.post(
        "/env/staging/chains/chat/revert", {"reason": "fixed", "expected_version": "3", "confirmed": "yes"}
    )
    assert reverted["Location"] == "/env/staging/chains/chat/"
    assert live("staging").preset.name == "normal"
    assert (live("production").version, live("production").preset.name) == (2, "pin_secondary")

    restored = oncall.post(
        "/env/staging/chains/chat/history/4/restore", {"reason": "again", "expected_version": "4", "confirmed": "yes"}
    )
    assert restored["Location"] == "/env/staging/chains/chat/"
    assert (live("staging").version, live("staging").preset.name) == (5, "pin_secondary")
    assert changes("production") == 2


def test_plans_guards_and_drills_act_on_their_page_s_environment(two: None, oncall: Client) -> None:
    starts = timezone.now() + timedelta(hours=2)
    form = {
        "preset": "pin_secondary",
        "zone": "UTC",
        "starts_at": starts.strftime("%Y-%m-%dT%H:%M"),
        "ends_at": (starts + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "reason": "CHG-1 maintenance",
    }
    planned = oncall.post("/env/staging/chains/chat/plans", form)
    assert planned.status_code == 302 and planned["Location"].startswith("/env/staging/chains/chat/#plan-")
    [held] = plans.holding_plans(environment="staging")
    assert plans.holding_plans(environment="production") == []
    assert "Planned:" in page(oncall, "/env/staging/") and "Planned:" not in page(oncall, "/")
    # The plan of staging's chat is not production's chat's plan.
    assert oncall.post(f"/chains/chat/plans/{held.pk}/cancel", {"reason": "no"}).status_code == 404

    started = oncall.post("/env/staging/chains/chat/drills", drill_data(reason=REASON))
    drill = Chain.objects.get(name="chat", environment="staging").drills.get()
    assert started["Location"] == f"/env/staging/drills/{drill.pk}/"
    assert page(oncall, started["Location"]).count("staging") > 0
    words = text_of(page(oncall, f"/drills/{drill.pk}/", status=404))
    assert f"production has no drill #{drill.pk}: it is a drill of chat in staging" in words

    services.select_preset(
        chain="chat", environment="staging", preset="pin_secondary", actor="carol", reason=REASON, guard=True
    )
    off = oncall.post("/env/staging/chains/chat/guard/off", {"reason": "watching it myself"})
    assert off["Location"] == "/env/staging/chains/chat/#guard"


def test_a_chain_only_another_environment_has_is_a_404_that_says_where_it_is(
    only_in_staging: str, oncall: Client
) -> None:
    assert "summaries" in page(oncall, "/env/staging/chains/summaries/")
    words = text_of(page(oncall, "/chains/summaries/", status=404))
    assert "production has no chain 'summaries' (staging has it" in words
    assert oncall.post("/chains/summaries/select", select_data(confirmed="yes")).status_code == 404
    assert Selection.history.filter(chain__name="summaries").count() == 1


def test_an_environment_this_control_plane_does_not_have_is_a_404_naming_those_it_has(
    two: None, oncall: Client
) -> None:
    words = text_of(page(oncall, "/env/nope/", status=404))
    assert "unknown environment 'nope': this control plane has staging, production" in words
    assert page(oncall, "/env/nope/chains/chat/", status=404)


def test_a_failed_csrf_check_on_a_staging_page_links_back_to_that_page(two: None, alice: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    refused = client.post(
        "/env/staging/chains/chat/select", select_data(), HTTP_REFERER="http://testserver/env/staging/chains/chat/"
    )
    assert refused.status_code == 403
    assert '<a class="button button-primary" href="/env/staging/chains/chat/">Back to chain chat</a>' in (
        refused.content.decode()
    )


# --- which environment, said on every page ------------------------------------------------------------


def test_production_is_marked_loud_and_staging_calm_on_every_page(two: None, oncall: Client) -> None:
    for url in ("/", "/chains/chat/", "/history/", "/alerts/", "/chains/chat/history/"):
        html = page(oncall, url)
        assert band(html) == "production: production Changes here reach production's services.", url
        assert "<title>[production] " in html
        staging = page(oncall, f"/env/staging{url}")
        assert band(staging) == "other: staging Not production: changes here reach staging's services only.", url
        assert "<title>[staging] " in staging


def test_every_change_form_and_review_says_which_environment_it_changes(two: None, oncall: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason=REASON, guard=True)
    chain_page = page(oncall, "/chains/chat/")
    # Revert, extend, end earlier, pin, plan, drill, and switching the guard off.
    note = '<strong class="env-name">production</strong> This changes production.</p>'
    assert chain_page.count(f'<p class="env-note env-note-production">{note}') == 7
    for url, data in [
        ("/chains/chat/select", select_data(preset="drop_vendor_b", expected_version="2")),
        ("/chains/chat/revert", {"reason": "fixed", "expected_version": "2"}),
        ("/chains/chat/extend", {"add_minutes": "60", "reason": "longer", "expected_version": "2"}),
    ]:
        _, shown = review(oncall, url, data)
        html = shown.content.decode()
        bar = html[html.index('class="confirm-bar"') : html.index("</form>", html.index('class="confirm-bar"'))]
        assert 'aria-label="Confirm in production: ' in html, url
        assert "env-note-production" in bar and "This changes production." in bar, url
        assert band(html).startswith("production: "), url
    _, shown = review(oncall, "/env/staging/chains/chat/select", select_data())
    note = '<strong class="env-name">staging</strong> This changes staging, not production.</p>'
    assert f'<p class="env-note env-note-other">{note}' in shown.content.decode()


def test_with_one_environment_the_pages_show_no_environment(synced: None, oncall: Client) -> None:
    services.select_preset(chain="chat", preset="pin_secondary", actor="carol", reason=REASON, guard=True)
    _, shown = review(oncall, "/chains/chat/revert", {"reason": "fixed", "expected_version": "2"})
    for html in (page(oncall, "/"), page(oncall, "/chains/chat/"), page(oncall, "/history/"), shown.content.decode()):
        assert "env-" not in html and "production" not in html
        assert "<title>[" not in html


# --- the switcher ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "links"),
    [
        ("/", {"staging": "/env/staging/", "production": "/"}),
        ("/env/staging/", {"staging": "/env/staging/", "production": "/"}),
        ("/chains/chat/", {"staging": "/env/staging/chains/chat/", "production": "/chains/chat/"}),
        (
            "/env/staging/chains/chat/history/",
            {"staging": "/env/staging/chains/chat/history/", "production": "/chains/chat/history/"},
        ),
        ("/history/?actor=alice", {"staging": "/env/staging/history/", "production": "/history/"}),
        ("/env/staging/alerts/", {"staging": "/env/staging/alerts/", "production": "/alerts/"}),
        ("/env/staging/chains/summaries/", {"staging": "/env/staging/chains/summaries/", "production": "/"}),
    ],
    ids=["dashboard", "staging-dashboard", "chain", "chain-history", "history", "alerts", "chain-only-in-staging"],
)
def test_the_switcher_links_to_the_same_page_in_each_environment_where_it_has_it(
    only_in_staging: str, oncall: Client, url: str, links: dict[str, str]
) -> None:
    current = "staging" if url.startswith("/env/staging/") else "production"
    assert switcher(page(oncall, url)) == {name: (link, name == current) for name, link in links.items()}


def test_from_a_review_the_switcher_leads_to_the_chain_not_to_the_review(two: None, oncall: Client) -> None:
    _, shown = review(oncall, "/env/staging/chains/chat/select", select_data())
    assert switcher(shown.content.decode()) == {
        "staging": ("/env/staging/chains/chat/", True),
        "production": ("/chains/chat/", False),
    }


def test_links_on_a_staging_page_stay_in_staging(two: None, oncall: Client) -> None:
    html = page(oncall, "/env/staging/")
    outside = {
        href for href in re.findall(r'href="(/[^"]*)"', html) if not href.startswith(("/env/staging/", "/static/"))
    }
    assert outside == {"/"}  # the switcher's link to production's dashboard
    assert '<a href="/env/staging/chains/chat/">chat</a>' in html
    assert 'data-refresh-url="/env/staging/api/v1/chains"' in html


# --- each environment's history, alerts and failing steps ----------------------------------------------


def test_the_history_pages_list_their_environment_s_changes_only(two: None, oncall: Client) -> None:
    services.select_preset(
        chain="chat", environment="staging", preset="pin_secondary", actor="carol", reason="STAGING-ONLY"
    )
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="dave", reason="PRODUCTION-ONLY")
    for url in ("/history/", "/chains/chat/history/"):
        words = text_of(page(oncall, url))
        assert "PRODUCTION-ONLY" in words and "STAGING-ONLY" not in words, url
        staging = page(oncall, f"/env/staging{url}")
        assert "STAGING-ONLY" in text_of(staging) and "PRODUCTION-ONLY" not in text_of(staging), url
        assert 'href="/env/staging/chains/chat/"' in staging
    assert "dave" not in page(oncall, "/env/staging/history/")  # the actor filter's suggestions too


def test_the_alerts_page_and_its_count_are_their_environment_s(two: None, oncall: Client) -> None:
    now = timezone.now()
    for environment in TWO:
        raise_alert(
            kind=AlertKind.STALE_PIN,
            chain=Chain.objects.get(name="chat", environment=environment),
            version=1,
            message=f"{environment.upper()}-ALERT",
            details={"preset": "pin_secondary", "age_seconds": 3700},
            now=now,
        )
    production, staging = page(oncall, "/alerts/"), page(oncall, "/env/staging/alerts/")
    assert "PRODUCTION-ALERT" in production and "STAGING-ALERT" not in production
    assert "STAGING-ALERT" in staging and "PRODUCTION-ALERT" not in staging
    assert 'aria-label="Alerts, 1 open"' in production and 'aria-label="Alerts, 1 open"' in staging
    assert re.search(r'on\s+<a href="/env/staging/chains/chat/">chat</a>', staging)
    assert Alert.objects.filter(resolved_at__isnull=True).count() == 2


def test_a_step_failing_in_staging_is_on_staging_s_dashboard_only(two: None, oncall: Client) -> None:
    ProviderHealthMinute.objects.create(
        chain=Chain.objects.get(name="chat", environment="staging"),
        provider="vendor_a",
        model="large",
        minute=minute_of(timezone.now()),
        server_error=80,
        served=20,
    )
    staging = page(oncall, "/env/staging/")
    assert '<a href="/env/staging/chains/chat/">vendor_a/large on chat: 80.0 % errors' in staging
    assert "Failing now" not in page(oncall, "/")


# --- deep links, notifications and Slack carry the environment -------------------------------------------


def test_a_staging_alert_s_links_open_staging(two: None, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = BASE
    alert, _ = raise_alert(
        kind=AlertKind.STALE_PIN,
        chain=Chain.objects.get(name="chat", environment="staging"),
        version=1,
        message="staging/chat pinned for 1 h",
        details={"preset": "pin_secondary", "age_seconds": 3700},
        now=timezone.now(),
    )
    assert alert.chain_url == f"{BASE}env/staging/chains/chat/"
    event = messages.raised(alert)
    assert event.url == alert.chain_url and event.chain == "staging/chat"
    # A webhook's receiver (and the older alert webhook's) routes by the environment's own field.
    webhook = messages.webhook_document(event)
    assert (webhook["chain"], webhook["environment"]) == ("staging/chat", "staging")
    assert (webhook["alert"]["chain"], webhook["alert"]["environment"]) == ("chat", "staging")
    suggested = actions.for_alert(alert)
    assert [(a.kind, a.environment) for a in suggested] == [("extend", "staging"), ("revert", "staging")]
    assert all(actions.deep_link(a).startswith(f"{BASE}env/staging/act/") for a in suggested)
    assert (
        f"<{BASE}env/staging/chains/chat/|Open staging/chat on the control plane>"
        in messages.slack_message(event)["text"]
    )


def test_a_staging_change_notification_names_staging_and_its_actions_act_there(two: None) -> None:
    services.select_preset(chain="chat", environment="staging", preset="pin_secondary", actor="alice", reason=REASON)
    change = entry(history_rows(chain="chat", environment="staging").first())
    assert messages.change_summary(change) == "alice selected pin_secondary on staging/chat (v2)"
    assert {a.environment for a in actions.for_change(change, at=timezone.now())} == {"staging"}
    old = {key: value for key, value in change.items() if key != "environment"}  # recorded before environments
    assert {a.environment for a in actions.for_change(old, at=timezone.now())} == {""}


def test_a_deep_link_opens_its_environment_s_review_and_confirming_changes_only_it(
    two: None, oncall: Client, settings: Any
) -> None:
    settings.PUBLIC_BASE_URL = BASE
    action = actions.Action(
        "pin", "chat", 1, preset="pin_secondary", minutes=60, reason="INC-9", at=now_at(), environment="staging"
    )
    path = urlsplit(actions.deep_link(action)).path
    assert path.startswith("/env/staging/act/")
    # The same link on the default environment's address goes to staging's.
    moved = oncall.get(path.removeprefix("/env/staging"))
    assert (moved.status_code, moved["Location"]) == (302, path)

    opened = oncall.get(path)
    assert opened.status_code == 302 and opened["Location"].startswith("/env/staging/chains/chat/select?review=")
    shown = oncall.get(opened["Location"])
    assert "This changes staging, not production." in text_of(shown.content.decode())
    assert confirm(oncall, shown)["Location"] == "/env/staging/chains/chat/"
    assert (live("staging").version, live("staging").reason) == (2, "INC-9")
    assert live("production").version == 1


def test_a_deep_link_made_before_environments_opens_the_default_s(two: None, oncall: Client, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = BASE
    value = actions.Action(
        "pin", "chat", 1, preset="pin_secondary", minutes=60, reason="INC-10", at=now_at()
    ).to_value()
    del value["environment"]  # as a link made before environments carries it
    token = signing.Signer(salt=actions.LINK_SALT).sign_object(value, compress=True)
    opened = oncall.get(f"/act/{token}/")
    assert opened["Location"].startswith("/chains/chat/select?review=")
    confirm(oncall, oncall.get(opened["Location"]))
    assert (live("production").version, live("staging").version) == (2, 1)


def test_a_slack_button_acts_in_its_action_s_environment(slack_app: FakeSlack) -> None:
    action = actions.Action(
        "pin",
        "chat",
        1,
        preset="pin_secondary",
        minutes=240,
        reason="vendor_a failing",
        at=now_at(),
        environment="staging",
    )
    press(slack_app, action)
    view = slack_app.of("views.open")[-1]["view"]
    text = modal_text(view)
    assert "In *staging*, not production." in text
    assert "*staging/chat* now: v1 normal → *pin_secondary*" in text
    assert json.loads(view["private_metadata"])["action"]["environment"] == "staging"
    assert submit(view).status_code == 200
    assert (live("staging").version, live("staging").updated_by) == (2, "slack:alice")
    assert live("production").version == 1
    [update] = slack_app.of("chat.update")
    assert update["text"].startswith(":white_check_mark: alice pinned pin_secondary on staging/chat until ")


def test_a_slack_button_sent_before_environments_acts_in_the_default(slack_app: FakeSlack) -> None:
    value = actions.Action("pin", "chat", 1, preset="pin_secondary", minutes=240, reason="x", at=now_at()).to_value()
    del value["environment"]
    press(slack_app, actions.Action.from_value(value))
    view = slack_app.of("views.open")[-1]["view"]
    assert ":rotating_light: In *production*: this changes what production's services use." in modal_text(view)
    submit(view)
    assert (live("production").version, live("staging").version) == (2, 1)


def test_the_chains_command_names_a_staging_chain_as_the_alerts_do(slack_app: FakeSlack) -> None:
    assert command("status staging/chat").json()["text"].startswith("*staging/chat* v1: on its default *normal*")
    assert command("status chat").json()["text"].startswith("*chat (production)* v1: on its default *normal*")
    assert "unknown environment 'nope'" in command("status nope/chat").json()["text"]
    assert "`staging/chat`" in command("help").json()["text"]

    command("pin staging/chat pin_secondary 60")
    view = slack_app.of("views.open")[-1]["view"]
    assert json.loads(view["private_metadata"])["action"]["environment"] == "staging"
    submit(view)
    assert (live("staging").version, live("staging").preset.name) == (2, "pin_secondary")
    assert live("production").version == 1
