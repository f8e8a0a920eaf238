"""Migration 0017 on a database with history, tokens and pins from before environments: every
chain, version and token lands in the default environment, nothing is lost, and the URLs and
tokens services already use keep working."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from presets import services
from presets.models import Chain, Selection, ServiceToken
from tests.conftest import make_token
from tests.test_read_front import auth, call, run
from tests.test_signing_keys_sealed import executor  # noqa: F401 - the fixture: migrations back and forth

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

BEFORE = [("presets", "0016_pin_spend_bound"), ("audit", "0014_spend_alerts")]


@pytest.mark.system
def test_migration_0017_keeps_history_tokens_pins_and_urls(executor: MigrationExecutor) -> None:  # noqa: F811
    """Why a system test: it migrates the test database's schema back and forth (seconds)."""
    token = make_token("checkout", "read")
    services.select_preset(
        chain="chat", preset="pin_secondary", actor="alice", reason="INC-7", expires_at=timedelta(hours=2)
    )
    services.select_preset(chain="incident-summary", preset="local_only", actor="bob", reason="INC-8")
    services.revert_to_default(chain="incident-summary", actor="bob", reason="check")
    services.select_preset(chain="incident-summary", preset="local_only", actor="bob", reason="INC-9")
    history = list(Selection.history.order_by("history_id").values_list("history_id", "chain_id", "version", "action"))
    live = {s.chain.name: (s.version, s.preset.name, s.expires_at) for s in Selection.objects.select_related("chain")}
    tokens = list(ServiceToken.objects.order_by("pk").values_list("pk", "name", "token_hash"))

    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    assert "environment" not in {f.name for f in old.get_model("presets", "Chain")._meta.fields}
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert set(Chain.objects.values_list("environment", flat=True)) == {"production"}
    assert set(Chain.history.values_list("environment", flat=True)) == {"production"}
    assert (
        list(Selection.history.order_by("history_id").values_list("history_id", "chain_id", "version", "action"))
        == history
    )
    assert {
        s.chain.name: (s.version, s.preset.name, s.expires_at) for s in Selection.objects.select_related("chain")
    } == live
    assert list(ServiceToken.objects.order_by("pk").values_list("pk", "name", "token_hash")) == tokens
    assert set(ServiceToken.objects.values_list("environment", flat=True)) == {"production"}
    assert set(map(tuple, ServiceToken.objects.values_list("chains", flat=True))) == {()}

    # The token services already hold reads the URLs they already use, on both paths.
    read = Client(headers=auth(token)).get("/api/v1/chains/chat")
    assert read.status_code == 200 and read.json()["preset"] == "pin_secondary" and read.json()["version"] == 2
    assert read.json()["environment"] == "production"
    assert Client(headers=auth(token)).get("/api/v1/chains/chat/history").json()["entries"][0]["version"] == 2

    async def body(app):  # type: ignore[no-untyped-def]
        return await call(app, "/api/v1/chains/incident-summary", auth(token))

    status, _, content = run(body)
    assert status == 200 and json.loads(content)["preset"] == "local_only"
