"""The provider-health promise as a system: 40 real SDK instances poll their chain, route real
requests (their vendors faked by chainclient.testing) and report to a real running control
plane; the API and the on-call pages show the truth within 15 s, provider_failing is raised
once, on the evidence of the instances that poll, naming their token, and resolves on
recovery."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from audit.models import Alert, AlertKind
from chainclient import ChainClient, Provider, ProviderError, Registry, Router, Step
from chainclient.testing import FakeProviders
from presets.registry import PROVIDERS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

INSTANCES = 40
REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000), Step("vendor_b", "large", 20000), Step("self_hosted", "8b", 10000)]
WITHIN_S = 15.0


class Instance:
    """One service instance: a ChainClient reporting usage each second, a Router over fakes
    whose vendor_a fails every other request while ``failing`` is set."""

    def __init__(self, url: str, token: str, number: int, failing: threading.Event) -> None:
        self.client = ChainClient(
            url,
            chain="chat",
            token=token,
            registry=REGISTRY,
            default=DEFAULT,
            long_poll=False,
            poll_interval=30.0,
            usage_interval=1.0,
            service="fleet-test",
            instance=f"i{number:02d}",
        )
        calls = itertools.count()

        def vendor_a(step: Step, request: Any, timeout_s: float) -> str:
            if failing.is_set() and next(calls) % 2 == 0:
                raise ProviderError(503, True, "overloaded")
            return "vendor_a answered"

        fakes = FakeProviders(providers=("vendor_a", "vendor_b", "self_hosted")).configure({"vendor_a": vendor_a})
        self.router = Router(self.client, transports=fakes.transports, breaker=None)


def wait_for(condition: Callable[[], bool], timeout: float, between: Callable[[], None]) -> float:
    """Seconds until ``condition`` held (running ``between`` each round, as traffic), or fail."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        between()
        if condition():
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g}s")


@pytest.fixture
def fleet(live_server: Any, read_token: str) -> Iterator[tuple[list[Instance], threading.Event]]:
    failing = threading.Event()
    failing.set()
    instances = [Instance(live_server.url, read_token, n, failing) for n in range(INSTANCES)]
    for instance in instances:
        instance.client.start()
    yield instances, failing
    for instance in instances:
        instance.client.stop()


def shown_rate(html: str, provider: str) -> float:
    """The error rate a page shows for ``provider``, in percent."""
    match = re.search(rf'<span class="health-summary">{provider}: ([0-9.]+) % errors', html)
    assert match, f"no health shown for {provider}"
    return float(match.group(1))


def test_forty_instances_show_a_failing_vendor_raise_one_alert_and_resolve_it(
    fleet: tuple[list[Instance], threading.Event], reader: Client, alice: User, settings: Any
) -> None:
    settings.PROVIDER_FAILING_MINUTES = 1
    # These instances report every second, not every minute: limits sized for that.
    settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE = 120
    settings.USAGE_REPORTS_PER_TOKEN_PER_MINUTE = settings.USAGE_REPORTS_PER_CHAIN_PER_MINUTE = 60 * 120
    instances, failing = fleet
    oncall = Client()
    oncall.force_login(alice)

    def traffic() -> None:  # every instance serves two requests a round, as services do
        for instance in instances:
            for _ in range(2):
                assert instance.router.complete("hello").provider in {"vendor_a", "vendor_b"}

    def head() -> dict[str, Any]:
        steps = reader.get("/api/v1/chains/chat/health").json()["steps"]
        return next(s for s in steps if (s["provider"], s["model"]) == ("vendor_a", "large"))

    def failing_alerts() -> list[Alert]:
        return list(Alert.objects.filter(kind=AlertKind.PROVIDER_FAILING))

    with time_machine.travel(datetime.now(UTC), tick=True) as clock:
        shown_after = wait_for(
            lambda: head()["instances"] == INSTANCES and head()["recent"]["attempts"] >= 400,
            WITHIN_S,
            traffic,
        )
        recent = head()["recent"]
        assert abs(recent["error_rate"] - 0.5) <= 0.05, recent
        assert recent["outcomes"]["server_error"] > 0
        # The dashboard: the failing-now line and the head's step, within 5 points of the truth.
        dashboard = oncall.get("/").content.decode()
        failing_now = re.search(r"vendor_a/large on chat: ([0-9.]+) % errors \(mostly 5xx\)", dashboard)
        assert failing_now and abs(float(failing_now.group(1)) - 50) <= 5, failing_now
        assert abs(shown_rate(dashboard, "vendor_a") - 50) <= 5
        assert f"{INSTANCES} instances" in dashboard
        # The review page for pin_secondary: the live head's health beside the new head's.
        review = oncall.post(
            "/chains/chat/select",
            {"preset": "pin_secondary", "duration_minutes": "60", "reason": "INC-1", "expected_version": "1"},
            follow=True,  # the review is shown by a GET (no resubmission)
        ).content.decode()
        live_card, after = review.split('id="after-heading"')
        assert abs(shown_rate(live_card, "vendor_a") - 50) <= 5
        assert shown_rate(after.split("</ol>")[0], "vendor_b") <= 5  # its head, first in its steps
        wait_for(lambda: len(failing_alerts()) == 1, WITHIN_S, traffic)

        failing.clear()  # vendor_a recovers
        clock.shift(timedelta(minutes=2))  # and its failures leave the alert's window
        wait_for(lambda: not failing_alerts()[0].is_open, WITHIN_S, traffic)

    (alert,) = failing_alerts()  # raised once, however many reports judged it
    assert alert.subject == "vendor_a/large"
    assert "mostly 5xx" in alert.message
    assert alert.details["tokens"] == ["reader"]
    assert alert.details["failing_instances"] >= 3
    assert shown_after <= WITHIN_S
