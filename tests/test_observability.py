"""Request ids, request durations by route, the database pool, Celery task metrics and the
log fields that tie a request's lines together."""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import resolve
from prometheus_client import CollectorRegistry, Metric, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from controlplane.celery import app as celery_app
from controlplane.log_filters import RequestFields
from controlplane.logging_json import JsonFormatter
from controlplane.logging_plain import PlainFormatter
from read_path import counters, request_context
from read_path.request_context import CHAIN_ROUTE, CHAINS_ROUTE, RequestContext
from read_path.request_ids import request_id_from
from tests import servers
from tests.metrics_text import value

MADE = re.compile(r"[0-9a-f]{32}")
DURATION = "controlplane_http_request_duration_seconds"


def scrape_here() -> str:
    """What this test process recorded, from its own multiprocess files (other test runs on
    the machine may share the directory)."""
    files = glob.glob(os.path.join(settings.PROMETHEUS_MULTIPROC_DIR, f"*_{os.getpid()}.db"))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(files))
    return generate_latest(registry).decode()


class _Merged(Collector):
    def __init__(self, files: list[str]) -> None:
        self.files = files

    def collect(self) -> Iterable[Metric]:
        return MultiProcessCollector.merge(self.files, accumulate=True)


def count(text: str, route: str, method: str, status: int) -> float:
    labels = {"route": route, "method": method, "status": str(status)}
    return value(text, f"{DURATION}_count", labels) or 0.0


# --- the request id -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    ["4bf92f3577b34da6a3ce929d0e0e4736", "req-2026.12.01:7", "a+b/c=", "A" * 64],
    ids=["hex", "dotted", "base64", "longest"],
)
def test_a_well_formed_request_id_is_kept(header: str) -> None:
    assert request_id_from(header) == header
    assert request_id_from(header.encode("latin-1")) == header


@pytest.mark.parametrize(
    "header",
    [None, "", "has space", "A" * 65, 'quote"d', "line\nbreak", "ünïcode", "semi;colon"],
    ids=["absent", "empty", "space", "too-long", "quote", "newline", "non-ascii", "semicolon"],
)
def test_a_missing_or_malformed_request_id_is_replaced_by_a_new_one(header: str | None) -> None:
    made = request_id_from(header)
    assert MADE.fullmatch(made) and made != header
    assert request_id_from(header) != made  # a new one each time


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "status"),
    [("/accounts/login/", 200), ("/api/v1/chains/chat", 401), ("/no/such/page", 404), ("/", 302)],
    ids=["page", "api-error", "not-found", "redirect"],
)
def test_every_answer_django_gives_carries_the_request_id(path: str, status: int) -> None:
    given = Client().get(path, headers={"X-Request-ID": "given-id-1"})
    assert given.status_code == status
    assert given["X-Request-ID"] == "given-id-1"
    malformed = Client().get(path, headers={"X-Request-ID": "not a valid id"})
    assert MADE.fullmatch(malformed["X-Request-ID"])
    assert MADE.fullmatch(Client().get(path)["X-Request-ID"])


# --- durations by route -------------------------------------------------------------------


def test_the_read_fronts_routes_are_spelled_as_djangos_urlconf() -> None:
    assert "/" + resolve("/api/v1/chains").route == CHAINS_ROUTE
    assert "/" + resolve("/api/v1/chains/chat").route == CHAIN_ROUTE


@pytest.mark.django_db
def test_django_requests_are_timed_by_url_pattern_never_by_raw_path(read_token: str) -> None:
    before = scrape_here()
    reader = Client(headers={"Authorization": f"Bearer {read_token}"})
    assert reader.get("/api/v1/chains/nope-1").status_code == 404
    assert reader.get("/api/v1/chains/nope-2").status_code == 404
    assert Client().get("/made/up/1").status_code == 404
    assert Client().get("/made/up/2").status_code == 404
    assert Client().generic("BREW", "/made/up/3").status_code == 404
    after = scrape_here()
    grew = {
        (route, method): count(after, route, method, 404) - count(before, route, method, 404)
        for route, method in [(CHAIN_ROUTE, "GET"), ("unmatched", "GET"), ("unmatched", "other")]
    }
    assert grew == {(CHAIN_ROUTE, "GET"): 2, ("unmatched", "GET"): 2, ("unmatched", "other"): 1}
    assert "nope-1" not in after and "/made/up" not in after and "BREW" not in after


