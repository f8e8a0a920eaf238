"""Environments through the real processes: a control plane with staging and production, and a
production relay in front of it. The relay serves production's documents to production's
tokens and refuses a staging token, and a token bound to other chains, in the control plane's
words; a real SDK client behind the relay follows production while staging changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainclient import ChainClient
from tests.servers import RelayProcess, Stack, request, running_stack, token_in, wait_for
from tests.test_relay import get
from tests.test_sdk_integration import DEFAULT, REGISTRY

pytestmark = [pytest.mark.system]

# Run once in the stack: production gets the presets too (a sync reaches staging first), and a
# token of staging and one of production bound to chat are made; each printed after a marker.
SET_UP = """
from django.core.management import call_command
from presets import services
from presets.presets_file import load_presets_file
from presets.providers import get_registry
from django.conf import settings
services.apply_presets(
    presets_file=load_presets_file(settings.PRESETS_FILE, registry=get_registry()), environment="production"
)
print("TOKEN")
call_command("create_token", "staging-svc", "--environment", "staging")
print("TOKEN")
call_command("create_token", "staging-ci", "--environment", "staging", "--scope", "write")
print("TOKEN")
call_command("create_token", "chat-only", "--chains", "chat")
"""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, RelayProcess, dict[str, str]]]:
    """A control plane of its own (its PostgreSQL, Redis and web process) and a relay: seconds
    to start, so one test checks all that needs them (a module-wide set-up would be started
    again by each test process that gets one of its tests: tests/parallel.py)."""
    root = tmp_path
    with running_stack("envs", env={"ENVIRONMENTS": "staging,production"}) as stack:
        output = stack.manage("shell", "-c", SET_UP)
        staging, writer, bound = (token_in(part) for part in output.split("TOKEN\n")[1:])
        relay = RelayProcess(
            stack.url, stack.relay_token, root / "relay" / "cache", env={"RELAY_TOKEN_CACHE_SECONDS": "1"}
        )
        (root / "relay").mkdir()
        relay.start()
        try:
            yield stack, relay, {"staging": staging, "staging-writer": writer, "chat-only": bound}
        finally:
            relay.stop()


def test_a_production_relay_serves_production_only_and_a_service_behind_it_follows_production(
    stack: tuple[Stack, RelayProcess, dict[str, str]],
) -> None:
    """Why one test: the stack and the relay take ~40 s to start (see the fixture)."""
    control, relay, tokens = stack
    production = get(relay.url, "/api/v1/chains/chat", control.read_token)
    assert production[0] == 200 and json.loads(production[2])["environment"] == "production"
    for path in ("/api/v1/chains/chat", "/api/v1/chains"):
        status, _, body = get(relay.url, path, tokens["staging"])
        assert status == 403, body
        assert "staging environment, not production" in json.loads(body)["error"]["message"]
    # The same staging token reads staging at the control plane itself.
    direct = get(control.url, "/api/v1/chains/chat", tokens["staging"])
    assert direct[0] == 200 and json.loads(direct[2])["environment"] == "staging"

    # A token bound to chat reads chat through the relay, and nothing else (twice: the second
    # is answered from the relay's verdict, as fresh reads are).
    assert get(relay.url, "/api/v1/chains/chat", tokens["chat-only"])[0] == 200
    for _ in range(2):
        status, _, body = get(relay.url, "/api/v1/chains/incident-summary", tokens["chat-only"])
        assert status == 403 and "reads only chat" in json.loads(body)["error"]["message"]

    # A service behind the relay follows production while staging changes.
    service = ChainClient(
        relay.url, chain="chat", token=control.read_token, registry=REGISTRY, default=DEFAULT, long_poll=False
    )
    service.poll_once()
    before = service.current()
    status, _, body = request(
        control,
        "POST",
        "/api/v1/chains/chat/select",
        token=tokens["staging-writer"],
        body={"preset": "pin_secondary", "reason": "staging only"},
    )
    assert status == 200 and json.loads(body)["environment"] == "staging", body
    # Read-your-writes: the web process serves the change once its notification arrives.
    version = json.loads(body)["version"]
    staging = get(control.url, f"/api/v1/chains/chat?min_version={version}", tokens["staging"])
    assert json.loads(staging[2])["preset"] == "pin_secondary"
    assert wait_for(lambda: get(relay.url, "/api/v1/chains/chat", control.read_token)[0] == 200, 5)
    service.poll_once()
    after = service.current()
    assert (after.version, after.preset) == (before.version, before.preset) == (1, "normal")
