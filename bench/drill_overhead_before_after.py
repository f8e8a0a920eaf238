"""The Router's cost without a drill, before the failover-drill code and with it (issue 54's
bar: within 1 us a request).

Two checkouts are compared, so two processes: ``python bench/drill_overhead_before_after.py
BEFORE_DIR`` runs this machine's ``chainclient`` (the checkout this script is in) and the one
under ``BEFORE_DIR/sdk`` (a ``git worktree`` of the commit before drills) alternately,
``--rounds`` times each, every run a fresh process measuring a Router over a ChainClient (the
source services use, with every hook) and over a plain list of steps, on the thread's CPU
time. The figures are each side's median and the median of the adjacent runs' differences
(the machine's speed drifts: adjacent runs share its noise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ONE_RUN = """
import json, sys, tempfile, time
sys.path[:0] = [{sdk!r}, {bench!r}]
import chainclient
from chainclient import Router
from sdk_current import DEFAULT, example_client
assert chainclient.__file__.startswith({sdk!r}), chainclient.__file__

def answer(step, request, timeout_s):
    return "ok"

def per_request_us(call, requests, repeats=5):
    for _ in range(2000):
        call()
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        for _ in range(requests):
            call()
        best = min(best, time.thread_time() - started)
    return best / requests * 1e6

with tempfile.TemporaryDirectory() as state:
    client = example_client("http://127.0.0.1:9", state_dir=state)
    transports = {{"vendor_a": answer, "vendor_b": answer, "self_hosted": answer}}
    over_client = Router(client, transports=transports)
    over_list = Router(list(DEFAULT), transports=transports)
    print(json.dumps({{
        "client_us": per_request_us(lambda: over_client.complete("hello"), {requests}),
        "list_us": per_request_us(lambda: over_list.complete("hello"), {requests}),
    }}))
"""


def run(root: Path, requests: int) -> dict[str, float]:
    script = ONE_RUN.format(sdk=str(root / "sdk"), bench=str(HERE), requests=requests)
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="a checkout of the commit before drills")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    after_root = HERE.parent
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for turn in range(args.rounds):
        for side in ("before", "after") if turn % 2 == 0 else ("after", "before"):
            runs[side].append(run(args.before if side == "before" else after_root, args.requests))
    for key in ("client_us", "list_us"):
        before = statistics.median(r[key] for r in runs["before"])
        after = statistics.median(r[key] for r in runs["after"])
        added = statistics.median(a[key] - b[key] for a, b in zip(runs["after"], runs["before"], strict=True))
        print(f"{key}: before={before:.2f} after={after:.2f} added={added:+.2f} us/request")


if __name__ == "__main__":
    main()
