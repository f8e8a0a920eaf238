"""The role matrix: who may read and change what, on every page and every API endpoint.

A role is a group: ``viewer`` reads, ``oncall`` reads and changes; superusers do everything.
Staff is the admin (people and tokens) and the access history, not the chains. Someone signed
in with no role reads nothing: the pages show the no-role page (a 403 saying to ask an admin
for the viewer role, with the layout's sign-out button), the API answers 403.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, resolve
from django.utils import timezone

from audit import actions, alerts, drills
from presets import plans, services
from presets.roles import can_change, can_see_access, can_view
from tests.conftest import make_token

pytestmark = pytest.mark.usefixtures("synced")

NO_ROLE_WORDS = "Ask an admin for the viewer role."
SIGN_OUT_FORM = 'action="/accounts/logout/"'


# --- who: every kind of principal -------------------------------------------------------------


def session(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def person(name: str, *groups: str, **flags: bool) -> Client:
    user = User.objects.create_user(name, password=f"{name}-pass-123", **flags)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return session(user)


def token(scope: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {make_token(f'{scope}-token', scope)}"})


PRINCIPALS: dict[str, Callable[[], Client]] = {
    "signed-out": Client,
    "no-role": lambda: person("carol"),
    "viewer": lambda: person("bob", "viewer"),
    "oncall": lambda: person("alice", "oncall"),
    "staff-without-groups": lambda: person("sam", is_staff=True),
    "superuser": lambda: person("root", is_staff=True, is_superuser=True),
    "read-token": lambda: token("read"),
    "write-token": lambda: token("write"),
}

# The outcomes, by name: what each principal must get.
OK = "ok"  # 200 (the page or the answer)
NO_ROLE = "no-role"  # a page: the no-role page, 403; the API: 403 saying which role to ask for
DENIED = "denied"  # 403: signed in with a role, but not one that may do this
SIGN_IN = "sign-in"  # a page: 302 to the sign-in page (a token is no session)
UNAUTHENTICATED = "unauthenticated"  # the API: 401, asking for credentials
CREATED = "created"  # 201 (a plan made)
REFUSED = "refused"  # 400 or 404: past the permissions, refused by the domain (nothing to promote)


def expect(
    *,
    signed_out: str,
    no_role: str,
    viewer: str,
    oncall: str,
    staff: str,
    superuser: str,
    read_token: str,
    write_token: str,
) -> dict[str, str]:
    return {
        "signed-out": signed_out,
        "no-role": no_role,
        "viewer": viewer,
        "oncall": oncall,
        "staff-without-groups": staff,
        "superuser": superuser,
        "read-token": read_token,
        "write-token": write_token,
    }


# --- what: every page, every API read, every change --------------------------------------------

READ_PAGE = expect(
    signed_out=SIGN_IN,
    no_role=NO_ROLE,
    viewer=OK,
    oncall=OK,
    staff=NO_ROLE,
    superuser=OK,
    read_token=SIGN_IN,
    write_token=SIGN_IN,
)
ACCESS_PAGE = {**READ_PAGE, "viewer": DENIED, "staff-without-groups": OK}
CHANGE_PAGE = {**READ_PAGE, "viewer": DENIED}
API_READ = expect(
    signed_out=UNAUTHENTICATED,
    no_role=NO_ROLE,
    viewer=OK,
    oncall=OK,
    staff=NO_ROLE,
    superuser=OK,
    read_token=OK,
    write_token=OK,
)
# The access history's refusal says who it is for (staff and on-call), to everyone refused.
ACCESS_API = {
    **API_READ,
    "no-role": DENIED,
    "viewer": DENIED,
    "staff-without-groups": OK,
    "read-token": DENIED,
    "write-token": DENIED,
}
# A change's refusal says what changing needs (a write token or the on-call role), to everyone.
API_CHANGE = {**API_READ, "no-role": DENIED, "viewer": DENIED, "staff-without-groups": DENIED, "read-token": DENIED}
OFREP = {who: OK if who.endswith("-token") else UNAUTHENTICATED for who in API_READ}
API_CREATE = {who: CREATED if outcome == OK else outcome for who, outcome in API_CHANGE.items()}
# One environment: production is the first, reached by a sync; there is nothing to promote.
API_PROMOTE = {who: REFUSED if outcome == OK else outcome for who, outcome in API_CHANGE.items()}

# A change's first POST on the pages is its review (nothing changes yet): 200 when allowed.
SELECT_FORM = {"preset": "drop_vendor_b", "duration_minutes": 60, "reason": "INC-7", "expected_version": 2}
EXTEND_FORM = {"duration_minutes": 600, "reason": "INC-7", "expected_version": 2}
CHANGE_FORM = {"reason": "INC-7", "expected_version": 2}
PLAN_BODY = {"preset": "drop_vendor_b", "starts_at": "{free_start}", "ends_at": "{free_end}", "reason": "INC-7"}
PLAN_FORM = {**PLAN_BODY, "zone": "UTC"}
DRILL_BODY = {"hop": 1, "fault": "server_error", "share": 10, "reason": "INC-7"}
DRILL_FORM = {"hop": "1", "fault": "server_error", "share": "10", "minutes": "15", "zone": "UTC", "reason": "INC-7"}

# (id, method, path, body, expected outcomes by principal)
ENDPOINTS: list[tuple[str, str, str, dict[str, Any] | None, dict[str, str]]] = [
    ("page-dashboard", "GET", "/", None, READ_PAGE),
    ("page-chain", "GET", "/chains/chat/", None, READ_PAGE),
    ("page-chain-history", "GET", "/chains/chat/history/", None, READ_PAGE),
    ("page-history", "GET", "/history/", None, READ_PAGE),
    ("page-alerts", "GET", "/alerts/", None, READ_PAGE),
    ("page-access", "GET", "/access/", None, ACCESS_PAGE),
    ("page-select", "POST", "/chains/chat/select", SELECT_FORM, CHANGE_PAGE),
    ("page-revert", "POST", "/chains/chat/revert", CHANGE_FORM, CHANGE_PAGE),
    ("page-extend", "POST", "/chains/chat/extend", EXTEND_FORM, CHANGE_PAGE),
    ("page-restore", "POST", "/chains/chat/history/2/restore", CHANGE_FORM, CHANGE_PAGE),
    # A plan's change on the pages is one POST: made, it lands on the plan on the chain page.
    ("page-plan", "POST", "/chains/chat/plans", PLAN_FORM, CHANGE_PAGE),
    ("page-plan-change", "POST", "/chains/chat/plans/{planned}/change", PLAN_FORM, CHANGE_PAGE),
    ("page-plan-cancel", "POST", "/chains/chat/plans/{planned}/cancel", {"reason": "INC-7"}, CHANGE_PAGE),
    ("page-plan-start", "POST", "/chains/chat/plans/{suspended}/start", {"reason": "INC-7"}, CHANGE_PAGE),
    # Switching the guard off is one POST too: made, it lands on the guard on the chain page.
    ("page-guard-off", "POST", "/chains/chat/guard/off", {"reason": "INC-7"}, CHANGE_PAGE),
    # A drill's start and abort on the pages are one POST each: made, they land on the drill's
    # report (started now) or on it on the chain page; {drill}: planned_drill.
    ("page-drill", "GET", "/drills/{drill}/", None, READ_PAGE),
    ("page-drill-start", "POST", "/chains/incident-summary/drills", DRILL_FORM, CHANGE_PAGE),
    ("page-drill-abort", "POST", "/chains/incident-summary/drills/{drill}/abort", {"reason": "INC-7"}, CHANGE_PAGE),
    # A notification's deep link: the suggested change's review (a GET; nothing changes yet).
    ("page-act", "GET", "/act/{link}/", None, CHANGE_PAGE),
    ("api-chains", "GET", "/api/v1/chains", None, API_READ),
    ("api-chain", "GET", "/api/v1/chains/chat", None, API_READ),
    ("api-chain-history", "GET", "/api/v1/chains/chat/history", None, API_READ),
    ("api-history-export", "GET", "/api/v1/history", None, API_READ),
    ("api-notifications", "GET", "/api/v1/notifications", None, API_READ),
    ("api-alerts", "GET", "/api/v1/alerts", None, API_READ),
    ("api-fleet", "GET", "/api/v1/fleet", None, API_READ),
    ("api-instances", "GET", "/api/v1/chains/chat/instances", None, API_READ),
    ("api-provider-health", "GET", "/api/v1/chains/chat/health", None, API_READ),
    ("api-spend", "GET", "/api/v1/chains/chat/spend", None, API_READ),
    ("api-access-history", "GET", "/api/v1/access-history", None, ACCESS_API),
    ("api-select", "POST", "/api/v1/chains/chat/select", {"preset": "drop_vendor_b", "reason": "INC-7"}, API_CHANGE),
    ("api-revert", "POST", "/api/v1/chains/chat/revert", {"reason": "INC-7"}, API_CHANGE),
    ("api-extend", "POST", "/api/v1/chains/chat/extend", {"reason": "INC-7", "duration_minutes": 600}, API_CHANGE),
    ("api-restore", "POST", "/api/v1/chains/chat/history/2/restore", {"reason": "undo v2"}, API_CHANGE),
    # The plan rows' {planned}, {suspended} and {free_*}: chat_with_plans.
    ("api-plans", "GET", "/api/v1/plans", None, API_READ),
    ("api-chain-plans", "GET", "/api/v1/chains/chat/plans", None, API_READ),
    ("api-plan-add", "POST", "/api/v1/chains/chat/plans", PLAN_BODY, API_CREATE),
    ("api-chain-plan", "GET", "/api/v1/chains/chat/plans/{planned}", None, API_READ),
    (
        "api-plan-change",
        "PATCH",
        "/api/v1/chains/chat/plans/{planned}",
        {"preset": "pin_secondary", "reason": "INC-7"},
        API_CHANGE,
    ),
    ("api-plan-cancel", "POST", "/api/v1/chains/chat/plans/{planned}/cancel", {"reason": "INC-7"}, API_CHANGE),
    ("api-plan-start", "POST", "/api/v1/chains/chat/plans/{suspended}/start", {"reason": "INC-7"}, API_CHANGE),
    # The guard rows: chat's v2 pin is guarded.
    ("api-chain-guard", "GET", "/api/v1/chains/chat/guard", None, API_READ),
    ("api-guard-off", "POST", "/api/v1/chains/chat/guard/off", {"reason": "INC-7"}, API_CHANGE),
    # The drill rows: incident-summary's {drill} is planned in an hour (chat is pinned: no drill
    # starts on it), its presets with each one's last drill.
    ("api-chain-presets", "GET", "/api/v1/chains/chat/presets", None, API_READ),
    ("api-chain-drills", "GET", "/api/v1/chains/incident-summary/drills", None, API_READ),
    ("api-drill-start", "POST", "/api/v1/chains/incident-summary/drills", DRILL_BODY, API_CREATE),
    ("api-drill", "GET", "/api/v1/drills/{drill}", None, API_READ),
    ("api-drill-abort", "POST", "/api/v1/drills/{drill}/abort", {"reason": "INC-7"}, API_CHANGE),
    # Promotions: reading what one would stand on, asking for one, approving one.
    ("api-promotions", "GET", "/api/v1/environments/production/promotions", None, API_READ),
    ("api-promotions", "POST", "/api/v1/environments/production/promotions", {"reason": "CHG-7"}, API_PROMOTE),
    ("api-promotion-approve", "POST", "/api/v1/environments/production/promotions/1/approve", {}, API_PROMOTE),
    # OFREP is read with a service token only (a person's session is no OFREP credential).
    ("ofrep-flag", "POST", "/ofrep/v1/evaluate/flags/chat", {"context": {}}, OFREP),
    ("ofrep-flags", "POST", "/ofrep/v1/evaluate/flags", {"context": {}}, OFREP),
]

CASES = [
    pytest.param(method, path, body, who, outcomes[who], id=f"{endpoint}-{who}")
    for endpoint, method, path, body, outcomes in ENDPOINTS
    for who in PRINCIPALS
]


def send(client: Client, method: str, path: str, body: dict[str, Any] | None) -> Any:
    if method == "GET":
        return client.get(path)
    if method == "PATCH":
        return client.patch(path, body, content_type="application/json")
    if path.startswith(("/api/", "/ofrep/")):
        return client.post(path, body, content_type="application/json")
    return client.post(path, body)


@pytest.mark.parametrize("method,path,body,who,outcome", CASES)
def test_the_role_matrix(method: str, path: str, body: dict[str, Any] | None, who: str, outcome: str) -> None:
    # chat v2 is a pin, so every change (extend and restore included) has something to act on;
    # guarded for the guard rows.
    services.select_preset(
        chain="chat",
        preset="pin_secondary",
        expires_at=timedelta(hours=1),
        actor="alice",
        reason="INC-1",
        guard=True if "/guard" in path else None,
    )
    with time_machine.travel(timezone.now(), tick=True) as clock:
        ids = chat_with_plans(clock) if "/plans" in path else {}
        if "/drills" in path:
            ids = {"drill": planned_drill()}
        if "/act/" in path:
            action = actions.Action(actions.REVERT, "chat", 2, reason="INC-7", at=int(timezone.now().timestamp()))
            ids = {"link": actions.deep_link(action).rstrip("/").rsplit("/", 1)[1]}
        client = PRINCIPALS[who]()
        if body is not None:
            body = {key: value.format(**ids) if isinstance(value, str) else value for key, value in body.items()}
        response = send(client, method, path.format(**ids), body)
        page = not path.startswith(("/api/", "/ofrep/"))
        # A plan's, a guard's or a drill's change made: one POST, then the page of what changed.
        done = response.status_code == 302 and re.search(
            r"#(plan-|guard$|drill-)|^/drills/", response.get("Location", "")
        )
        reviewed = response.status_code == 302 and "?review=" in response["Location"]
        if page and (method == "POST" or "/act/" in path) and (done or reviewed):
            response = client.get(response["Location"])  # the review is shown by a GET (no resubmission)
    text = b"".join(response.streaming_content).decode() if response.streaming else response.content.decode()
    if outcome == REFUSED:
        assert response.status_code in (400, 404), text[:500]
        assert NO_ROLE_WORDS not in text
    elif outcome in (OK, CREATED):
        assert response.status_code == (201 if outcome == CREATED else 200), text[:500]
        assert NO_ROLE_WORDS not in text
    elif outcome == NO_ROLE:
        assert response.status_code == 403, text[:500]
        if page:
            assert "No role yet" in text and NO_ROLE_WORDS in text
            assert SIGN_OUT_FORM in text  # they can still sign out
            assert "vendor_a" not in text  # nothing of the chains
        else:
            assert "the viewer role" in response.json()["error"]["message"]
    elif outcome == DENIED:
        assert response.status_code == 403, text[:500]
        assert NO_ROLE_WORDS not in text
    elif outcome == SIGN_IN:
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    else:
        assert outcome == UNAUTHENTICATED
        assert response.status_code == 401, text[:500]


def test_the_matrix_has_a_row_for_every_page_and_api_route() -> None:
    """A route added later must be given its row. Left out: sign-in and the admin (their own
    rules), the probes, /metrics (METRICS_TOKEN), the schema (public, below), the SDK's
    usage report and a relay's fleet report (a service's, not a person's), the favicon (a public redirect to a static
    file) and the Slack app's endpoints (signed by Slack; who may act there: tests/test_slack.py)."""
    from controlplane import urls

    routes = {p.name for p in urls.api_v1} | {p.name for p in urls.urlpatterns if isinstance(p, URLPattern) and p.name}
    covered = {resolve(re.sub(r"\{\w+\}", "1", path)).url_name for _, _, path, _, _ in ENDPOINTS}
    slack = {"slack-actions", "slack-commands"}  # signed by Slack, for its users: tests/test_slack.py
    assert routes - {"metrics", "api-schema", "api-usage", "api-fleet-seen", "favicon", *slack} == covered


