"""The deployment files as an operator's tools read them: docker-compose.yml with compose's
variable interpolation, .env files, and Django's deploy checks run in a process of their own
with a given environment (tests/test_deployment.py, tests/test_production_settings.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

ROOT = Path(settings.BASE_DIR)


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# --- compose's variables: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, $$ ---------

VARIABLE = re.compile(r"\$(?:\$|\{(\w+)(?:(:?[-?])([^}]*))?\}|(\w+))")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """``value`` (a compose file or any part of it) with every string interpolated as compose
    does it from ``env`` (what .env holds); raises ValueError for a required variable unset."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.group(1) or match.group(4), match.group(2), match.group(3)
        given = env.get(name)
        missing = given is None if operator in ("-", "?") else not given
        if operator and missing:
            if operator.endswith("?"):
                raise ValueError(f"{name}: {argument}")
            return argument
        return given or ""

    return VARIABLE.sub(one, value)


def compose_variables() -> dict[str, str | None]:
    """Every variable compose reads, with its default (None: required or no default)."""
    found: dict[str, str | None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            for match in VARIABLE.finditer(value):
                if match.group(0) != "$$":
                    has_default = (match.group(2) or "").endswith("-")
                    found[match.group(1) or match.group(4)] = match.group(3) if has_default else None

    walk(compose())
    return found


def read_env_file(path: Path) -> dict[str, str]:
    """NAME=value lines, as compose reads .env (comments and blank lines skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def deploy_check(tmp_path: Path, environment: dict[str, str], **overrides: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check --deploy --fail-level WARNING`` in a process of its own with only
    ``environment`` (and ``overrides``): no local key under VAR_DIR to fall back on."""
    bytecode = {key: os.environ[key] for key in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE") if key in os.environ}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **bytecode, **environment}
    env.update({"VAR_DIR": str(tmp_path), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"), **overrides})
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
