"""The production environments pass Django's deploy checks at WARNING level, in a process of
their own, with no local key to fall back on and no "AXES: BEGIN" banner: the one
docs/security.md documents ("Production settings"), and docker-compose.yml's with its
documented HTTPS switch."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
from django.conf import settings

from tests.deployment_files import compose, deploy_check, interpolate, read_env_file

SECURITY_PAGE = Path(settings.BASE_DIR) / "docs" / "security.md"


def documented_environment() -> dict[str, str]:
    """NAME=value lines of the documented production block, with a freshly generated SECRET_KEY."""
    block = re.search(r"```sh\n# production environment[^\n]*\n(.*?)```", SECURITY_PAGE.read_text(), re.DOTALL)
    assert block, "docs/security.md has no production environment block"
    environment = dict(line.split("=", 1) for line in block.group(1).splitlines() if "=" in line)
    assert environment["SECRET_KEY"].startswith("<")  # a placeholder: the reader makes one
    environment["SECRET_KEY"] = secrets.token_urlsafe(50)
    return environment


@pytest.mark.system
def test_the_documented_production_environment_passes_the_deploy_checks(tmp_path: Path) -> None:
    environment = documented_environment()
    assert environment["HTTPS"] == "true" and environment["ALLOWED_HOSTS"]
    done = deploy_check(tmp_path, environment)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout
    assert "AXES" not in done.stdout + done.stderr
    assert not (tmp_path / "secret_key").exists()  # the key came from SECRET_KEY


@pytest.mark.system
def test_the_same_environment_on_plain_http_fails_them(tmp_path: Path) -> None:
    done = deploy_check(tmp_path, documented_environment(), HTTPS="false")
    assert done.returncode != 0
    assert "security.W008" in done.stdout + done.stderr  # SECURE_SSL_REDIRECT


def compose_environment() -> dict[str, str]:
    """The web service's environment as compose gives it from .env.example, with the values an
    operator must set: a strong SECRET_KEY and the public host name."""
    env = read_env_file(Path(settings.BASE_DIR) / ".env.example")
    env |= {"SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "chains.example.com"}
    return {name: str(value) for name, value in interpolate(compose()["services"]["web"]["environment"], env).items()}


@pytest.mark.system
def test_compose_behind_its_tls_proxy_passes_the_deploy_checks(tmp_path: Path) -> None:
    # Compose serves plain http until the operator puts it behind TLS (a first run on
    # localhost); production is the documented switch: HTTPS=true behind the proxy.
    environment = compose_environment()
    assert environment["HTTPS"] == "false"
    done = deploy_check(tmp_path, environment, HTTPS="true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
