"""Environments: staging and production in one control plane. A token reads (and reports for)
its own environment only, and its chains only when bound to some, on every read path: the
API, the read front's plain reads and long polls, OFREP, usage reports and published copies
(relays: tests/test_environments_system.py). A change in one environment never reaches the
other's document or version."""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from chainclient import ChainClient, Provider, Registry, Step
from presets import environments, publishing, services, signing
from presets.exceptions import NotFound
from presets.models import Selection, ServiceToken
from presets.presets_file import PresetsFileError, load_presets_file, parse_presets
from presets.providers import get_registry
from presets.registry import PROVIDERS
from read_path.front import ReadFront
from tests.test_read_front import auth, call, run

pytestmark = pytest.mark.django_db(transaction=True)

STAGING, PRODUCTION = "staging", "production"
REGISTRY = Registry({name: Provider(destination=p.destination, models=dict(p.models)) for name, p in PROVIDERS.items()})
DEFAULT = [Step("vendor_a", "large", 20000)]


def make_token(name: str, *, environment: str, purpose: str = "read", chains: list[str] | None = None) -> str:
    token = ServiceToken(name=name, purpose=purpose, environment=environment, chains=chains or [])
    raw = token.issue()
    token.save()
    return raw


@pytest.fixture
def two(settings: Any, example_file: Path) -> dict[str, str]:
    """Staging and production, each with the example presets synced (its own chains at v1), and
    tokens: a read token of each, a write token of staging, a staging token bound to chat."""
    settings.ENVIRONMENTS = [STAGING, PRODUCTION]
    presets_file = load_presets_file(example_file, registry=get_registry())
    for environment in (STAGING, PRODUCTION):
        services.apply_presets(presets_file=presets_file, environment=environment)
    return {
        "staging": make_token("staging-reader", environment=STAGING),
        "production": make_token("production-reader", environment=PRODUCTION),
        "staging-writer": make_token("staging-writer", environment=STAGING, purpose="write"),
        "chat-only": make_token("chat-only", environment=STAGING, chains=["chat"]),
    }


def api(token: str) -> Client:
    return Client(headers=auth(token))


def live(environment: str, chain: str = "chat") -> Selection:
    return services.revert_expired_and_read(chain=chain, environment=environment)


def test_a_pin_in_staging_never_changes_productions_document_or_version(two: dict[str, str]) -> None:
    before = api(two["production"]).get("/api/v1/chains/chat").json()
    pinned = api(two["staging-writer"]).post(
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "staging test"},
        content_type="application/json",
    )
    assert pinned.status_code == 200, pinned.content
    assert (pinned.json()["environment"], pinned.json()["preset"], pinned.json()["version"]) == (
        STAGING,
        "pin_secondary",
        2,
    )
    after = api(two["production"]).get("/api/v1/chains/chat").json()
    assert after == before and after["environment"] == PRODUCTION and after["preset"] == "normal"
    assert live(PRODUCTION).version == 1
    # A person's pin of production on its page's URL does not touch staging either.
    services.select_preset(chain="chat", environment=PRODUCTION, preset="local_only", actor="alice", reason="prod test")
    assert (live(STAGING).preset.name, live(STAGING).version) == ("pin_secondary", 2)
    # Their histories are their own.
    staging = api(two["staging"]).get("/api/v1/chains/chat/history").json()["entries"]
    production = api(two["production"]).get("/api/v1/chains/chat/history").json()["entries"]
    assert [e["version"] for e in staging] == [2, 1] and {e["environment"] for e in staging} == {STAGING}
    assert [e["version"] for e in production] == [2, 1] and production[0]["preset"] == "local_only"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/env/production/api/v1/chains/chat"),
        ("get", "/env/production/api/v1/chains"),
        ("get", "/env/production/api/v1/chains/chat/history"),
        ("get", "/env/production/api/v1/chains/chat/presets"),
        ("get", "/env/production/api/v1/fleet"),
        ("post", "/env/production/ofrep/v1/evaluate/flags/chat"),
        ("post", "/env/production/ofrep/v1/evaluate/flags"),
    ],
)
def test_a_staging_token_reading_production_through_the_api_is_refused(
    two: dict[str, str], method: str, path: str
) -> None:
    response = getattr(api(two["staging"]), method)(
        path, {} if method == "post" else None, content_type="application/json"
    )
    assert response.status_code == 403, response.content
    body = response.json()
    message = body["error"]["message"] if "error" in body else body["errorDetails"]
    assert "staging environment, not production" in message
    assert "--environment production" in message  # how to get the right token


def test_a_staging_token_cannot_change_or_report_for_production(two: dict[str, str]) -> None:
    writer = api(two["staging-writer"])
    select = writer.post(
        "/env/production/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "wrong env"},
        content_type="application/json",
    )
    assert select.status_code == 403 and "not production" in select.json()["error"]["message"]
    report = api(two["staging"]).post(
        "/env/production/api/v1/chains/chat/usage",
        {"client": "checkout/pod-1", "window_s": 60, "outcomes": {}},
        content_type="application/json",
        headers={"X-Chain-Client": "checkout/pod-1"},
    )
    assert report.status_code == 403 and "not production" in report.json()["error"]["message"]
    assert live(PRODUCTION).version == 1