@pytest.mark.django_db
def test_the_fronts_batched_durations_land_in_the_buckets_observe_would_use() -> None:
    seconds = [0.0004, 0.001, 0.0011, 0.3, 10.0, 20.0]  # bounds exactly, between, beyond the last
    batched = counters.Durations(counters.REQUEST_DURATION, counters.REQUEST_BUCKETS)
    for amount in seconds:
        batched.observe(("/test/batched", "GET", 200), amount)
        counters.time_request("/test/observed", "GET", 200, amount)
    assert not scrape_here().count('route="/test/batched"')  # nothing written before the flush
    batched.flush()
    assert not any(any(row) for row in batched.pending.values())  # zeroed once written

    def samples(route: str) -> list[str]:
        lines = [line for line in scrape_here().splitlines() if f'route="{route}"' in line]
        return sorted(line.replace(route, "ROUTE") for line in lines)

    observed = samples("/test/observed")
    assert samples("/test/batched") == observed
    assert 'le="0.001",method="GET",route="ROUTE",status="200"} 2.0' in "".join(observed)


# --- logs ------------------------------------------------------------------------------------


def record(name: str = "presets.services", **extra: Any) -> logging.LogRecord:
    return logging.getLogger(name).makeRecord(name, logging.INFO, __file__, 1, "chain %s", ("chat",), None, extra=extra)


def test_json_lines_keep_every_extra_field() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque thing"

    circular: list[Any] = []
    circular.append(circular)
    entry = json.loads(
        JsonFormatter().format(
            record(
                chain="chat",
                version=3,
                took_ms=1.5,
                pinned=True,
                steps=["a", "b"],
                detail={"k": [1, None]},
                thing=Opaque(),
                loop=circular,
                level="forged",
            )
        )
    )
    assert entry["message"] == "chain chat" and entry["level"] == "INFO"  # never replaced by an extra
    assert {key: entry[key] for key in ("chain", "version", "took_ms", "pinned", "steps", "detail")} == {
        "chain": "chat",
        "version": 3,
        "took_ms": 1.5,
        "pinned": True,
        "steps": ["a", "b"],
        "detail": {"k": [1, None]},
    }
    assert entry["thing"] == "opaque thing" and isinstance(entry["loop"], str)
    assert not {"args", "msg", "pathname", "lineno", "exc_info", "created"} & entry.keys()


@pytest.fixture
def in_a_request() -> Iterator[RequestContext]:
    context = RequestContext("req-42", time.perf_counter())
    token = request_context.current.set(context)
    yield context
    request_context.current.reset(token)


def test_records_written_during_a_request_name_it(in_a_request: RequestContext) -> None:
    during = record()
    assert RequestFields().filter(during)
    assert json.loads(JsonFormatter().format(during))["request_id"] == "req-42"
    formatter = PlainFormatter("%(levelname)s %(name)s %(message)s")
    assert formatter.format(during) == "INFO presets.services chain chat request_id=req-42"
    request_context.current.set(None)
    outside = record()
    RequestFields().filter(outside)
    assert "request_id" not in json.loads(JsonFormatter().format(outside))
    assert formatter.format(outside) == "INFO presets.services chain chat"


# --- through the production web process -----------------------------------------------------


@pytest.fixture
def json_logging_stack() -> Iterator[servers.Stack]:
    servers.require_tools("observability system tests")
    with servers.running_stack("observe", env={"LOG_FORMAT": "json", "LOG_LEVEL": "INFO"}) as stack:
        yield stack


