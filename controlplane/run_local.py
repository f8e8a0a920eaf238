"""`make run`: the web process with a Celery worker and beat beside it, stopped together.

    python -m controlplane.run_local [ADDRESS:PORT]

The worker runs the beat schedule (expiry every 15 s, stale-pin alerts every 60 s) on the
configured broker: kombu's filesystem transport under var/ by default, Redis when
CELERY_BROKER_URL says so. When the web process exits (Ctrl-C, SIGTERM, a crash), the worker
is stopped too; a worker that dies is reported and the web keeps serving (the read path
still reverts expired pins by itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from django.conf import settings

WORKER_STOP_SECONDS = 10


def main(argv: list[str]) -> int:
    address = argv[0] if argv else "127.0.0.1:8000"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    python = sys.executable
    worker = subprocess.Popen(
        [python, "-m", "celery", "-A", "controlplane", "worker", "--beat", "--loglevel=info", "--concurrency=2"],
    )
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
    print(f"Serving on http://{host or '127.0.0.1'}:{port}/ (Ctrl-C stops web, worker and beat)", flush=True)

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