def test_a_chain_bound_token_reads_and_reports_only_its_chains(two: dict[str, str]) -> None:
    bound = api(two["chat-only"])
    assert bound.get("/api/v1/chains/chat").json()["environment"] == STAGING
    refused = bound.get("/api/v1/chains/incident-summary")
    assert refused.status_code == 403
    assert "reads only chat in staging, not incident-summary" in refused.json()["error"]["message"]
    assert [c["name"] for c in bound.get("/api/v1/chains").json()["chains"]] == ["chat"]
    flags = bound.post("/ofrep/v1/evaluate/flags", {}, content_type="application/json").json()["flags"]
    assert [flag["key"] for flag in flags] == ["chat"]
    assert (
        bound.post("/ofrep/v1/evaluate/flags/incident-summary", {}, content_type="application/json").status_code == 403
    )
    report = bound.post(
        "/api/v1/chains/incident-summary/usage",
        {"client": "checkout/pod-1", "window_s": 60, "outcomes": {}},
        content_type="application/json",
    )
    assert report.status_code == 403


def test_the_read_front_refuses_another_environment_and_unbound_chains(two: dict[str, str]) -> None:
    async def body(app: ReadFront) -> dict[str, Any]:
        found: dict[str, Any] = {}
        # Twice each: the first read takes the full path, the next a plain read.
        for turn in (1, 2):
            found[f"staging-{turn}"] = await call(app, "/api/v1/chains/chat", auth(two["staging"]))
            found[f"production-{turn}"] = await call(app, "/api/v1/chains/chat", auth(two["production"]))
            found[f"bound-other-{turn}"] = await call(app, "/api/v1/chains/incident-summary", auth(two["chat-only"]))
        found["prefixed"] = await call(app, "/env/production/api/v1/chains/chat", auth(two["staging"]))
        found["prefixed-poll"] = await call(
            app, "/env/production/api/v1/chains/chat", auth(two["staging"], **{"If-None-Match": '"1"'}), query="wait=5"
        )
        found["own-prefixed"] = await call(app, "/env/staging/api/v1/chains/chat", auth(two["staging"]))
        found["unknown-env"] = await call(app, "/env/qa/api/v1/chains/chat", auth(two["staging"]))
        found["bound-list"] = await call(app, "/api/v1/chains", auth(two["chat-only"]))
        return found

    found = run(body)
    for turn in (1, 2):
        assert json.loads(found[f"staging-{turn}"][2])["environment"] == STAGING
        assert json.loads(found[f"production-{turn}"][2])["environment"] == PRODUCTION
        status, _, content = found[f"bound-other-{turn}"]
        assert status == 403 and "reads only chat" in json.loads(content)["error"]["message"]
    for key in ("prefixed", "prefixed-poll"):
        status, _, content = found[key]
        assert status == 403 and "staging environment, not production" in json.loads(content)["error"]["message"]
    assert json.loads(found["own-prefixed"][2])["environment"] == STAGING
    # As Django answers such a path (test_an_unknown_environment_in_a_path_is_a_404...).
    status, _, content = found["unknown-env"]
    assert status == 404
    assert "unknown environment 'qa': this control plane has staging, production" in content.decode()
    assert [c["name"] for c in json.loads(found["bound-list"][2])["chains"]] == ["chat"]


def test_a_change_in_staging_answers_stagings_long_polls_and_not_productions(two: dict[str, str]) -> None:
    async def body(app: ReadFront) -> tuple[Any, Any]:
        await call(app, "/api/v1/chains/chat", auth(two["staging"]))  # the snapshot loaded
        held = {"If-None-Match": '"1"'}
        staging = asyncio.ensure_future(call(app, "/api/v1/chains/chat", auth(two["staging"], **held), query="wait=3"))
        production = asyncio.ensure_future(
            call(app, "/api/v1/chains/chat", auth(two["production"], **held), query="wait=3")
        )
        await asyncio.sleep(0.3)
        changed = await asyncio.to_thread(
            functools.partial(
                services.select_preset,
                chain="chat",
                environment=STAGING,
                preset="pin_secondary",
                actor="alice",
                reason="staging change",
                expires_at=timedelta(minutes=30),
            )
        )
        await app.snapshot.reload(environments.label(STAGING, "chat"))  # as the NOTIFY or the version check would
        assert changed.version == 2
        return await staging, await production

    staging, production = run(body)
    assert staging[0] == 200 and json.loads(staging[2])["version"] == 2
    assert production[0] == 304  # its wait ran out: nothing changed in production


