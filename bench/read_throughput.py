"""Read throughput of the authenticated chain endpoint (200 and 304) versus a bare Django view.

Starts, one after another on this machine: the control plane's production web process under
each candidate ASGI server (2 workers), and a bare Django view returning a constant under
granian WSGI with 2 workers; loads each with wrk (32 connections) and prints requests/s and
the ratio to the bare view, measured in the same run.

    python bench/read_throughput.py [--duration 10] [--connections 32]

Needs wrk (Debian package `wrk`). Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.2)
    raise SystemExit(f"server at {url} did not come up")


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def granian(
    app: str, port: int | str, *, interface: str = "asgi", workers: int = 2, extra: tuple[str, ...] = ()
) -> list[str]:
    """The granian command line every benchmark serves ``app`` with."""
    options = ["--interface", interface, "--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
    return [str(BIN / "granian"), *options, "--log-level", "warning", "--no-ws", *extra, app]


def set_up(env: dict[str, str]) -> None:
    """Migrate the database ``env`` names and sync the example presets into it."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "sync_presets"], cwd=ROOT, env=env, check=True, capture_output=True)


def create_token(env: dict[str, str], name: str, scope: str) -> str:
    """A new service token's secret."""
    command = [sys.executable, "manage.py", "create_token", name, "--scope", scope]
    return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def scratch_control_plane(prefix: str, admin_url: str, **extra_env: str) -> Iterator[ScratchPlane]:
    """A migrated control plane with the example presets on a scratch PostgreSQL database
    (``admin_url`` may create and drop databases); the database is dropped at exit."""
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    base = admin_url.rsplit("/", 1)[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    env = {
        **os.environ,
        "DATABASE_URL": f"{base}/{name}",
        "VAR_DIR": str(workdir),
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **extra_env,
    }
    try:
        set_up(env)
        yield ScratchPlane(
            env=env, database_url=env["DATABASE_URL"], token=lambda scope: create_token(env, f"{prefix}-{scope}", scope)
        )
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class ScratchPlane:
    env: dict[str, str]
    database_url: str
    token: Callable[[str], str]


def wrk(url: str, headers: dict[str, str], duration: int, connections: int) -> float:
    command = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s"]
    for key, value in headers.items():
        command += ["-H", f"{key}: {value}"]
    out = subprocess.run(command + [url], capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"{errors.group(1)} error responses from {url}:\n{out}")
    if "Socket errors" in out:
        print(f"  warning: {url}: " + out.split("Socket errors")[1].splitlines()[0].strip())
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--servers", default="granian,uvicorn")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")

    workdir = Path(tempfile.mkdtemp(prefix="bench-read-"))
    env = {**os.environ, "VAR_DIR": str(workdir), "DEBUG": "false", "LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    env.setdefault("DATABASE_URL", f"sqlite:///{workdir / 'bench.sqlite3'}")
    set_up(env)
    token = create_token(env, f"bench-{os.getpid()}", "read")
    version = 1
    auth = {"Authorization": f"Bearer {token}"}

    servers = {
        "granian": granian("controlplane.asgi:application", "{port}"),
        "uvicorn": [
            str(BIN / "uvicorn"),
            "controlplane.asgi:application",
            "--workers",
            "2",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--no-access-log",
            "--log-level",
            "warning",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
        ],
    }
    results: dict[str, float] = {}
    for name in args.servers.split(","):
        port = free_port()
        process = start([part.replace("{port}", str(port)) for part in servers[name]], env)
        try:
            url = f"http://127.0.0.1:{port}/api/v1/chains/chat"
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            wrk(url, auth, 2, args.connections)  # warm every worker's snapshot and token cache
            results[f"{name}_200"] = wrk(url, auth, args.duration, args.connections)
            results[f"{name}_304"] = wrk(
                url, {**auth, "If-None-Match": f'"{version}"'}, args.duration, args.connections
            )
        finally:
            stop(process)
        print(
            f"{name:8} ASGI x2: 200 {results[f'{name}_200']:>9,.0f} req/s   304 {results[f'{name}_304']:>9,.0f} req/s"
        )

    port = free_port()
    process = start(
        granian("bench.bare_django:application", str(port), interface="wsgi"),
        env,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/v1/chains/chat"
        wait_until_up(url)
        wrk(url, {}, 2, args.connections)
        bare = wrk(url, {}, args.duration, args.connections)
    finally:
        stop(process)
    print(f"bare Django view, granian WSGI x2: {bare:>9,.0f} req/s")

    best = max(args.servers.split(","), key=lambda n: results[f"{n}_200"] + results[f"{n}_304"])
    figures = {
        "server": best,
        "read_200_rps": round(results[f"{best}_200"]),
        "read_304_rps": round(results[f"{best}_304"]),
        "bare_django_rps": round(bare),
        "ratio_200": round(results[f"{best}_200"] / bare, 2),
        "ratio_304": round(results[f"{best}_304"] / bare, 2),
    }
    for name in args.servers.split(","):
        figures[f"{name}_200_rps"] = round(results[f"{name}_200"])
        figures[f"{name}_304_rps"] = round(results[f"{name}_304"])
    shutil.rmtree(workdir, ignore_errors=True)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
