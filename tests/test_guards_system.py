"""Guarded pins as a system: real SDK instances (their vendors faked by chainclient.testing)
poll a live control plane, route requests and report their attempts every second through the
usage API; the guards are weighed as the beat weighs them, between rounds of traffic.

Five chains run side by side, each a case of the guard, pinned at once from vendor_a to
vendor_b with a guard (GUARD_BAKE_MINUTES 1, GUARD_SUSTAINED_SECONDS 5):

- ``g-degrade``: vendor_b fails half its requests after the pin → restored within the bake
  window + 30 s, once, by ``system:guard``, with the evidence in the reason and an alert;
- ``g-noise``: vendor_b fails 1 in 20 (5 points over vendor_a, inside the 10-point margin);
- ``g-few``: two instances only (GUARD_MIN_INSTANCES is 3);
- ``g-old-bad``: vendor_a was failing before the pin (why it was made), vendor_b fails too;
- ``g-off``: vendor_b fails half, but the on-call switched the guard off.

The four that must not act are watched for as long as the first took to act and twice the
sustained span more, then the clock is moved past the bake window: they pass, never acting.

Slow by nature (~30 s): the evidence is real reports arriving over real seconds.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.conf import settings as django_settings
from django.utils import timezone

from audit import guards as weighing
from audit.models import Alert, AlertKind
from chainclient import AllProvidersFailed, ChainClient, Provider, ProviderError, Registry, Router, Step
from chainclient.testing import FakeProviders
from presets import guards, services
from presets.models import PinGuard, Selection
from presets.presets_file import load_presets_file
from presets.providers import get_registry
from presets.registry import PROVIDERS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000), Step("vendor_b", "large", 20000)]
CASES = {  # chain: (instances, vendor_a fails 1 in N before the pin (0: never), vendor_b fails 1 in N after)
    "g-degrade": (4, 0, 2),
    "g-noise": (4, 0, 20),
    "g-few": (2, 0, 2),
    "g-old-bad": (4, 2, 2),
    "g-off": (4, 0, 2),
}
BAKE_S = 60
SUSTAINED_S = 5


def failing_every(n: int, vendor: str) -> Callable[[Step, Any, float], str]:
    calls = itertools.count(1)

    def transport(step: Step, request: Any, timeout_s: float) -> str:
        if n and next(calls) % n == 0:
            raise ProviderError(503, True, f"{vendor} overloaded")
        return f"{vendor} answered"

    return transport


class Instance:
    def __init__(self, url: str, token: str, chain: str, number: int, old_fails: int, new_fails: int) -> None:
        self.client = ChainClient(
            url,
            chain=chain,
            token=token,
            registry=REGISTRY,
            default=DEFAULT,
            long_poll=False,
            poll_interval=0.5,
            usage_interval=1.0,
            service="guard-test",
            instance=f"{chain}-i{number}",
        )
        fakes = FakeProviders(providers=("vendor_a", "vendor_b")).configure(
            {"vendor_a": failing_every(old_fails, "vendor_a"), "vendor_b": failing_every(new_fails, "vendor_b")}
        )
        self.router = Router(self.client, transports=fakes.transports, breaker=None)

    def serve(self, requests: int) -> None:
        for _ in range(requests):
            try:
                self.router.complete("hello")
            except AllProvidersFailed:
                pass  # both vendors failed this one: the service's own error, counted all the same


@pytest.fixture
def chains(transactional_db: Any, tmp_path: Path) -> None:
    example = json.loads((Path(django_settings.BASE_DIR) / "presets" / "presets.example.json").read_text())
    chat = example["chains"]["chat"]
    presets = {
        "normal": {**chat["presets"]["normal"], "chain": chat["presets"]["normal"]["chain"][:2]},
        "pin_secondary": {**chat["presets"]["pin_secondary"], "chain": chat["presets"]["pin_secondary"]["chain"][:2]},
    }
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"chains": {name: {**chat, "presets": presets} for name in CASES}}))
    services.sync_presets(presets_file=load_presets_file(path, registry=get_registry()))


@pytest.fixture
def fleet(live_server: Any, read_token: str, chains: None, settings: Any) -> Iterator[dict[str, list[Instance]]]:
    settings.GUARD_BAKE_MINUTES = BAKE_S // 60
    settings.GUARD_SUSTAINED_SECONDS = SUSTAINED_S
    # These instances report every second, not every minute: limits sized for that.
    settings.USAGE_REPORTS_PER_INSTANCE_PER_MINUTE = 120
    settings.USAGE_REPORTS_PER_TOKEN_PER_MINUTE = settings.USAGE_REPORTS_PER_CHAIN_PER_MINUTE = 60 * 120
    instances = {
        chain: [Instance(live_server.url, read_token, chain, n, old, new) for n in range(count)]
        for chain, (count, old, new) in CASES.items()
    }
    everyone = [i for group in instances.values() for i in group]
    for instance in everyone:
        instance.client.start()
    deadline = time.monotonic() + 10
    while any(i.client.current().version != 1 for i in everyone):
        assert time.monotonic() < deadline, "the instances did not read their chains"
        time.sleep(0.1)
    yield instances
    for instance in everyone:
        instance.client.stop()


def traffic(fleet: dict[str, list[Instance]]) -> None:
    """A round: every instance serves five requests, as services do between the beat's checks."""
    for group in fleet.values():
        for instance in group:
            instance.serve(5)


