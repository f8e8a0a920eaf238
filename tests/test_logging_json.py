"""LOG_FORMAT=json: every log line is one JSON object; a bad LOG_FORMAT stops the start."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from django.conf import settings

from controlplane.logging_json import JsonFormatter


def test_a_record_is_one_json_line_with_time_level_logger_message_and_exception() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging.getLogger("presets.services").makeRecord(
            "presets.services", logging.ERROR, __file__, 1, "chain %s: %s", ("chat", "failed"), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "presets.services"
    assert entry["message"] == "chain chat: failed"
    assert entry["time"].endswith("Z") and entry["time"][:4].isdigit()
    assert "ValueError: boom\nsecond line" in entry["exception"]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "LOG_FORMAT"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.system
def test_the_process_logs_json_when_asked_and_plain_by_default() -> None:
    code = "import logging; logging.getLogger('presets').warning('pin %s expired', 'chat')"
    result = manage("shell", "-c", code, LOG_FORMAT="json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert {"level": "WARNING", "logger": "presets", "message": "pin chat expired"}.items() <= lines[-1].items()
    plain = manage("shell", "-c", code)
    assert plain.stderr.splitlines()[-1].endswith("WARNING presets pin chat expired")


@pytest.mark.system
def test_a_bad_log_format_fails_at_start() -> None:
    result = manage("check", LOG_FORMAT="xml")
    assert result.returncode != 0
    assert "LOG_FORMAT='xml' must be plain or json" in result.stderr