def planned_drill() -> int:
    """A drill of incident-summary planned in an hour, for the drill rows to read and cancel."""
    start = timezone.now() + timedelta(hours=1)
    return drills.start_drill(
        chain="incident-summary", hop=1, fault="timeout", share=5, start=start, reason="drill", actor="carol"
    ).pk


def chat_with_plans(clock: Any) -> dict[str, Any]:
    """chat's plans for the plan rows: one planned (read, changed, cancelled) and one suspended
    (started anyway: planned while chat served alice's pin, it found the pin live at its start),
    and a free window to plan in."""
    now = timezone.now()
    suspended = plans.plan_pin(
        chain="chat",
        preset="local_only",
        starts_at=now + timedelta(minutes=10),
        ends_at=now + timedelta(minutes=50),
        actor="carol",
        reason="vendor window",
    )
    planned = plans.plan_pin(
        chain="chat",
        preset="drop_vendor_b",
        starts_at=now + timedelta(hours=2),
        ends_at=now + timedelta(hours=3),
        actor="carol",
        reason="vendor_b maintenance",
    )
    clock.shift(timedelta(minutes=11))
    assert plans.run_plans().suspended == [suspended.pk]
    return {
        "planned": planned.pk,
        "suspended": suspended.pk,
        "free_start": (now + timedelta(hours=4)).isoformat(),
        "free_end": (now + timedelta(hours=5)).isoformat(),
    }


