"""``python -m chainclient.fault_serve``: fault providers driven by JSON lines from another
process (the TypeScript client's conformance table drives them so), read back here with
``http.client`` only."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from chainclient.fault_provider import DEFAULT_PARAMS, OPENAI_PATH, SCENARIOS

# Every test drives the command-line server in a process of its own.
pytestmark = pytest.mark.system

SDK = Path(__file__).resolve().parents[1]


class Driver:
    """The command-line server, one JSON line per command."""

    def __init__(self, *names: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(SDK)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chainclient.fault_serve", *names],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.hello = self.read()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the server ended without answering"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.read()


@pytest.fixture
def driver() -> Iterator[Driver]:
    served = Driver("vendor", "backup")
    try:
        yield served
    finally:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait(10)


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=5)
    try:
        connection.request("POST", OPENAI_PATH, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_it_says_where_each_provider_listens_and_every_scenario(driver: Driver) -> None:
    providers = driver.hello["providers"]
    assert sorted(providers) == ["backup", "vendor"]
    assert providers["vendor"]["openai_base_url"] == providers["vendor"]["url"] + "/v1"
    assert providers["vendor"]["url"] != providers["backup"]["url"]
    assert driver.hello["scenarios"] == list(SCENARIOS)
    assert driver.hello["default_params"] == dict(DEFAULT_PARAMS)


def test_a_scenario_set_by_command_answers_the_next_request(driver: Driver) -> None:
    assert driver.ask(op="set", provider="vendor", scenario="rate_limited", params={"retry_after": 7}) == {"ok": True}
    status, headers, _ = post(driver.hello["providers"]["vendor"]["url"], {"model": "m", "messages": []})
    assert (status, headers["retry-after"]) == (429, "7")
    status, _, _ = post(driver.hello["providers"]["backup"]["url"], {"model": "m", "messages": []})
    assert status == 200


def test_a_sequence_answers_in_order_and_the_requests_are_read_back(driver: Driver) -> None:
    url = driver.hello["providers"]["vendor"]["url"]
    assert driver.ask(op="sequence", provider="vendor", plans=["server_error", ["ok", {"chunks": 2}]]) == {"ok": True}
    statuses = [post(url, {"model": f"m{n}", "messages": []})[0] for n in range(3)]
    assert statuses == [500, 200, 200]
    seen = driver.ask(op="requests", provider="vendor")
    assert [r["body"]["model"] for r in seen["requests"]] == ["m0", "m1", "m2"]
    assert seen["requests"][0]["path"] == OPENAI_PATH and seen["connections"] == 3
    assert driver.ask(op="clear", provider="vendor") == {"ok": True}
    assert driver.ask(op="requests", provider="vendor")["requests"] == []


def test_a_bad_command_is_answered_with_its_error_and_changes_nothing(driver: Driver) -> None:
    assert driver.ask(op="set", provider="vendor", scenario="no_such_scenario")["error"].startswith("ValueError")
    assert driver.ask(op="set", provider="nobody", scenario="ok")["error"].startswith("KeyError")
    assert driver.ask(op="sequence", provider="vendor", plans=["connection_refused"])["error"].startswith("ValueError")
    assert "unknown op" in driver.ask(op="explode", provider="vendor")["error"]
    status, _, _ = post(driver.hello["providers"]["vendor"]["url"], {"model": "m", "messages": []})
    assert status == 200


def test_close_answers_then_ends_the_process(driver: Driver) -> None:
    assert driver.ask(op="close") == {"closed": True}
    assert driver.process.wait(10) == 0


def test_the_end_of_its_input_ends_it_too(driver: Driver) -> None:
    assert driver.process.stdin is not None
    driver.process.stdin.close()
    assert driver.process.wait(10) == 0
