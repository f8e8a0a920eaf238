"""The deployment files: docker-compose.yml is valid against the compose spec and runs the
processes the suite tests without containers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
CHECK = [str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec"]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_docker_compose_is_valid_against_the_compose_spec() -> None:
    result = subprocess.run(CHECK + [str(ROOT / "docker-compose.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = compose()
    broken["services"]["web"]["depends_on"]["postgres"]["condition"] = "whenever"
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    assert subprocess.run(CHECK + [str(path)], capture_output=True).returncode != 0


def test_every_process_is_there_with_a_health_check() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", "release", "web", "worker", "beat"}
    for name in ("postgres", "redis", "web", "worker", "beat"):
        assert "healthcheck" in services[name], name
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["release"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize(
    "service,expected",
    [
        ("web", ["granian", "--interface", "asgi", "controlplane.asgi:application"]),
        ("worker", ["celery", "-A", "controlplane", "worker"]),
        ("beat", ["celery", "-A", "controlplane", "beat"]),
    ],
)
def test_the_containers_run_the_processes_the_suite_tests(service, expected) -> None:
    command = compose()["services"][service]["command"]
    for part in expected:
        assert part in command
    makefile = (ROOT / "Makefile").read_text()
    if service == "web":
        assert "granian --interface asgi" in makefile and "controlplane.asgi:application" in makefile


def test_the_compose_file_requires_a_secret_key() -> None:
    environment = compose()["services"]["web"]["environment"]
    assert environment["SECRET_KEY"].startswith("${SECRET_KEY:?")


def test_the_web_health_check_asks_with_an_allowed_host(client) -> None:
    # Django answers 400 to a Host outside ALLOWED_HOSTS, so probing 127.0.0.1 would fail.
    probe = " ".join(compose()["services"]["web"]["healthcheck"]["test"])
    assert "/readyz" in probe and "ALLOWED_HOSTS" in probe