# --- the no-role page, role changes and the role checks ----------------------------------------


def test_taking_the_viewer_role_away_takes_reading_away_at_the_next_request(bob: User, viewer: Client) -> None:
    assert viewer.get("/").status_code == 200
    assert viewer.get("/api/v1/chains/chat").status_code == 200
    bob.groups.clear()
    page = viewer.get("/")
    assert page.status_code == 403 and NO_ROLE_WORDS in page.content.decode()
    assert viewer.get("/api/v1/chains/chat").status_code == 403


def test_the_no_role_page_says_who_is_signed_in_and_shows_no_alert_count() -> None:
    """The nav's open-alert count is reading too; the role next to the name says there is none."""
    with time_machine.travel(timezone.now(), tick=False) as clock:
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-1")
        clock.shift(timedelta(minutes=61))
        assert alerts.sweep_stale_pins().raised == 1
        html = person("carol").get("/").content.decode()
        assert '<span class="who-name">carol</span> <span class="who-role">no role</span>' in html
        assert 'class="nav-count"' not in html
        assert 'class="nav-count">(1)</span>' in person("bob", "viewer").get("/").content.decode()


def words(html: str) -> str:
    """The page's words, as a person reads them: tags dropped, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_staff_without_a_role_are_pointed_to_what_they_have() -> None:
    staff = person("sam", is_staff=True).get("/history/").content.decode()
    assert NO_ROLE_WORDS in words(staff)
    assert "As staff, the admin and the access history are open to you" in words(staff)
    assert 'href="/access/"' in staff and 'href="/admin/"' in staff
    assert "access history" not in person("carol").get("/history/").content.decode()


def test_a_viewer_posting_a_change_is_told_it_needs_the_oncall_role(viewer: Client) -> None:
    response = viewer.post("/chains/chat/revert", CHANGE_FORM)
    assert response.status_code == 403
    assert "changing one needs the on-call role" in response.content.decode()


def test_a_get_of_a_change_url_without_a_role_is_the_no_role_page_not_a_redirect_to_one() -> None:
    response = person("carol").get("/chains/chat/select")
    assert response.status_code == 403 and NO_ROLE_WORDS in response.content.decode()


def test_an_inactive_user_reads_nothing_whatever_their_groups(alice: User) -> None:
    alice.is_active = False
    alice.is_staff = alice.is_superuser = True
    assert not can_view(alice) and not can_change(alice) and not can_see_access(alice)


def test_a_request_reads_a_persons_role_groups_once(bob: User) -> None:
    """Every check of a request (the view's, the layout's role, access, change buttons)
    shares one query of the person's groups."""
    client = session(bob)
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/history/").status_code == 200
    group_reads = [q["sql"] for q in queries.captured_queries if '"auth_user_groups"' in q["sql"]]
    assert len(group_reads) == 1, group_reads


def test_the_api_schema_stays_public_documentation() -> None:
    """The schema says what the API is, not what is live: anyone may read it."""
    assert Client().get("/api/schema/").status_code == 200
    assert person("carol").get("/api/schema/").status_code == 200


# --- in a real browser -------------------------------------------------------------------------


def test_someone_without_a_role_signs_in_sees_whom_to_ask_and_signs_out(open_page: Callable[..., Any]) -> None:
    User.objects.create_user("carol", password="carol-pass-123")
    page = open_page(path="/accounts/login/")
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Password").fill("carol-pass-123")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="No role yet").wait_for()
    assert NO_ROLE_WORDS in " ".join(page.locator("main").inner_text().split())
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/accounts/login/$"))
    page.goto("/")
    page.wait_for_url(re.compile(r"/accounts/login/\?next=/$"))  # signed out
