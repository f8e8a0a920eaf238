"""Bad input of every kind, on every endpoint and page, with a token and with a session: a 4xx
naming the problem (the JSON error shape on /api), never a 5xx, and nothing written."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.fleet_recorder import parse_identity, recorder
from audit.models import FleetInstance, ProviderUsage, RejectedVersion
from controlplane.logging_plain import PlainFormatter
from presets.models import Drill, PinGuard, PlanEvent, PlannedPin, Selection

GETS = [
    "/api/v1/chains",
    "/api/v1/chains/chat",
    "/api/v1/chains/chat/history",
    "/api/v1/alerts",
    "/api/v1/fleet",
    "/api/v1/chains/chat/instances",
    "/api/v1/history",
    "/api/v1/plans",
    "/api/v1/chains/chat/plans",
    "/api/v1/chains/chat/presets",
    "/api/v1/chains/chat/drills",
]
POSTS = [
    "/api/v1/chains/chat/select",
    "/api/v1/chains/chat/revert",
    "/api/v1/chains/chat/extend",
    "/api/v1/chains/chat/history/1/restore",
    "/api/v1/chains/chat/usage",
    "/api/v1/chains/chat/plans",
    "/api/v1/chains/chat/guard/off",
    "/api/v1/chains/chat/drills",
    "/api/v1/drills/1/abort",
]
DRILLS = "/api/v1/chains/chat/drills"
DRILL = {"hop": 1, "fault": "server_error", "share": 10, "reason": "r"}
# chat's guard: a 404 while chat serves no guarded pin (tests/test_guards_api.py reads one), so
# only where the request is refused before the view looks.
GUARD = "/api/v1/chains/chat/guard"
WHO = ["token", "session"]
WHEN = "2026-11-29T06:03:04Z"


@pytest.fixture
def api(request: pytest.FixtureRequest, synced: None, write_token: str, alice: User) -> Client:
    """A write token or alice's on-call session, as the test's ``who`` parameter says."""
    if request.param == "token":
        return Client(headers={"Authorization": f"Bearer {write_token}"})
    client = Client()
    client.force_login(alice)
    return client


def posts_for(api: Client) -> list[str]:
    """The POST URLs ``api`` may send to: a session sends no usage report (only services
    report, with a token: a session's is refused with 403 before its body is read)."""
    if "HTTP_AUTHORIZATION" in api.defaults:
        return POSTS
    return [url for url in POSTS if not url.endswith("/usage")]


@pytest.fixture
def oncall(synced: None, alice: User) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def written_state() -> tuple[Any, ...]:
    return (
        list(Selection.history.order_by("pk").values_list("pk", flat=True)),
        list(Selection.objects.order_by("pk").values_list("version", "preset_id", "expires_at")),
        list(ProviderUsage.objects.order_by("pk").values()),
        list(RejectedVersion.objects.order_by("pk").values()),
        list(PlannedPin.objects.order_by("pk").values()),
        list(PlanEvent.objects.order_by("pk").values()),
        list(PinGuard.objects.order_by("pk").values()),
        list(Drill.objects.order_by("pk").values()),
    )


def assert_json_4xx(response: Any, *fragments: str) -> dict[str, Any]:
    """A 4xx with the API's error shape whose message holds each fragment."""
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"} and error["message"]
    for fragment in fragments:
        assert fragment in error["message"], error
    return error


def nested(depth: int, leaf: str = '"x"') -> str:
    return "[" * depth + leaf + "]" * depth


# --- bodies -----------------------------------------------------------------------------

# (id, raw JSON body, what the message must say). Each goes to every write endpoint: the
# parser refuses them before any view looks at the fields.
REFUSED_BODIES = [
    ("100k-brackets", "[" * 100_000, "nested too deep"),
    ("100k-objects", '{"a":' * 100_000, "nested too deep"),
    ("reason-nested-5000", '{"preset": "x", "reason": ' + nested(5000) + "}", "nested too deep"),
    ("reason-nested-33", '{"preset": "x", "reason": ' + nested(33) + "}", "nested too deep"),
    ("nul-in-reason", '{"preset": "pin_secondary", "reason": "INC\\u0000-1"}', "reason: the text contains a NUL"),
    ("nul-in-preset", '{"preset": "pin_secondary\\u0000", "reason": "r"}', "preset: the text contains a NUL"),
    ("nul-in-a-key", '{"preset": "pin_secondary", "reason": "r", "x\\u0000": 1}', "the key contains a NUL"),
    (
        "surrogate-in-reason",
        '{"preset": "pin_secondary", "reason": "\\ud800"}',
        "reason: the text contains a lone surrogate",
    ),
    ("low-surrogate-in-a-key", '{"\\udfff": 1, "reason": "r"}', "the key contains a lone surrogate"),
    (
        "surrogate-in-a-provider",
        f'{{"client": "checkout/1", "providers": {{"\\ud800": {{"requests": 1, "last_served_at": "{WHEN}"}}}}}}',
        "lone surrogate",
    ),
    ("nul-in-a-client", '{"client": "checkout/\\u0000"}', "client: the text contains a NUL"),
    (
        "nul-in-a-rejection",
        f'{{"client": "checkout/1", "rejected": [{{"version": 1, "reason": "\\u0000", "at": "{WHEN}"}}]}}',
        "rejected[0].reason",
    ),
    ("1e309", '{"preset": "pin_secondary", "reason": "r", "duration_minutes": 1e309}', "not valid JSON"),
    (
        "5000-digit-integer",
        '{"preset": "pin_secondary", "reason": "r", "expected_version": ' + "9" * 5000 + "}",
        "not valid JSON",
    ),
]


@pytest.mark.parametrize("api", WHO, indirect=True)
@pytest.mark.parametrize("body,fragment", [c[1:] for c in REFUSED_BODIES], ids=[c[0] for c in REFUSED_BODIES])
def test_a_body_the_control_plane_cannot_take_is_a_400_naming_it(api: Client, body: str, fragment: str) -> None:
    before = written_state()
    for url in posts_for(api):
        response = api.post(url, body, content_type="application/json")
        error = assert_json_4xx(response, fragment)
        assert response.status_code == 400 and error["code"] == "validation_error", url
    assert written_state() == before


@pytest.mark.parametrize("api", WHO, indirect=True)
def test_a_body_over_the_upload_limit_is_a_json_400(api: Client) -> None:
    body = json.dumps({"preset": "pin_secondary", "reason": "x" * 3_000_000})
    for url in posts_for(api):
        assert_json_4xx(api.post(url, body, content_type="application/json"), "bytes")


@pytest.mark.parametrize("url", ["/api/v1/chains/chat", "/api/v1/alerts", "/history/"])
def test_too_many_query_parameters_is_a_400(oncall: Client, url: str) -> None:
    response = oncall.get(f"{url}?" + "&".join(["a=1"] * 1001))
    assert response.status_code == 400
    if url.startswith("/api/"):
        assert_json_4xx(response, "query parameters")


@pytest.mark.parametrize("charset", ["rot13", "hex", "utf-16", "idna", "no-such-charset"])
def test_a_body_in_an_odd_charset_is_a_json_400(synced: None, writer: Client, charset: str) -> None:
    response = writer.generic(
        "POST",
        POSTS[0],
        b'{"preset": "pin_secondary", "reason": "r\xff"}',
        content_type=f"application/json; charset={charset}",
    )
    if response.status_code != 200:  # an unknown charset is ignored: the body is read as UTF-8
        assert_json_4xx(response)


HUGE = [10**30, 2**31, 1099511627776, 2**63]
# (id, url, JSON body): numbers no column can hold, dates without a time zone.
INVALID_VALUES = [
    *[(f"duration-{n}", POSTS[0], {"preset": "pin_secondary", "reason": "r", "duration_minutes": n}) for n in HUGE],
    *[
        (f"expected-version-{n}", POSTS[0], {"preset": "pin_secondary", "reason": "r", "expected_version": n})
        for n in HUGE
    ],
    *[(f"extend-{n}", POSTS[2], {"reason": "r", "duration_minutes": n}) for n in HUGE],
    *[(f"revert-expected-{n}", POSTS[1], {"reason": "r", "expected_version": n}) for n in HUGE],
    *[(f"restore-expected-{n}", POSTS[3], {"reason": "r", "expected_version": n}) for n in HUGE],
    *[(f"restore-version-{n}", f"/api/v1/chains/chat/history/{n}/restore", {"reason": "r"}) for n in HUGE],
    *[(f"usage-applied-{n}", POSTS[4], {"client": "checkout/1", "applied_version": n}) for n in HUGE],
    *[
        (
            f"usage-requests-{n}",
            POSTS[4],
            {"client": "checkout/1", "providers": {"vendor_a": {"requests": n, "last_served_at": WHEN}}},
        )
        for n in HUGE
    ],
    *[
        (
            f"usage-rejected-{n}",
            POSTS[4],
            {"client": "checkout/1", "rejected": [{"version": n, "reason": "r", "at": WHEN}]},
        )
        for n in HUGE
    ],
    *[
        (f"drill-{field}-{n}", DRILLS, {**DRILL, field: n})
        for field in ("hop", "share", "minutes", "repeat_days", "max_failed", "max_fallback_error_pct")
        for n in HUGE
    ],
    ("drill-start-year-9999-west", DRILLS, {**DRILL, "start": "9999-12-31T23:59:59-05:00"}),
    ("drill-start-year-1-east", DRILLS, {**DRILL, "start": "0001-01-01T00:00:00+05:00"}),
    *[(f"drill-abort-{n}", f"/api/v1/drills/{n}/abort", {"reason": "r"}) for n in HUGE],
    (
        "usage-long-rejection-reason",
        POSTS[4],
        {"client": "checkout/1", "rejected": [{"version": 1, "reason": "x" * 1500, "at": WHEN}]},
    ),
    (
        "usage-year-9999-west",
        POSTS[4],
        {
            "client": "checkout/1",
            "providers": {"vendor_a": {"requests": 1, "last_served_at": "9999-12-31T23:59:59-05:00"}},
        },
    ),
    (
        "usage-year-1-east",
        POSTS[4],
        {
            "client": "checkout/1",
            "providers": {"vendor_a": {"requests": 1, "last_served_at": "0001-01-01T00:00:00+05:00"}},
        },
    ),
]


@pytest.mark.parametrize("api", WHO, indirect=True)
def test_numbers_and_dates_no_column_can_hold_never_answer_5xx(api: Client) -> None:
    for case, url, body in INVALID_VALUES:
        before = written_state()
        response = api.post(url, json.dumps(body), content_type="application/json")
        assert response.status_code < 500, (case, response.content[:300])
        if response.status_code != 202:  # a usage report may take a long reason, cut to fit
            assert_json_4xx(response)
            assert written_state() == before, case


NAIVE = "2026-12-01T06:00:00"


NAIVE_TIMES = [
    ("select", POSTS[0], {"preset": "pin_secondary", "reason": "r", "expires_at": NAIVE}, "expires_at"),
    (
        "select-date-only",
        POSTS[0],
        {"preset": "pin_secondary", "reason": "r", "expires_at": "2026-12-01"},
        "expires_at",
    ),
    ("extend", POSTS[2], {"reason": "r", "expires_at": NAIVE}, "expires_at"),
    ("drill-start", DRILLS, {**DRILL, "start": NAIVE}, "start"),
    (
        "usage-last-served",
        POSTS[4],
        {"client": "checkout/1", "providers": {"vendor_a": {"requests": 1, "last_served_at": NAIVE}}},
        "last_served_at",
    ),
    (
        "usage-rejection",
        POSTS[4],
        {"client": "checkout/1", "rejected": [{"version": 1, "reason": "r", "at": NAIVE}]},
        "at",
    ),
]


# A session sends no usage report (its 403 is tests/test_usage_report_limits.py's).
@pytest.mark.parametrize(
    "api,url,body,field",
    [
        pytest.param(who, url, body, field, id=f"{name}-{who}")
        for name, url, body, field in NAIVE_TIMES
        for who in WHO
        if who == "token" or not url.endswith("/usage")
    ],
    indirect=["api"],
)
def test_a_time_without_a_time_zone_is_refused_naming_the_field(api: Client, url: str, body: Any, field: str) -> None:
    before = written_state()
    response = api.post(url, json.dumps(body), content_type="application/json")
    error = assert_json_4xx(response, field, "needs a time zone, e.g. 2026-11-29T06:00:00Z")
    assert response.status_code == 400 and error["code"] == "validation_error"
    assert written_state() == before


def test_an_expiry_with_a_time_zone_is_still_taken(synced: None, writer: Client) -> None:
    expires_at = timezone.now().astimezone(dt.timezone(dt.timedelta(hours=-5))) + dt.timedelta(hours=1)
    response = writer.post(
        POSTS[0],
        {"preset": "pin_secondary", "reason": "r", "expires_at": expires_at.isoformat()},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert Selection.objects.get(chain__name="chat").expires_at == expires_at.replace(
        microsecond=expires_at.microsecond // 1000 * 1000
    )


def test_a_body_nested_32_levels_reaches_the_fields(synced: None, writer: Client) -> None:
    response = writer.post(POSTS[0], '{"preset": "x", "reason": ' + nested(31) + "}", content_type="application/json")
    error = assert_json_4xx(response, "reason")
    assert "nested too deep" not in error["message"]


# --- query strings ----------------------------------------------------------------------

NUL_QUERIES = [
    "chain=%00",
    "limit=%00",
    "x=%00",
    "%00=1",
    "wait=1%00",
    "open=tr%00ue",
    "page=%00",
    "before=1&chain=chat%00",
]


@pytest.mark.parametrize("api", WHO, indirect=True)
@pytest.mark.parametrize("query", NUL_QUERIES)
def test_a_nul_in_a_query_string_is_a_400_on_every_endpoint(api: Client, query: str) -> None:
    before = written_state()
    for url in [*GETS, GUARD, *POSTS]:
        method = api.post if url in POSTS else api.get
        response = method(f"{url}?{query}")
        error = assert_json_4xx(response, "query parameter", "NUL")
        assert response.status_code == 400 and error["code"] == "validation_error", url
    assert written_state() == before


ODD_QUERIES = [
    "limit=1099511627776",
    "limit=" + "9" * 30,
    "before=1099511627776",
    "before=" + "9" * 5000,
    "wait=1e309",
    "wait=-1e309",
    "wait=nan",
    "limit=1e309",
    "chain=" + "x" * 10_000,
    "open=\u00e9",
]


@pytest.mark.parametrize("api", WHO, indirect=True)
def test_huge_and_odd_query_values_never_answer_5xx(api: Client) -> None:
    for url in ["/api/v1/chains/chat/history", "/api/v1/alerts", "/api/v1/chains/chat"]:
        for query in ODD_QUERIES:
            response = api.get(f"{url}?{query}")
            assert response.status_code < 500, (url, query[:40], response.content[:300])
            if response.status_code != 200:
                assert_json_4xx(response)


# --- headers ----------------------------------------------------------------------------

BAD_HEADERS = [
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": "1099511627776"},
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": str(2**31)},
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": str(10**30)},
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": "1e309"},
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": "9" * 5000},
    {"X-Chain-Client": "checkout/1", "X-Chain-Applied-Version": "\x00"},
    {"X-Chain-Client": "checkout/\x00", "X-Chain-Applied-Version": "1"},
    {"X-Chain-Client": "checkout/\ud800", "X-Chain-Applied-Version": "1"},
    {"X-Chain-Client": "checkout/1\nINFO forged", "X-Chain-Applied-Version": "1"},
    {"If-None-Match": "\x00"},
    {"If-None-Match": "\ud800"},
    {"If-None-Match": '"1099511627776"'},
    {"If-None-Match": "W/" + "," * 10_000},
]


@pytest.mark.parametrize("api", WHO, indirect=True)
@pytest.mark.parametrize("headers", BAD_HEADERS, ids=[repr(h)[:50] for h in BAD_HEADERS])
def test_bad_identity_and_etag_headers_are_ignored_not_a_5xx(api: Client, headers: dict[str, str]) -> None:
    for url in GETS:
        response = api.get(url, headers=headers)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
    recorder.flush()
    assert not FleetInstance.objects.exists()  # no identity from those headers is stored


@pytest.mark.parametrize("header", ["Bearer \x00", "Bearer \ud800", "Bearer \u20ac", "\x00", "Bearer " + "x" * 10_000])
def test_a_token_no_one_could_hold_is_a_401(db: None, client: Client, header: str) -> None:
    response = client.get("/api/v1/chains/chat", headers={"Authorization": header})
    assert response.status_code == 401
    assert_json_4xx(response)


@pytest.mark.parametrize(
    "client_name,version,expected",
    [
        ("checkout/1", "7", ("checkout/1", 7)),
        ("checkout/1", "0", ("checkout/1", 0)),
        ("checkout/1", str(2**31 - 1), ("checkout/1", 2**31 - 1)),
        ("checkout/1", str(2**31), None),
        ("checkout/1", "1099511627776", None),
        ("checkout/1", "9" * 5000, None),
        ("checkout/1", "-1", None),
        ("checkout/1", "1e3", None),
        ("checkout/\x00", "1", None),
        ("checkout/1\nforged", "1", None),
        ("checkout/\x7f", "1", None),
        ("checkout/\ud800", "1", None),
    ],
    ids=[
        "ok",
        "zero",
        "int32-max",
        "int32-max+1",
        "2**40",
        "5000-digits",
        "negative",
        "float",
        "nul",
        "newline",
        "del",
        "surrogate",
    ],
)
def test_parse_identity_refuses_what_the_database_cannot_store(client_name: str, version: str, expected: Any) -> None:
    assert parse_identity(client_name, version) == expected


# --- the web pages ----------------------------------------------------------------------

PAGES = ["/", "/chains/chat/", "/chains/chat/history/", "/history/", "/alerts/"]


@pytest.mark.parametrize("url", PAGES)
def test_a_nul_in_a_page_query_is_a_plain_400_page(oncall: Client, url: str) -> None:
    for query in ["preset=%00", "page=%00", "%00=1"]:
        response = oncall.get(f"{url}?{query}")
        assert response.status_code == 400, query
        assert response["Content-Type"].startswith("text/html")
        assert b"NUL" in response.content


@pytest.mark.parametrize(
    "url,fields",
    [
        ("/chains/chat/select", {"preset": "pin_secondary\x00", "reason": "r", "duration_minutes": "60"}),
        ("/chains/chat/select", {"preset": "pin_secondary", "reason": "INC\x001", "duration_minutes": "60"}),
        ("/chains/chat/select", {"preset": "pin_secondary", "reason": "r", "duration_minutes": "1099511627776"}),
        ("/chains/chat/select", {"preset": "pin_secondary", "reason": "r", "duration_minutes": "1e309"}),
        ("/chains/chat/select", {"preset": "pin_secondary", "reason": "r", "duration_minutes": "9" * 5000}),
        (
            "/chains/chat/select",
            {"preset": "pin_secondary", "reason": "r", "duration_minutes": "60", "expected_version": "1099511627776"},
        ),
        ("/chains/chat/select", {"preset": "pin_secondary", "reason": "r", "duration_minutes": "\x00"}),
        ("/chains/chat/revert", {"reason": "\x00"}),
        ("/chains/chat/extend", {"reason": "r", "duration_minutes": "1099511627776"}),
        ("/chains/chat/history/1/restore", {"reason": "\x00"}),
        ("/chains/chat/history/1099511627776/restore", {"reason": "r"}),
    ],
    ids=[
        "nul-preset",
        "nul-reason",
        "huge-duration",
        "1e309-duration",
        "5000-digit-duration",
        "huge-expected-version",
        "nul-duration",
        "revert-nul-reason",
        "extend-huge",
        "restore-nul-reason",
        "restore-huge-version",
    ],
)
def test_the_change_forms_refuse_bad_fields_without_a_5xx(oncall: Client, url: str, fields: dict[str, str]) -> None:
    before = written_state()
    for confirmed in ({}, {"confirmed": "on"}):  # the review, then the confirmation
        response = oncall.post(url, {"expected_version": "1", **fields, **confirmed})
        assert response.status_code < 500
    assert written_state() == before


def test_a_nul_in_a_form_posts_query_string_is_a_400(oncall: Client) -> None:
    before = written_state()
    response = oncall.post(
        "/chains/chat/select?preset=%00",
        {"preset": "pin_secondary", "reason": "r", "duration_minutes": "60", "expected_version": "1"},
    )
    assert response.status_code == 400
    assert written_state() == before


def test_a_sign_in_with_a_nul_in_the_name_is_no_5xx(db: None, client: Client) -> None:
    response = client.post("/accounts/login/", {"username": "al\x00ice", "password": "x"})
    assert response.status_code < 500


# --- random input: anything at all, anywhere ----------------------------------------------

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any code point, surrogates and controls included, and the ones that break things most often.
texts = st.text(st.characters(exclude_categories=()) | st.sampled_from(["\x00", "\ud800", "\udfff", "\n"]), max_size=8)
numbers = st.sampled_from([10**30, 2**31, 2**31 - 1, 1099511627776, 2**63, -1, 0, 1, 60]) | st.integers()
values = st.recursive(
    st.none() | st.booleans() | numbers | texts | st.sampled_from([WHEN, NAIVE, "pin_secondary"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(texts | st.sampled_from(["reason", "preset", "client"]), children, max_size=3)
    ),
    max_leaves=10,
)
fields = st.sampled_from(
    [
        "preset",
        "reason",
        "duration_minutes",
        "expires_at",
        "expected_version",
        "client",
        "applied_version",
        "providers",
        "rejected",
        "hop",
        "fault",
        "share",
        "services",
        "start",
        "minutes",
    ]
)
bodies = (
    st.dictionaries(fields | texts, values, max_size=5).map(json.dumps)
    | st.integers(30, 3000).map(nested)
    | st.sampled_from(["1e309", "-1e309", "9" * 5000, '{"a": NaN}', "\ud800", "[" * 100_000])
)
header_values = texts | numbers.map(str) | st.sampled_from(["1e309", '"1"', 'W/"1", *'])


@pytest.mark.parametrize("api", WHO, indirect=True)
def test_random_bodies_queries_and_headers_never_answer_5xx_nor_write(api: Client) -> None:
    @FUZZ
    @given(
        url=st.sampled_from(GETS + POSTS),
        body=bodies,
        query=st.dictionaries(texts, texts, max_size=2),
        client_name=header_values,
        version=header_values,
        etag=header_values,
    )
    def check(url: str, body: str, query: dict[str, str], client_name: str, version: str, etag: str) -> None:
        before = written_state()
        # The test client cannot encode a lone surrogate in a URL: it stands for what a server
        # decodes from invalid UTF-8.
        query_string = "&".join(f"{k}={v}" for k, v in query.items()).encode("utf-8", "surrogatepass")
        target = f"{url}?{query_string.decode('latin-1')}" if query else url
        headers = {"X-Chain-Client": client_name, "X-Chain-Applied-Version": version, "If-None-Match": etag}
        if url in GETS:
            response = api.get(target, headers=headers)
        else:
            response = api.post(
                target, body.encode("utf-8", "surrogatepass"), content_type="application/json", headers=headers
            )
        assert response.status_code < 500, (response.status_code, response.content[:300])
        if response.status_code >= 400:
            assert_json_4xx(response)
        if response.status_code not in (200, 202):
            assert written_state() == before

    check()


# --- the plain log format -----------------------------------------------------------------


def test_a_plain_log_record_is_one_line_whatever_the_message_holds() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("presets.services").makeRecord(
            "presets.services",
            logging.INFO,
            __file__,
            1,
            "chat: select by %s: %s",
            ("alice", "INC-1\n2026-11-29 02:00:00,000 INFO presets.services chat: revert by bob\r\x00\u2028"),
            sys.exc_info(),
        )
    formatter = PlainFormatter("%(levelname)s %(name)s %(message)s")
    first, *traceback = formatter.format(record).split("\n")
    assert first == (
        "INFO presets.services chat: select by alice: INC-1\\n2026-11-29 02:00:00,000 INFO "
        "presets.services chat: revert by bob\\r\\x00\\u2028"
    )
    assert traceback[0] == "Traceback (most recent call last):" and traceback[-1] == "ValueError: boom"


def test_the_plain_log_format_uses_the_escaping_formatter() -> None:
    from django.conf import settings as django_settings

    assert django_settings.LOGGING["formatters"]["plain"]["()"] == "controlplane.logging_plain.PlainFormatter"
