"""schemathesis against our own OpenAPI schema (/api/schema/), in-process over WSGI.

Authenticated with a write token (which may also read; fleet reports with a relay token): no answer is a 5xx, and every
answer (status code, content type, body) is one the schema declares.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from audit import drills as fleet_drills
from controlplane.wsgi import application
from presets import drills, plans, services

pytestmark = pytest.mark.usefixtures("synced")

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
OPERATIONS = [
    ("GET", "/api/v1/chains"),
    ("GET", "/api/v1/chains/{name}"),
    ("GET", "/api/v1/chains/{name}/history"),
    ("POST", "/api/v1/chains/{name}/select"),
    ("POST", "/api/v1/chains/{name}/revert"),
    ("POST", "/api/v1/chains/{name}/extend"),
    ("POST", "/api/v1/chains/{name}/history/{version}/restore"),
    ("POST", "/api/v1/chains/{name}/usage"),
    ("POST", "/api/v1/fleet/seen"),
    ("GET", "/api/v1/chains/{name}/health"),
    ("GET", "/api/v1/chains/{name}/spend"),
    ("GET", "/api/v1/chains/{name}/instances"),
    ("GET", "/api/v1/alerts"),
    ("GET", "/api/v1/fleet"),
    ("GET", "/api/v1/history"),
    ("GET", "/api/v1/notifications"),
    ("GET", "/api/v1/plans"),
    ("GET", "/api/v1/chains/{name}/plans"),
    ("POST", "/api/v1/chains/{name}/plans"),
    ("GET", "/api/v1/chains/{name}/plans/{plan}"),
    ("PATCH", "/api/v1/chains/{name}/plans/{plan}"),
    ("POST", "/api/v1/chains/{name}/plans/{plan}/cancel"),
    ("POST", "/api/v1/chains/{name}/plans/{plan}/start"),
    ("GET", "/api/v1/chains/{name}/guard"),
    ("POST", "/api/v1/chains/{name}/guard/off"),
    ("GET", "/api/v1/chains/{name}/presets"),
    ("GET", "/api/v1/chains/{name}/drills"),
    ("POST", "/api/v1/chains/{name}/drills"),
    ("GET", "/api/v1/drills/{drill}"),
    ("POST", "/api/v1/drills/{drill}/abort"),
    ("GET", "/api/v1/environments/{environment}/promotions"),
    ("POST", "/api/v1/environments/{environment}/promotions"),
    ("POST", "/api/v1/environments/{environment}/promotions/{promotion}/approve"),
    ("POST", "/ofrep/v1/evaluate/flags"),
    ("POST", "/ofrep/v1/evaluate/flags/{key}"),
]


@pytest.fixture
def schema(db: Any) -> Any:
    """The schema as served, its requests sent to the WSGI app inside the test's transaction:
    like Django's test client, keep the handler from closing the test's connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_every_api_operation_is_in_the_schema(schema: Any) -> None:
    declared = {(operation.ok().method.upper(), operation.ok().path) for operation in schema.get_all_operations()}
    assert declared == set(OPERATIONS) | set(SESSION_OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_the_api_answers_as_its_schema_says_and_never_with_a_5xx(
    schema: Any, write_token: str, relay_token: str, method: str, path: str
) -> None:
    operation = schema[path][method]
    # Fleet reports are a relay's: its token sends them (a write token is refused, 403).
    headers = {"Authorization": f"Bearer {relay_token if path == '/api/v1/fleet/seen' else write_token}"}
    now = timezone.now()
    # A plan of chat to read, change, cancel and start; and a free window to plan in.
    planned = plans.plan_pin(
        chain="chat",
        preset="drop_vendor_b",
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=2),
        actor="alice",
        reason="schema fuzz",
    )
    window = {"starts_at": (now + timedelta(hours=3)).isoformat(), "ends_at": (now + timedelta(hours=4)).isoformat()}
    if "/guard" in path:
        # A guarded pin on chat, so that the guard's 200 answers are checked too.
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="schema fuzz", guard=True)
    drill = None
    if "drill" in path or "/presets" in path:
        # A drill of incident-summary to read and abort, with its last drill (one aborted) on
        # its presets; chat stays free for new drills, so that their 201 answers are checked.
        drilled = {"chain": "incident-summary", "hop": 1, "fault": "timeout", "share": 5, "actor": "alice"}
        ended = fleet_drills.start_drill(**drilled, reason="schema fuzz")
        drills.abort_drill(drill=ended.pk, actor="alice", reason="schema fuzz")
        drill = fleet_drills.start_drill(**drilled, reason="schema fuzz")

    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "25")),
        deadline=None,
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=operation.as_strategy(),
        name=st.sampled_from(["chat", "incident-summary", "nope"]),
        version=st.integers(1, 3),
        preset=st.sampled_from(["pin_secondary", "local_only", None]),
        realistic=st.booleans(),
    )
    def check(case: Any, name: str, version: int, preset: str | None, realistic: bool) -> None:
        # Mostly chains and versions that exist: random names would only ever meet a 404.
        if case.path_parameters and "name" in case.path_parameters:
            case.path_parameters = {**case.path_parameters, "name": name}
            if "version" in case.path_parameters:
                case.path_parameters["version"] = version
            if "plan" in case.path_parameters and realistic:
                case.path_parameters["plan"] = planned.pk
        if case.path_parameters and "drill" in case.path_parameters and realistic and drill is not None:
            case.path_parameters = {**case.path_parameters, "drill": drill.pk}
        if realistic and isinstance(case.body, dict):
            # ...and bodies a real client sends, so that the 200 answers are checked too.
            body = {key: value for key, value in case.body.items() if key not in {"expected_version", "expires_at"}}
            body["reason"] = "schema fuzz"
            if preset is not None and "preset" in body:
                body["preset"] = preset
            if "duration_minutes" in body:
                body["duration_minutes"] = 30
            body.update({key: value for key, value in window.items() if key in body})
            if "hop" in body:  # a drill: values it takes
                body.update(hop=1, fault="server_error", share=10, services=[], start=None, minutes=15)
                body.update(repeat_days=None, max_failed=0, max_fallback_error_pct=10)
            case.body = body
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        statuses[response.status_code] += 1

    statuses: Counter[int] = Counter()
    check()
    assert 401 not in statuses and 403 not in statuses, statuses  # the token was sent


# --- operations for signed-in people only (service tokens are refused) ----------------------

SESSION_OPERATIONS = [("GET", "/api/v1/access-history")]


@pytest.mark.parametrize(("method", "path"), SESSION_OPERATIONS, ids=[f"{m} {p}" for m, p in SESSION_OPERATIONS])
def test_the_session_api_answers_as_its_schema_says_and_never_with_a_5xx(
    schema: Any, alice: Any, method: str, path: str
) -> None:
    from django.conf import settings as django_settings
    from django.test import Client

    client = Client()
    client.force_login(alice)
    session = {django_settings.SESSION_COOKIE_NAME: client.cookies[django_settings.SESSION_COOKIE_NAME].value}
    operation = schema[path][method]

    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "25")),
        deadline=None,
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        response = case.call_and_validate(cookies=session, checks=CHECKS)
        statuses[response.status_code] += 1

    statuses: Counter[int] = Counter()
    check()
    # Some cases carry a session cookie of schemathesis's own making (the schema declares
    # cookie auth), which is a 401; the rest are alice's, an on-call engineer's.
    assert 200 in statuses and 403 not in statuses, statuses
