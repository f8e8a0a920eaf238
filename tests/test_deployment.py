"""The deployment files: docker-compose.yml is valid against the compose spec, .env.example
names every variable it reads, the Caddyfile is valid, and the stack runs on this machine the
way compose runs it, ending with the first admin signing in over plain http."""

from __future__ import annotations

import http.cookiejar
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import servers
from tests.conftest import needs
from tests.deployment_files import ROOT, compose, compose_variables, interpolate, read_env_file

CHECK = [str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec"]


@pytest.mark.system
def test_docker_compose_is_valid_against_the_compose_spec() -> None:
    result = subprocess.run(CHECK + [str(ROOT / "docker-compose.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.system
def test_the_compose_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = compose()
    broken["services"]["web"]["depends_on"]["postgres"]["condition"] = "whenever"
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    assert subprocess.run(CHECK + [str(path)], capture_output=True).returncode != 0


def test_every_process_is_there_with_a_health_check() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", "release", "web", "worker", "beat", "caddy", "relay"}
    assert services["caddy"]["profiles"] == ["https"]  # only with `--profile https`
    assert services["relay"]["profiles"] == ["relay"]  # only with `--profile relay`
    for name in ("postgres", "redis", "web", "worker", "beat", "relay"):
        assert "healthcheck" in services[name], name
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["release"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize(
    "service,expected",
    [
        ("web", ["granian", "--interface", "asgi", "controlplane.asgi:application"]),
        ("worker", ["celery", "-A", "controlplane", "worker"]),
        ("beat", ["celery", "-A", "controlplane", "beat"]),
        ("relay", ["python", "-m", "relay", "--port", "8100"]),  # as tests/servers.py's RelayProcess
    ],
)
def test_the_containers_run_the_processes_the_suite_tests(service, expected) -> None:
    command = compose()["services"][service]["command"]
    for part in expected:
        assert part in command
    makefile = (ROOT / "Makefile").read_text()
    if service == "web":
        assert "granian --interface asgi" in makefile and "controlplane.asgi:application" in makefile


@pytest.mark.system
def test_granians_allocator_gets_the_measured_settings_everywhere_and_reads_them() -> None:
    """`make serve`, the image (web and relay containers), `python -m relay` and the read
    benchmarks give granian's jemalloc the settings the memory per held poll was measured with
    (bench/README.md, "The fleet as the SDK polls"), and granian's extension reads them: one
    built without jemalloc, or with another prefix, would ignore them silently."""
    from relay.__main__ import MALLOC_CONF

    makefile = (ROOT / "Makefile").read_text()
    assert f"\nWEB_MALLOC_CONF ?= {MALLOC_CONF}\n" in makefile
    assert "\tenv _RJEM_MALLOC_CONF=$(WEB_MALLOC_CONF) $(VENV)/bin/granian " in makefile
    assert f"\nENV _RJEM_MALLOC_CONF={MALLOC_CONF}\n" in (ROOT / "Dockerfile").read_text()
    assert f'\nMALLOC_CONF = "{MALLOC_CONF}"\n' in (ROOT / "bench" / "read_throughput.py").read_text()
    # What jemalloc took, printed at exit (stats_print), in a process that sets it as the relay does.
    script = (
        "import os; from relay.__main__ import use_malloc_conf; use_malloc_conf(); "
        "os.environ['_RJEM_MALLOC_CONF'] += ',stats_print:true'; import granian._granian"
    )
    env = {key: value for key, value in os.environ.items() if key != "_RJEM_MALLOC_CONF"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    taken = dict(re.findall(r"^\s*opt\.(\w+): (\S+)", result.stderr, re.MULTILINE))
    assert {name: taken.get(name) for name in ("dirty_decay_ms", "muzzy_decay_ms")} == {
        "dirty_decay_ms": "0",
        "muzzy_decay_ms": "0",
    }


def test_the_compose_file_requires_a_secret_key() -> None:
    environment = compose()["services"]["web"]["environment"]
    assert environment["SECRET_KEY"].startswith("${SECRET_KEY:?")


def test_the_webhook_address_guard_is_on_in_compose_and_an_operator_can_lift_it_from_env() -> None:
    """WEBHOOK_ALLOW_LINK_LOCAL reaches the web and worker containers: refused by default, and
    an operator's ``.env`` value is what the processes read (not silently dropped)."""
    example = read_env_file(ROOT / ".env.example") | {"SECRET_KEY": "x"}
    for dotenv, expected in ((example, "false"), (example | {"WEBHOOK_ALLOW_LINK_LOCAL": "true"}, "true")):
        services = interpolate(compose(), dotenv)["services"]
        for service in ("web", "worker"):
            assert services[service]["environment"]["WEBHOOK_ALLOW_LINK_LOCAL"] == expected, service


def test_the_web_health_check_asks_with_an_allowed_host(client) -> None:
    # Django answers 400 to a Host outside ALLOWED_HOSTS, so probing 127.0.0.1 would fail.
    probe = " ".join(compose()["services"]["web"]["healthcheck"]["test"])
    assert "/readyz" in probe and "ALLOWED_HOSTS" in probe


def test_env_example_sets_every_variable_compose_reads_to_compose_s_own_default() -> None:
    example = read_env_file(ROOT / ".env.example")
    variables = compose_variables()
    assert {"SECRET_KEY", "PORT", "HTTPS", "ADMIN_PASSWORD", "DB_APP_USER", "DB_OWNER_PASSWORD"} <= set(variables)
    assert sorted(set(variables) - set(example)) == [], "missing from .env.example"
    differing = {name: (example[name], default) for name, default in variables.items() if default is not None}
    assert {name: pair for name, pair in differing.items() if pair[0] != pair[1]} == {}
    # The one value an operator must choose: compose refuses to start without it.
    assert variables["SECRET_KEY"] is None and example["SECRET_KEY"] == ""
    with pytest.raises(ValueError, match="secrets.token_urlsafe"):
        interpolate(compose(), example)


def test_compose_serves_plain_http_until_switched_to_https() -> None:
    environment = interpolate(compose(), read_env_file(ROOT / ".env.example") | {"SECRET_KEY": "x"})
    web = environment["services"]["web"]["environment"]
    assert (web["HTTPS"], web["PUBLIC_BASE_URL"]) == ("false", "http://localhost:8000")
    assert "localhost" in web["ALLOWED_HOSTS"].split(",")


@pytest.mark.system
def test_the_caddyfile_is_valid_with_the_site_address_compose_gives_it(tmp_path: Path) -> None:
    caddy = shutil.which("caddy")
    if caddy is None:
        needs("the Caddyfile check needs caddy (Debian's package)")
    service = interpolate(compose()["services"]["caddy"], read_env_file(ROOT / ".env.example"))
    [mount] = [volume for volume in service["volumes"] if volume.endswith(":/etc/caddy/Caddyfile:ro")]
    caddyfile = ROOT / mount.split(":")[0]
    assert "reverse_proxy web:8000" in caddyfile.read_text()

    def validate(site_address: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SITE_ADDRESS": site_address}
        command = [caddy, "validate", "--config", str(caddyfile), "--adapter", "caddyfile"]
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)

    result = validate(service["environment"]["SITE_ADDRESS"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert validate("").returncode != 0  # the check can fail: no site address, no site


# --- the stack on this machine, as compose runs it ------------------------------------------


@pytest.mark.system
def test_the_stack_runs_here_as_compose_runs_it_and_the_first_admin_signs_in_over_http() -> None:
    """Each service's command and environment from docker-compose.yml with .env.example's
    values, the container host names swapped for a PostgreSQL cluster and a Redis of its own:
    the init script, the release step, web, worker and beat, every health check, and the
    admin the release step printed signing in over plain http."""
    servers.require_tools("the compose stack's system test")
    dotenv = read_env_file(ROOT / ".env.example") | {"SECRET_KEY": secrets.token_urlsafe(50), "WEB_WORKERS": "1"}
    services = interpolate(compose(), dotenv)["services"]
    root = Path(tempfile.mkdtemp(prefix="controlplane-compose-"))
    os.chmod(root, 0o755)  # the postgres user reads its way to its cluster
    for folder in ("pg", "static"):
        (root / folder).mkdir()
    shutil.chown(root / "pg", "postgres", "postgres")
    postgres, redis = servers.Postgres(root / "pg"), servers.Redis(root)
    web_port = servers.free_port()
    # What differs from a container: the hosts and ports, and where the image's paths are.
    swaps = [
        ("@postgres:5432/", f"@127.0.0.1:{postgres.port}/"),
        ("//redis:6379/", f"//127.0.0.1:{redis.port}/"),
        ("127.0.0.1:8000/", f"127.0.0.1:{web_port}/"),
        ("/var/lib/controlplane", str(root / "var")),
        ("/tmp/controlplane-metrics", str(root / "metrics")),
        ("/app/static", str(root / "static")),
        ("/app/", f"{ROOT}/"),
    ]
    arguments = {"0.0.0.0": "127.0.0.1", "8000": str(web_port)}  # web listens on loopback only

    def here(value: str) -> str:
        for container, local in swaps:
            value = value.replace(container, local)
        return value

    def container(name: str, **extra: str) -> dict[str, str]:
        """The service's environment as its container has it: the image's ENV, compose's."""
        image_env = dict(
            item.split("=", 1)
            for line in DOCKERFILE.read_text().splitlines()
            if line.startswith("ENV ")
            for item in shlex.split(line[4:])
        )
        env = {**image_env, **services[name].get("environment", {}), **extra}
        return {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(root),
            "HOSTNAME": socket.gethostname(),
            **{key: here(str(value)) for key, value in env.items()},
        }

    def command(name: str) -> list[str]:
        return [arguments.get(part, here(part)) for part in services[name]["command"]]

    def healthy(name: str, **extra: str) -> bool:
        test = services[name]["healthcheck"]["test"]
        argv = ["sh", "-c", here(test[1])] if test[0] == "CMD-SHELL" else [here(part) for part in test[1:]]
        if argv[0] == "redis-cli":
            argv[1:1] = ["-p", str(redis.port)]
        done = subprocess.run(argv, env=container(name, **extra), cwd=ROOT, capture_output=True, timeout=60)
        return done.returncode == 0

    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> None:
        with open(root / f"{name}.log", "wb") as log:
            started.append(
                subprocess.Popen(
                    command(name), env=container(name), cwd=ROOT, stdout=log, stderr=log, start_new_session=True
                )
            )

    def logs() -> str:
        return "".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in sorted(root.glob("*.log")))

    try:
        postgres.start()
        redis.start()
        # The image creates POSTGRES_DB, then runs the init scripts as its superuser with psql.
        database = services["postgres"]["environment"]["POSTGRES_DB"]
        postgres.sql(f'CREATE DATABASE "{database}"')
        [mount] = [volume for volume in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in volume]
        init = subprocess.run(
            ["sh", str(ROOT / mount.split(":")[0])],
            env=container("postgres", PGHOST="127.0.0.1", PGPORT=str(postgres.port)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert init.returncode == 0, init.stdout + init.stderr
        pg = {"PGPORT": str(postgres.port)}
        assert healthy("postgres", **pg) and healthy("redis")

        release = subprocess.run(
            command("release"), env=container("release"), cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert release.returncode == 0, release.stdout + release.stderr
        password = re.search(r"^\|\s+password: (\S+)", release.stdout, re.MULTILINE)
        assert password, release.stdout
        assert "Sign in at http://localhost:8000/accounts/login/" in release.stdout

        assert not healthy("web")  # the check can fail
        for name in ("web", "worker", "beat"):
            start(name)
        for name in ("web", "worker", "beat"):
            assert servers.wait_for(lambda name=name: healthy(name), 90, every=0.5), f"{name} is not healthy\n" + logs()

        # Web, worker and beat connect as the app role; the owner only ran the release step.
        roles = postgres.sql(
            f"SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE datname = '{database}'"
        )
        assert roles == services["postgres"]["environment"]["DB_APP_USER"]

        base = f"http://localhost:{web_port}"
        browser = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect()
        )
        status, _, page = _fetch(browser, base + "/accounts/login/")
        assert status == 200, (status, page[:300])  # not a 301 to https://
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token
        form = {"csrfmiddlewaretoken": token.group(1), "username": "admin", "password": password.group(1)}
        status, headers, page = _fetch(browser, base + "/accounts/login/", form=form, origin=base)
        assert (status, headers.get("location")) == (302, "/"), page[:500]
        status, _, page = _fetch(browser, base + "/")
        assert status == 200 and "What is live" in page and "chat" in page
    finally:
        for process in started:
            _stop(process)
        redis.stop()
        postgres.stop_quietly()
        shutil.rmtree(root, ignore_errors=True)


DOCKERFILE = ROOT / "Dockerfile"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _fetch(
    opener: urllib.request.OpenerDirector, url: str, *, form: dict[str, str] | None = None, origin: str = ""
) -> tuple[int, dict[str, str], str]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, headers={"Origin": origin} if origin else {})
    try:
        with opener.open(request, timeout=15) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
