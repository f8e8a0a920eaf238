"""The promises under load and time (tests/test_promises.py), as figures.

Runs the system tests (real granian, disposable PostgreSQL with max_connections=100, real
SDK instances, no Celery worker) and prints what they measured: how long after a pin's
expires_at 100 long-polling instances route by the default (with the control plane up, and
killed 2 s before), how long the server's revert takes to reach them, how soon fleet status
shows N of N, and the 64-client mixed load (requests, 5xx, peak PostgreSQL connections
against the bound). Ends with one key=value line.

    python bench/promises.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    env = {
        **os.environ,
        "CI": "true",
        "DATABASE_URL": os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "tests/test_promises.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    figures: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith(("figures:", "load detail:")):
            print(line)
        if line.startswith("figures:"):
            figures.update(re.findall(r"(\w+)=(\S+)", line))
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    print(summary)
    print(" ".join(f"{key}={value}" for key, value in figures.items()))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
