"""``python -m relay``: run a relay (docs/relays.md).

Settings come from the environment (``relay.config``); the options here override the most
used ones. The process is granian serving ``relay.asgi:application``, like the control
plane's web process (``make serve``): HTTP/1.1, one event loop per worker.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

from relay.config import ConfigError, from_env

# Held long polls and kept-alive connections per worker (granian's --backpressure): a relay
# is sized for its fleet, as the web process is (Makefile, WEB_MAX_REQUESTS).
MAX_CONNECTIONS = 20480
# Files a relay worker opens besides its clients' connections: its listening socket, its
# upstream connections, the documents on disk, the event loop's own.
OWN_FILES = 64
# granian's allocator (jemalloc, built into its extension) as `make serve` sets it (Makefile,
# WEB_MALLOC_CONF): what a fan-out frees goes back to the system at once. Read once, as the
# extension loads; an operator's own _RJEM_MALLOC_CONF stands.
MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"


def connection_limit() -> int:
    """Connections a worker may hold (granian's --backpressure): MAX_CONNECTIONS, or fewer when
    the process may not open that many files, each connection being one. The soft limit is
    raised to the hard one first. Past the limit, a connection waits to be accepted, where
    past the files a worker may open, accepting would fail."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # the soft limit stands
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft - OWN_FILES))


def use_malloc_conf() -> None:
    """Give granian's allocator ``MALLOC_CONF`` unless the environment sets its own: before
    granian is imported (its workers are forked from this process or inherit its environment)."""
    os.environ.setdefault("_RJEM_MALLOC_CONF", MALLOC_CONF)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", help="the control plane's or another relay's URL (RELAY_UPSTREAM)")
    parser.add_argument("--cache-dir", help="where documents are kept (RELAY_CACHE_DIR, default var/relay)")
    parser.add_argument("--host", default=os.environ.get("RELAY_HOST", "0.0.0.0"))  # noqa: S104 - a server
    parser.add_argument("--port", type=int, default=int(os.environ.get("RELAY_PORT", "8100")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("RELAY_WORKERS", "1")))
    args = parser.parse_args(argv)
    if args.upstream:
        os.environ["RELAY_UPSTREAM"] = args.upstream
    if args.cache_dir:
        os.environ["RELAY_CACHE_DIR"] = args.cache_dir
    try:
        config = from_env()
    except ConfigError as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 2
    if not 1 <= args.workers <= 64:
        print("relay: --workers must be within 1..64", file=sys.stderr)
        return 2
    use_malloc_conf()
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces

    print(f"relay {config.name}: following {config.upstream}, serving on {args.host}:{args.port}", file=sys.stderr)
    connections = connection_limit()
    if connections < MAX_CONNECTIONS:
        print(
            f"relay {config.name}: this process may open {connections + OWN_FILES} files, so each worker holds at most "
            f"{connections} connections (raise the open-files limit, `ulimit -n`, for {MAX_CONNECTIONS})",
            file=sys.stderr,
        )
    Granian(
        "relay.asgi:application",
        address=args.host,
        port=args.port,
        interface=Interfaces.ASGI,
        workers=args.workers,
        http=HTTPModes.http1,
        websockets=False,
        backlog=MAX_CONNECTIONS,
        backpressure=connections,
        respawn_failed_workers=True,
    ).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
