"""The OpenFeature Remote Evaluation Protocol (docs/ofrep.md): a chain is a flag
whose value is its signed document; bulk evaluation answers 304 while nothing changed; errors
in OFREP's shape; the same service tokens (Bearer or X-API-Key). And OpenFeature's own Python
SDK with its OFREP provider reading a chain from a running control plane, seeing a change."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from presets import services
from tests.conftest import needs

FLAGS = "/ofrep/v1/evaluate/flags"


def evaluate(client: Client, path: str, body: Any = None, **headers: str) -> Any:
    data = json.dumps({"context": {"targetingKey": "checkout-7"}} if body is None else body)
    return client.post(path, data, content_type="application/json", headers=headers)


def test_a_chain_is_a_flag_whose_value_is_its_document(synced, reader: Client, read_token: str) -> None:
    answer = evaluate(reader, f"{FLAGS}/chat")
    assert answer.status_code == 200
    body = answer.json()
    document = reader.get("/api/v1/chains/chat").json()
    assert body == {
        "key": "chat",
        "reason": "STATIC",
        "variant": "1",
        "value": document,
        "metadata": {"version": 1, "epoch": 0, "preset": "normal", "pinned": False},
    }
    assert answer["ETag"] == '"1"'
    # X-API-Key works as well as Bearer; an empty body is an evaluation without context.
    by_key = Client().post(f"{FLAGS}/chat", "", content_type="application/json", headers={"X-API-Key": read_token})
    assert by_key.status_code == 200 and by_key.json()["value"] == document
    services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
    pinned = evaluate(reader, f"{FLAGS}/chat").json()
    assert (pinned["variant"], pinned["metadata"]["pinned"], pinned["value"]["preset"]) == ("2", True, "pin_secondary")


def test_bulk_evaluation_answers_304_while_no_chain_changed(synced, reader: Client) -> None:
    first = evaluate(reader, FLAGS)
    assert first.status_code == 200
    assert [flag["key"] for flag in first.json()["flags"]] == ["chat", "incident-summary"]
    tag = first["ETag"]
    again = reader.post(FLAGS, "{}", content_type="application/json", headers={"If-None-Match": tag})
    assert (again.status_code, again["ETag"], again.content) == (304, tag, b"")
    services.select_preset(chain="incident-summary", preset=_other_preset("incident-summary"), actor="a", reason="x")
    changed = reader.post(FLAGS, "{}", content_type="application/json", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed["ETag"] != tag
    assert {flag["key"]: flag["variant"] for flag in changed.json()["flags"]} == {"chat": "1", "incident-summary": "2"}


def _other_preset(chain: str) -> str:
    from presets.models import Preset, Selection

    live = Selection.objects.get(chain__name=chain)
    return Preset.objects.filter(chain=live.chain, retired_at__isnull=True).exclude(pk=live.preset_id).first().name


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        (f"{FLAGS}/nope", {"context": {}}, 404, "FLAG_NOT_FOUND"),
        (f"{FLAGS}/chat", "not json", 400, "PARSE_ERROR"),
        (f"{FLAGS}/chat", [1], 400, "PARSE_ERROR"),
        (f"{FLAGS}/chat", {"context": "x"}, 400, "INVALID_CONTEXT"),
        (FLAGS, {"context": [1]}, 400, "INVALID_CONTEXT"),
    ],
)
def test_errors_are_in_ofrep_s_shape(synced, reader: Client, path: str, body: Any, status: int, code: str) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    answer = reader.post(path, raw, content_type="application/json")
    assert answer.status_code == status
    error = answer.json()
    assert error["errorCode"] == code and error["errorDetails"]
    if path != FLAGS:
        assert error["key"] == path.rsplit("/", 1)[1]


def test_a_missing_or_refused_token_is_a_401_and_a_session_is_no_credential(synced, oncall: Client) -> None:
    for client in (Client(), Client(headers={"Authorization": "Bearer cpt_not_a_token"}), oncall):
        answer = evaluate(client, f"{FLAGS}/chat")
        assert answer.status_code == 401
        assert set(answer.json()) == {"errorDetails"}
    refused = Client().post(f"{FLAGS}/chat", "{}", content_type="application/json", headers={"X-API-Key": "nope"})
    assert refused.status_code == 401


def test_the_openapi_schema_documents_ofrep(client: Client) -> None:
    schema = client.get("/api/schema/", headers={"Accept": "application/json"}).json()
    assert {"/ofrep/v1/evaluate/flags", "/ofrep/v1/evaluate/flags/{key}"} <= set(schema["paths"])
    assert schema["paths"]["/ofrep/v1/evaluate/flags/{key}"]["post"]["operationId"] == "ofrep_evaluate_flag"


def test_openfeature_s_python_sdk_reads_a_chain_over_ofrep_and_sees_a_change(synced, live_server: Any, read_token: str):
    from openfeature import api
    from openfeature.contrib.provider.ofrep import OFREPProvider
    from openfeature.evaluation_context import EvaluationContext
    from openfeature.exception import ErrorCode

    api.set_provider(OFREPProvider(live_server.url, headers_factory=lambda: {"Authorization": f"Bearer {read_token}"}))
    try:
        client = api.get_client()
        context = EvaluationContext(targeting_key="checkout-7")
        details = client.get_object_details("chat", {}, context)
        assert (details.variant, details.reason, details.value["preset"]) == ("1", "STATIC", "normal")
        assert details.flag_metadata == {"version": 1, "epoch": 0, "preset": "normal", "pinned": False}
        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        changed = client.get_object_details("chat", {}, context)
        assert (changed.variant, changed.value["preset"], changed.value["version"]) == ("2", "pin_secondary", 2)
        missing = client.get_object_details("nope", {"fallback": True}, context)
        assert (missing.value, missing.error_code) == ({"fallback": True}, ErrorCode.FLAG_NOT_FOUND)
    finally:
        api.clear_providers()


JS = Path(__file__).parent / "ofrep_js"


@pytest.fixture(scope="module")
def node_packages() -> Path:
    """tests/ofrep_js with its locked packages installed (npm ci, once): OpenFeature's own
    JavaScript SDKs and OFREP providers, from the npm registry."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        needs("the JavaScript OFREP check needs Node.js 20+ and npm (Debian's nodejs and npm)")
    installed = JS / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < (JS / "package-lock.json").stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return JS


def test_openfeature_s_javascript_sdks_read_a_chain_see_a_change_and_get_304s_meanwhile(
    synced, live_server: Any, read_token: str, node_packages: Path
) -> None:
    process = subprocess.Popen(
        ["node", "read_chain.mjs", live_server.url, read_token],
        cwd=node_packages,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None

        def line() -> dict[str, Any]:
            text = process.stdout.readline()  # type: ignore[union-attr]
            assert text, process.stderr.read() if process.poll() is not None else "no answer"  # type: ignore[union-attr]
            return json.loads(text)

        first = line()
        assert first["server"] == {"variant": "1", "reason": "STATIC", "preset": "normal", "errorCode": None}
        assert first["missing"]["errorCode"] == "FLAG_NOT_FOUND"
        assert first["web"] == {"variant": "1", "preset": "normal"}
        statuses = line()["statuses"]
        assert statuses[0] == 200 and statuses.count(304) >= 2, statuses  # polled, nothing changed
        assert set(statuses[1:]) == {304}

        services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason="INC-7")
        process.stdin.write("changed\n")
        process.stdin.flush()
        after = line()
        assert after["server"] == {"variant": "2", "reason": "STATIC", "preset": "pin_secondary", "errorCode": None}
        assert after["web"] == {"variant": "2", "preset": "pin_secondary"}
        assert 200 in after["statuses"][len(statuses) :]  # the change came as a 200 among the 304s
        process.stdin.write("quit\n")
        process.stdin.flush()
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
