"""A pin live longer than PIN_ALERT_AFTER_MINUTES raises one stale_pin alert per pin episode,
resolved when the pin ends; extending it neither re-raises nor resolves it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import override_settings

from audit import alerts
from audit.models import Alert
from presets import services
from presets.models import Chain, Selection
from tests.test_expiry_sweeps import race_on_the_row_lock
from worker import tasks

T0 = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)


def pin(preset: str = "pin_secondary", actor: str = "alice", **kwargs) -> Selection:
    kwargs.setdefault("reason", "INC-7 vendor_a returns garbage")
    return services.select_preset(chain="chat", preset=preset, actor=actor, **kwargs)


def stale_alerts() -> list[Alert]:
    return list(Alert.objects.filter(kind="stale_pin").order_by("id"))


def test_a_pin_past_the_threshold_raises_one_alert_however_many_sweeps_run(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=60))
        assert alerts.sweep_stale_pins().raised == 0  # live for exactly 60 min: not longer
        clock.shift(timedelta(minutes=1))
        assert alerts.sweep_stale_pins().raised == 1
        for _ in range(3):
            clock.shift(timedelta(minutes=1))
            assert alerts.sweep_stale_pins().raised == 0

    [alert] = stale_alerts()
    assert (alert.chain.name, alert.version, alert.is_open) == ("chat", 2, True)
    document = alert.to_document()
    assert {
        key: document[key]
        for key in ("preset", "actor", "reason", "pinned_at", "expires_at", "age_seconds", "age", "url")
    } == {
        "preset": "pin_secondary",
        "actor": "alice",
        "reason": "INC-7 vendor_a returns garbage",
        "pinned_at": "2026-11-29T02:00:00Z",
        "expires_at": "2026-11-29T06:00:00Z",
        "age_seconds": 3660,
        "age": "1 h 1 min",
        "url": "http://localhost:8000/chains/chat/",
    }
    for fact in ("chat", "pin_secondary", "1 h 1 min", "v2", "alice", "INC-7", "06:00:00Z", "normal"):
        assert fact in alert.message


@override_settings(PIN_ALERT_AFTER_MINUTES=5)
def test_the_threshold_is_configurable(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=5, seconds=1))
        assert tasks.alert_stale_pins() == 1


def test_a_chain_on_its_default_never_raises_one(synced) -> None:
    with time_machine.travel(T0 + timedelta(days=3), tick=False):
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=0, resolved=0)
    assert not Alert.objects.exists()


@override_settings(PIN_ALERT_AFTER_MINUTES=5)
def test_a_pin_past_its_expiry_is_left_to_the_expiry_sweep_to_report(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(minutes=10))
        clock.shift(timedelta(minutes=10, seconds=30))
        assert alerts.sweep_stale_pins().raised == 0
        assert services.expire_pins() == 1
    assert [a.kind for a in Alert.objects.all()] == ["pin_expired"]


def end_by_revert() -> None:
    services.revert_to_default(chain="chat", actor="bob", reason="vendor_a fixed")


def end_by_replacing() -> None:
    pin(preset="local_only", actor="bob", reason="vendor_b down too")


def end_by_restoring_the_default() -> None:
    services.restore(chain="chat", version=2, actor="bob", reason="undo v2")


@pytest.mark.parametrize(
    ("end_pin", "resolution"),
    [
        (end_by_revert, "pin ended by v3: revert to normal by bob: vendor_a fixed"),
        (end_by_replacing, "pin ended by v3: select to local_only by bob: vendor_b down too"),
        (end_by_restoring_the_default, "pin ended by v3: restore to normal by bob: undo v2"),
    ],
    ids=["reverted", "replaced", "restored"],
)
def test_the_alert_is_resolved_by_the_next_sweep_when_a_person_ends_the_pin(
    synced, end_pin: Callable[[], None], resolution: str
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        clock.shift(timedelta(minutes=1))
        end_pin()
        clock.shift(timedelta(seconds=30))
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=0, resolved=1)
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=0, resolved=0)

    [alert] = stale_alerts()
    assert alert.resolution == resolution
    assert alert.resolved_at == T0 + timedelta(minutes=62)  # when the pin ended
    assert alerts.recent_alerts(open_only=True) == []


def test_an_expiry_resolves_the_alert_at_once(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(minutes=90))
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        clock.shift(timedelta(minutes=30))
        assert services.expire_pins() == 1

    stale = stale_alerts()[0]
    assert stale.resolved_at == T0 + timedelta(minutes=91)
    assert stale.resolution.startswith("pin ended by v3: expire to normal by system:expiry")
    assert [(a.kind, a.version, a.is_open) for a in Alert.objects.order_by("id")] == [
        ("stale_pin", 2, False),
        ("pin_expired", 3, False),
    ]


def test_a_replacing_pin_is_a_new_pin_with_its_own_alert(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=61))
        alerts.sweep_stale_pins()
        end_by_replacing()  # v3 at T0+61m
        clock.shift(timedelta(minutes=59))
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=0, resolved=1)
        clock.shift(timedelta(minutes=2))
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=1, resolved=0)

    assert [(a.version, a.details["preset"], a.is_open) for a in stale_alerts()] == [
        (2, "pin_secondary", False),
        (3, "local_only", True),
    ]


def test_extending_a_pin_neither_re_raises_nor_resolves_its_alert(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(hours=2))
        clock.shift(timedelta(minutes=61))
        assert alerts.sweep_stale_pins().raised == 1
        services.extend_pin(chain="chat", actor="bob", reason="still broken", expires_at=timedelta(hours=4))  # v3
        clock.shift(timedelta(hours=2))
        services.extend_pin(chain="chat", actor="bob", reason="still broken")  # v4
        clock.shift(timedelta(hours=1))
        assert alerts.sweep_stale_pins() == alerts.StaleSweep(raised=0, resolved=0)

    [alert] = stale_alerts()
    assert (alert.version, alert.is_open) == (2, True)


def test_a_pin_extended_before_the_threshold_is_stale_from_when_it_started(synced) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        pin(expires_at=timedelta(minutes=45))
        clock.shift(timedelta(minutes=40))
        services.extend_pin(chain="chat", actor="bob", reason="give it an hour")
        clock.shift(timedelta(minutes=21))
        assert alerts.sweep_stale_pins().raised == 1

    [alert] = stale_alerts()
    assert (alert.version, alert.details["pinned_by"], alert.details["live_version"]) == (2, "alice", 3)
    assert alert.details["age_seconds"] == 61 * 60


def test_an_alert_is_recorded_once_per_kind_chain_and_version(synced) -> None:
    chain = Chain.objects.get(name="chat")
    first, created = alerts.raise_alert(kind="stale_pin", chain=chain, version=2, message="a", details={}, now=T0)
    again, created_again = alerts.raise_alert(kind="stale_pin", chain=chain, version=2, message="b", details={}, now=T0)
    assert (created, created_again, again.pk, again.message) == (True, False, first.pk, "a")
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(kind="stale_pin", chain=chain, version=2, message="c")


def test_the_command_runs_one_sweep_and_prints_the_counts(synced) -> None:
    out = StringIO()
    with time_machine.travel(T0, tick=False) as clock:
        pin()
        clock.shift(timedelta(minutes=61))
        call_command("alert_stale_pins", stdout=out)
        end_by_revert()
        call_command("alert_stale_pins", stdout=out)
    assert out.getvalue().splitlines() == [
        "raised 1 stale-pin alert(s), resolved 0, attempted delivery of 0",
        "raised 0 stale-pin alert(s), resolved 1, attempted delivery of 0",
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_racing_on_postgres_raise_the_alert_once(synced) -> None:
    selection = pin()
    later = selection.updated_at + timedelta(minutes=61)

    results = race_on_the_row_lock(selection, lambda: alerts.sweep_stale_pins(now=later).raised)

    assert sorted(results) == [0, 1]
    assert [(a.kind, a.version) for a in Alert.objects.all()] == [("stale_pin", 2)]