def log_lines(stack: servers.Stack) -> list[dict[str, Any]]:
    lines = []
    for line in (stack.root / "web.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


@pytest.mark.system
def test_the_web_process_times_each_route_and_names_each_request_in_its_log(json_logging_stack: servers.Stack) -> None:
    stack = json_logging_stack
    status, headers, _ = servers.request(
        stack,
        "POST",
        "/api/v1/chains/chat/select",
        token=stack.write_token,
        body={"preset": "pin_secondary", "reason": "INC-9 observe"},
        headers={"X-Request-ID": "select-0001"},
    )
    assert status == 200 and headers["x-request-id"] == "select-0001"
    status, headers, _ = servers.request(stack, "GET", "/", session=True)
    assert status == 200 and MADE.fullmatch(headers["x-request-id"])
    # The read front: a read with a malformed id, a refusal, a long poll held to its end.
    status, headers, _ = servers.request(
        stack, "GET", "/api/v1/chains/chat", token=stack.read_token, headers={"X-Request-ID": "no good!"}
    )
    assert status == 200 and MADE.fullmatch(headers["x-request-id"])
    etag = headers["etag"]
    status, headers, _ = servers.request(
        stack, "GET", "/api/v1/chains/nope", token=stack.read_token, headers={"X-Request-ID": "front-404"}
    )
    assert status == 404 and headers["x-request-id"] == "front-404"
    status, headers, _ = servers.request(
        stack, "GET", "/api/v1/chains/chat?wait=0.3", token=stack.read_token, headers={"If-None-Match": etag}
    )
    assert status == 304 and MADE.fullmatch(headers["x-request-id"])
    # Django's refusal: its django.request line is the request's one line.
    status, headers, _ = servers.request(
        stack, "GET", "/api/v1/chains/nope/history", token=stack.read_token, headers={"X-Request-ID": "django-404"}
    )
    assert status == 404 and headers["x-request-id"] == "django-404"

    def scrape() -> str:
        return servers.get(stack, "/metrics")[2].decode()

    def front_flushed() -> bool:  # the front hands its figures over once a second
        return value(scrape(), "controlplane_long_poll_hold_seconds_count", {"status": "304"}) == 1

    assert servers.wait_for(front_flushed, 10), scrape()
    text = scrape()
    assert count(text, "/api/v1/chains/<slug:name>/select", "POST", 200) == 1
    assert count(text, "/", "GET", 200) == 1
    assert count(text, CHAIN_ROUTE, "GET", 200) >= 1
    assert count(text, CHAIN_ROUTE, "GET", 304) == 1  # the held poll, its hold not in its time
    assert (value(text, f"{DURATION}_sum", {"route": CHAIN_ROUTE, "method": "GET", "status": "304"}) or 1) < 0.3
    assert (value(text, "controlplane_long_poll_hold_seconds_sum", {"status": "304"}) or 0) >= 0.3
    assert count(text, "/api/v1/chains/<slug:name>/history", "GET", 404) == 1
    # The pool of the one web process: at most DATABASE_POOL_MAX_SIZE (8), in use or idle.
    assert value(text, "controlplane_db_pool_max_connections") == 8
    in_use = value(text, "controlplane_db_pool_connections", {"state": "in_use"})
    idle = value(text, "controlplane_db_pool_connections", {"state": "idle"})
    assert in_use is not None and idle is not None and 1 <= in_use + idle <= 8
    assert value(text, "controlplane_db_pool_waiting_requests") == 0

    def lines_of(request_id: str) -> list[dict[str, Any]]:
        return [line for line in log_lines(stack) if line.get("request_id") == request_id]

    assert servers.wait_for(lambda: len(lines_of("django-404")) >= 1, 5), log_lines(stack)[-10:]
    select = lines_of("select-0001")
    assert {line["logger"] for line in select} == {"presets.services", "controlplane.access"}, select
    [access] = [line for line in select if line["logger"] == "controlplane.access"]
    assert access["route"] == "/api/v1/chains/<slug:name>/select" and access["path"] == "/api/v1/chains/chat/select"
    assert (access["method"], access["status_code"]) == ("POST", 200) and access["duration_ms"] > 0
    [refused] = lines_of("django-404")  # one line, not an access line besides it
    assert refused["logger"] == "django.request" and refused["level"] == "WARNING"
    assert refused["route"] == "/api/v1/chains/<slug:name>/history" and refused["status_code"] == 404
    assert refused["duration_ms"] > 0 and refused["method"] == "GET"
    [front] = lines_of("front-404")
    assert front["logger"] == "controlplane.access" and front["route"] == CHAIN_ROUTE and front["status_code"] == 404
    # The front's 200s and 304s (every SDK poll) are off by default: ACCESS_LOG_READS.
    assert not [line for line in log_lines(stack) if line["logger"] == "controlplane.access.reads"]


# --- Celery -----------------------------------------------------------------------------------


@celery_app.task(name="tests.test_observability.divide")
def divide(a: int, b: int) -> float:
    return a / b


@pytest.mark.django_db
def test_each_task_is_counted_and_timed_by_name_and_outcome() -> None:
    def counted(outcome: str) -> float:
        labels = {"task": "tests.test_observability.divide", "outcome": outcome}
        return value(scrape_here(), "controlplane_celery_task_duration_seconds_count", labels) or 0.0

    before = {outcome: counted(outcome) for outcome in ("success", "failure")}
    assert divide.apply(args=(1, 2)).get() == 0.5
    assert divide.apply(args=(1, 2)).get() == 0.5
    assert divide.apply(args=(1, 0)).failed()
    assert counted("success") - before["success"] == 2
    assert counted("failure") - before["failure"] == 1


def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@pytest.mark.postgres
def test_a_worker_with_its_own_metrics_directory_serves_its_task_metrics(
    synced: None, start_worker: Any, tmp_path: Path
) -> None:
    """As in docker-compose.yml: the worker's files are its container's own, so it serves
    them on CELERY_METRICS_PORT (behind METRICS_TOKEN, like the web's /metrics)."""
    port = servers.free_port()
    log = start_worker(
        EXPIRE_PINS_EVERY_SECONDS="1",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics"),
        CELERY_METRICS_PORT=str(port),
        METRICS_TOKEN="worker-scrape-token",
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def expiry_sweeps() -> float:
        labels = {"task": "worker.pins.expire_pins", "outcome": "success"}
        status, text = fetch(url, "worker-scrape-token")
        return (value(text, "controlplane_celery_task_duration_seconds_count", labels) or 0.0) if status == 200 else 0.0

    assert servers.wait_for(lambda: expiry_sweeps() >= 1, 60, every=0.5), log.read_text()[-4000:]
    assert fetch(url)[0] == 401
    assert fetch(url, "wrong")[0] == 401
