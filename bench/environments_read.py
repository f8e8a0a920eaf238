"""The read path's cost with environments against the release before them (same machine, same
moment): a plain token read of the default environment's chain, 200 and 304.

Starts side by side under granian (`make serve`'s server and allocator, 2 workers each): this
checkout's control plane with ``ENVIRONMENTS=staging,production`` (both synced, a production
token reading production) and the checkout at ``--base`` (a git revision, checked out in a
temporary worktree, on a scratch database of its own migrated by its own code). Loads them in
alternating rounds with wrk, as bench/read_throughput.py does, and prints each one's
requests/s and p99, and the cost per request of this checkout against the base's (the ratio of
the medians of requests/s, base over this: 1.05 is 5 % more time a read).

    python bench/environments_read.py [--base 5440c8c] [--duration 5] [--rounds 5] [--admin-url postgres://...]

Needs wrk and git. Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.read_throughput import (  # noqa: E402 - after the path is set
    ROOT,
    free_port,
    granian,
    load_in_rounds,
    median,
    scratch_control_plane,
    start,
    stop,
    wait_until_up,
)

# The chains of the default environment (production), as a sync would make them: a sync
# reaches the first environment, staging, and this is the bench's, not a promotion's, business.
PRODUCTION_TOO = (
    "from django.conf import settings; from presets import services; "
    "from presets.presets_file import load_presets_file; from presets.providers import get_registry; "
    "services.apply_presets(presets_file=load_presets_file(settings.PRESETS_FILE, registry=get_registry()), "
    "environment='production')"
)


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """The checkout at ``revision`` in a temporary git worktree, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="bench-base-")) / "checkout"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), revision], cwd=ROOT, check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
        shutil.rmtree(path.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="5440c8c", help="the git revision before environments")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="granian workers each (make serve's: 2)")
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk (apt install wrk)")
    rps: dict[tuple[str, int, str], list[float]] = {}
    p99: dict[tuple[str, int, str], list[float]] = {}
    with (
        worktree(args.base) as base_checkout,
        scratch_control_plane("bench_env_base", args.admin_url, cwd=base_checkout) as base,
        scratch_control_plane("bench_env_now", args.admin_url, ENVIRONMENTS="staging,production") as now,
    ):
        subprocess.run([sys.executable, "manage.py", "shell", "-c", PRODUCTION_TOO], cwd=ROOT, env=now.env, check=True)
        servers = []
        targets: dict[str, tuple[str, dict[str, str]]] = {}
        try:
            for name, plane, cwd in (("base", base, base_checkout), ("environments", now, ROOT)):
                port = free_port()
                auth = {"Authorization": f"Bearer {plane.token('read')}"}
                servers.append(
                    start(granian("controlplane.asgi:application", port, workers=args.workers), plane.env, cwd=cwd)
                )
                wait_until_up(f"http://127.0.0.1:{port}/healthz")
                targets[name] = (f"http://127.0.0.1:{port}/api/v1/chains/chat", auth)
            etags = set()
            for url, auth in targets.values():
                answer = urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=5)
                etags.add(answer.headers["ETag"])
            assert len(etags) == 1, etags  # the same version, so the 304 rounds match
            load_in_rounds(args, targets, etags.pop(), args.workers, rps, p99)
        finally:
            for server in servers:
                stop(server)
    figures = {}
    for kind in ("200", "304"):
        base_rps = median(rps["base", args.workers, kind])
        now_rps = median(rps["environments", args.workers, kind])
        cost = base_rps / now_rps
        print(
            f"{kind}: base {base_rps:,.0f} req/s (p99 {median(p99['base', args.workers, kind]):.2f} ms), "
            f"environments {now_rps:,.0f} req/s (p99 {median(p99['environments', args.workers, kind]):.2f} ms); "
            f"cost per read {cost:.3f}x the base's (bar 1.05); rounds base {rps['base', args.workers, kind]}, "
            f"environments {rps['environments', args.workers, kind]}"
        )
        figures[f"cost_{kind}"] = f"{cost:.3f}"
    print(" ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