def run_until(fleet: dict[str, list[Instance]], condition: Callable[[], bool], timeout: float) -> float:
    """Rounds of traffic and the guards' check until ``condition``; seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        traffic(fleet)
        weighing.check_guards()
        if condition():
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s")


def rounds_for(fleet: dict[str, list[Instance]], seconds: float, *, check: bool = False) -> None:
    """Rounds of traffic (and the guards' check) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        traffic(fleet)
        if check:
            weighing.check_guards()
        time.sleep(0.2)


def guard(chain: str) -> PinGuard:
    return PinGuard.objects.get(chain__name=chain)


def test_a_guarded_pin_that_makes_things_worse_is_restored_once_and_the_others_never(
    fleet: dict[str, list[Instance]],
) -> None:
    # Before the pin: three seconds of traffic on vendor_a, the head every chain serves.
    rounds_for(fleet, 3)
    time.sleep(1.5)  # the last reports of vendor_a arrive
    pinned_at = timezone.now()
    for chain in CASES:
        services.select_preset(chain=chain, preset="pin_secondary", actor="alice", reason=f"INC-1 {chain}", guard=True)
    guards.switch_off(chain="g-off", actor="bob", reason="vendor_b is expected to wobble tonight")
    run_until(fleet, lambda: all(i.client.current().preset == "pin_secondary" for g in fleet.values() for i in g), 10)

    took = run_until(fleet, lambda: guard("g-degrade").state == "acted", BAKE_S + 30)
    restored = Selection.objects.select_related("preset").get(chain__name="g-degrade")
    acted_after = (restored.updated_at - pinned_at).total_seconds()
    print(
        f"\nfigures: guard_restored_after_pin_s={acted_after:.1f} (bake {BAKE_S} s + 30 s; sustained {SUSTAINED_S} s)"
    )
    assert acted_after <= BAKE_S + 30
    assert (restored.version, restored.preset.name, restored.updated_by, restored.action) == (
        3,
        "normal",
        "system:guard",
        "restore",
    )
    assert "vendor_b/large did worse than vendor_a/large" in restored.reason
    evidence = guard("g-degrade").evidence
    assert evidence["current"]["instances"] == 4 and evidence["current"]["error_rate"] >= 0.4
    assert Alert.objects.filter(kind=AlertKind.GUARD_RESTORED, chain__name="g-degrade").count() == 1
    # The instances follow the restore.
    run_until(fleet, lambda: all(i.client.current().preset == "normal" for i in fleet["g-degrade"]), 10)

    # The others: as long again and twice the sustained span, no action.
    rounds_for(fleet, took + 2 * SUSTAINED_S, check=True)
    for chain in ("g-noise", "g-few", "g-old-bad", "g-off"):
        live = Selection.objects.select_related("preset").get(chain__name=chain)
        assert (live.version, live.preset.name) == (2, "pin_secondary"), chain
    assert guard("g-old-bad").state == "passed" and "was failing before the pin" in guard("g-old-bad").state_reason
    assert guard("g-off").state == "off"
    # Past the bake window, the noise and the thin evidence pass without acting; acted stays once.
    with time_machine.travel(pinned_at + timedelta(seconds=BAKE_S + 1), tick=False):
        weighing.check_guards()
    assert guard("g-noise").state == "passed" and "without cause to act" in guard("g-noise").state_reason
    assert guard("g-few").state == "passed"
    assert guard("g-degrade").state == "acted"
    assert Selection.history.filter(updated_by="system:guard").count() == 1