def test_an_unknown_environment_in_a_path_is_a_404_that_names_the_environments(two: dict[str, str]) -> None:
    response = api(two["staging"]).get("/env/qa/api/v1/chains/chat")
    assert response.status_code == 404
    assert "unknown environment 'qa'" in response.json()["error"]["message"]
    assert "staging, production" in response.json()["error"]["message"]


def test_a_chain_only_another_environment_has_is_named_in_the_404(two: dict[str, str], example_file: Path) -> None:
    example = json.loads(example_file.read_text())
    example["chains"]["only-staging"] = example["chains"]["incident-summary"]
    text = json.dumps(example)
    services.apply_presets(presets_file=parse_presets(text, registry=get_registry()), environment=STAGING)
    with pytest.raises(NotFound, match="production has no chain 'only-staging' \\(staging has it"):
        services.revert_expired_and_read(chain="only-staging", environment=PRODUCTION)


def test_create_token_binds_an_environment_and_chains_and_refuses_unknown_ones(two: dict[str, str]) -> None:
    call_command("create_token", "svc-staging", "--environment", "staging", "--chains", "chat")
    token = ServiceToken.objects.get(name="svc-staging")
    assert (token.environment, token.chains) == (STAGING, ["chat"])
    with pytest.raises(CommandError, match="--environment: .*one of staging, production|unknown environment 'qa'"):
        call_command("create_token", "svc-qa", "--environment", "qa")
    with pytest.raises(CommandError, match="--chains: no chain named nope in any environment"):
        call_command("create_token", "svc-nope", "--chains", "chat,nope")
    assert not ServiceToken.objects.filter(name__in=["svc-qa", "svc-nope"]).exists()


# --- published copies --------------------------------------------------------------------------


@pytest.fixture
def published(two: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """Every chain of both environments published to a directory a real HTTP server serves."""
    signing.create_key(actor="test", activate=True)
    signing.forget_signer()
    root = tmp_path / "site"
    root.mkdir()
    target = publishing.DirectoryTarget(root)
    report = publishing.publish_chains(to=[target])
    assert not report.failed
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_each_environment_is_published_under_its_own_path(published: str, tmp_path: Path) -> None:
    production = json.loads((tmp_path / "site" / "api/v1/chains/chat").read_bytes())
    staging = json.loads((tmp_path / "site" / "env/staging/api/v1/chains/chat").read_bytes())
    assert (production["environment"], staging["environment"]) == (PRODUCTION, STAGING)


def test_a_service_of_staging_refuses_productions_published_copy(published: str) -> None:
    """A published copy is read without a token: a service that names its environment applies
    only that environment's documents (signed: a host cannot relabel one)."""
    trusted = {key.key_id: key.public_key for key in signing.trusted_keys()}
    options: dict[str, Any] = {
        "published": True,
        "registry": REGISTRY,
        "default": DEFAULT,
        "environment": STAGING,
        "trusted_keys": trusted,
    }
    wrong = ChainClient(published, chain="chat", **options)
    wrong.poll_once()
    assert wrong.current().version == 0  # nothing applied: the compiled-in default
    assert wrong.health()["rejected"] >= 1
    right = ChainClient(published + "/env/staging", chain="chat", **options)
    right.poll_once()
    assert (right.current().version, right.health()["rejected"]) == (1, 0)


def test_a_presets_file_may_give_an_environment_a_default_of_its_own(settings: Any, example_file: Path) -> None:
    settings.ENVIRONMENTS = [STAGING, PRODUCTION]
    example = json.loads(example_file.read_text())
    example["chains"]["chat"]["defaults"] = {"staging": "drop_vendor_b"}
    presets_file = parse_presets(json.dumps(example), registry=get_registry())
    for environment in (STAGING, PRODUCTION):
        services.apply_presets(presets_file=presets_file, environment=environment)
    assert (live(STAGING).preset.name, live(STAGING).is_default) == ("drop_vendor_b", True)
    assert (live(PRODUCTION).preset.name, live(PRODUCTION).is_default) == ("normal", True)
    for defaults, says in (
        ({"staging": "nope"}, "$.chains.chat.defaults.staging: default preset 'nope' is not defined in this chain"),
        ({"Prod!": "normal"}, "$.chains.chat.defaults: 'Prod!' does not match"),
    ):
        example["chains"]["chat"]["defaults"] = defaults
        with pytest.raises(PresetsFileError) as refused:
            parse_presets(json.dumps(example), registry=get_registry())
        assert says in str(refused.value)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ([], "ENVIRONMENTS is empty: name at least one"),
        (["Staging", "production"], "'Staging' is not an environment name: use lower-case letters"),
        (["staging", "staging"], "ENVIRONMENTS names staging more than once"),
        (["a" * 31], "at most 30 characters"),
    ],
)
def test_a_wrong_environments_setting_says_what_is_wrong(raw: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        environments.configured(raw)
    assert environments.configured(["staging", "production"]) == ["staging", "production"]
