"""`make run`: the web process with a Celery worker and beat beside it, stopped together.

    python -m controlplane.run_local [ADDRESS:PORT]

The worker runs the beat schedule (expiry every 15 s, stale-pin alerts every 60 s) on the
configured broker: kombu's filesystem transport under var/ by default, Redis when
CELERY_BROKER_URL says so. When the web process exits (Ctrl-C, SIGTERM, a crash), the worker
is stopped too; a worker that dies is reported and the web keeps serving (the read path
still reverts expired pins by itself).

How to sign in (``manage.py ensure_local_admin``: URL, user, password, in a box) comes last,
once the web process answers /healthz and the worker has logged that it is ready, so the
worker's banner does not push it off the screen. The worker's output passes through this
process for that.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import IO

from django.conf import settings

WORKER_STOP_SECONDS = 10
# How long the sign-in box waits for the web process and the worker before it is shown anyway.
START_SECONDS = 60
# Celery's last start-up line: "celery@host ready."
WORKER_READY = re.compile(r"@\S+ ready\.\s*$")


def main(argv: list[str]) -> int:
    address = argv[0] if argv else "127.0.0.1:8000"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    python = sys.executable
    worker = subprocess.Popen(
        [python, "-m", "celery", "-A", "controlplane", "worker", "--beat", "--loglevel=info", "--concurrency=2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = threading.Lock()
    worker_ready = threading.Event()
    assert worker.stdout is not None
    threading.Thread(target=_relay, args=(worker.stdout, output, worker_ready), daemon=True).start()
    # The same web stack as production (the ASGI read front and Django under granian), with
    # one worker; static files collected under VAR_DIR and served by granian.
    host, _, port = address.rpartition(":")
    web = subprocess.Popen(
        [
            str(Path(python).parent / "granian"),
            "--interface",
            "asgi",
            "--host",
            host or "127.0.0.1",
            "--port",
            port,
            "--workers",
            "1",
            "--no-ws",
            "--log-level",
            "warning",
            "--static-path-route",
            "/static",
            "--static-path-mount",
            str(settings.STATIC_ROOT),
            "controlplane.asgi:application",
        ],
    )
    url = f"http://{host or '127.0.0.1'}:{port}/"

    stopping: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        # Ctrl-C reaches the whole process group already; SIGTERM (e.g. from a supervisor)
        # reaches only us, so pass it on to the web process and let the loop below finish.
        stopping.append(signum)
        if web.poll() is None:
            web.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worker_reported = False
    try:
        if _started(url, web, worker, worker_ready) and not stopping:
            admin = subprocess.run(
                [python, str(Path(settings.BASE_DIR) / "manage.py"), "ensure_local_admin", "--url", url],
                capture_output=True,
                text=True,
            )
            with output:
                sys.stderr.write(admin.stderr)
                sys.stdout.write(admin.stdout + "Ctrl-C stops web, worker and beat.\n")
                sys.stdout.flush()
        while web.poll() is None:
            if not worker_reported and worker.poll() is not None:
                print(
                    f"run_local: the Celery worker exited with {worker.returncode}; the web "
                    "process keeps serving without background work",
                    file=sys.stderr,
                )
                worker_reported = True
            time.sleep(0.5)
    finally:
        _stop(worker)
    if stopping:
        return 0  # asked to stop, and stopped
    code = web.returncode or 0
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


def _relay(stream: IO[bytes], output: threading.Lock, ready: threading.Event) -> None:
    """Copy the worker's output to ours line by line; set ``ready`` at its ready line."""
    for raw in stream:
        line = raw.decode(errors="replace")
        with output:
            sys.stdout.write(line)
            sys.stdout.flush()
        if not ready.is_set() and WORKER_READY.search(line):
            ready.set()


def _started(
    url: str, web: subprocess.Popen[bytes], worker: subprocess.Popen[bytes], worker_ready: threading.Event
) -> bool:
    """Wait until the web process answers and the worker is ready (or has exited: the loop
    in ``main`` reports that); False when the web process exited first."""
    deadline = time.monotonic() + START_SECONDS
    while web.poll() is None and not _answers(url + "healthz"):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    while web.poll() is None and worker.poll() is None and not worker_ready.wait(0.2):
        if time.monotonic() > deadline:
            break
    return web.poll() is None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (a 400 for a Host outside ALLOWED_HOSTS is still an answer)
    except OSError:
        return False


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)  # warm shutdown: finish the running task, then exit
    try:
        worker.wait(WORKER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
