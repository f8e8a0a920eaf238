"""`make run`: the web process with a Celery worker and beat beside it, stopped together.

    python -m controlplane.run_local [ADDRESS:PORT]

The worker runs the beat schedule (expiry every 15 s, stale-pin alerts every 60 s) on the
configured broker: kombu's filesystem transport under var/ by default, Redis when
CELERY_BROKER_URL says so. When the web process exits (Ctrl-C, SIGTERM, a crash), the worker
is stopped too; a worker that dies is reported and the web keeps serving (the read path
still reverts expired pins by itself).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

WORKER_STOP_SECONDS = 10


def main(argv: list[str]) -> int:
    address = argv[0] if argv else "127.0.0.1:8000"
    python = sys.executable
    worker = subprocess.Popen(
        [python, "-m", "celery", "-A", "controlplane", "worker", "--beat", "--loglevel=info",
         "--concurrency=2"],
    )
    web = subprocess.Popen([python, "manage.py", "runserver", "--noreload", address])

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
                print(f"run_local: the Celery worker exited with {worker.returncode}; the web "
                      "process keeps serving without background work", file=sys.stderr)
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
