"""Server time of the history pages (every filter, deep pages), the dashboard, the chain page
and the fleet API with 100,000 history rows and 10,000 live fleet instances on PostgreSQL.

Fills the database with ten chains (the example presets' two and eight copies of chat),
``--rows`` history rows written straight into the history table with COPY (a few seconds),
``--fleet`` live service instances spread over the chains (chat has 40 % of them; most on
the live version, some behind, a few refusing it) and ``--stale`` instances that stopped
reading days ago (past FLEET_INSTANCE_TTL_MINUTES: never counted, but still in the table),
then times each page twice: through Django's test client in this process (the whole
request: URL routing, session, middleware, the view's queries, the template; no network, no
web server), then through the production web process as ``make serve`` runs it (granian, two
workers) over HTTP with a signed-in session's cookie. Prints the median and p95 per page,
their ratio to the 50 ms budget and the queries each page ran.

    python bench/history_pages.py [--rows 100000] [--fleet 10000] [--stale 10000] [--repeat 40]
                                  [--database-url postgres://...]

By default on a scratch database (created with ``--admin-url``, dropped at exit); with
``--database-url`` on that database, which is emptied and refilled (and left filled, for
EXPLAIN): give it a scratch one.

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from read_throughput import bench_env, free_port, granian, python_reference_us, start, stop, wait_until_up  # noqa: E402

BUDGET_MS = 50.0
CHAINS = ["chat", "incident-summary", *(f"chat-{n}" for n in range(2, 10))]
PEOPLE = ["alice", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--fleet", type=int, default=10_000, help="live fleet instances")
    parser.add_argument("--stale", type=int, default=10_000, help="instances that stopped reading days ago")
    parser.add_argument("--repeat", type=int, default=40, help="timed requests per page")
    parser.add_argument(
        "--admin-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL allowed to create and drop the scratch database",
    )
    parser.add_argument("--database-url", help="use (empty and refill) this PostgreSQL database instead")
    args = parser.parse_args()
    if args.database_url:
        run(args.database_url, args)
        return
    import psycopg

    name = f"bench_history_{os.getpid()}"
    with psycopg.connect(args.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        run(f"{args.admin_url.rsplit('/', 1)[0]}/{name}", args)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(database_url: str, args: argparse.Namespace) -> None:
    os.environ.update(
        DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="controlplane.settings", DEBUG="false", LOG_LEVEL="ERROR"
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill(args.rows)
    print(f"filled {args.rows:,} history rows in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    fill_fleet(args.fleet, args.stale)
    print(
        f"filled {args.fleet:,} live and {args.stale:,} stale fleet instances in {time.perf_counter() - started:.1f} s"
    )
    measure(args.repeat, fleet=args.fleet)


# --- the data -------------------------------------------------------------------------------


def fill(rows: int) -> None:
    """Ten synced chains, then ``rows`` history rows over two years (chat has 40 % of them),
    each chain's versions consecutive, and each selection at its last version."""
    from django.contrib.auth.models import Group, User
    from django.db import connection

    from presets import services
    from presets.models import Chain, Preset, Selection
    from presets.presets_file import parse_presets
    from presets.providers import get_registry

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE presets_historicalselection, presets_selection, presets_historicalpreset, presets_preset, "
            "presets_historicalchain, presets_chain, auth_user CASCADE"
        )
    example = json.loads((ROOT / "presets" / "presets.example.json").read_text())
    for name in CHAINS[2:]:
        example["chains"][name] = example["chains"]["chat"]
    services.sync_presets(presets_file=parse_presets(json.dumps(example), registry=get_registry()))
    user = User.objects.create_user("bench", password="bench-pass-123")
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])

    rng = random.Random(7)
    presets = {c.name: {p.name: p for p in Preset.objects.filter(chain=c)} for c in Chain.objects.all()}
    chains = {c.name: c for c in Chain.objects.all()}
    state = {s.chain.name: s for s in Selection.objects.select_related("chain", "preset")}
    now = datetime.now(UTC)
    moment = now - timedelta(days=730)
    step = timedelta(days=730) / rows
    columns = (
        "id, version, steps, marking, updated_by, reason, updated_at, expires_at, action, previous_version, "
        "previous_steps, previous_expires_at, history_date, history_change_reason, history_type, chain_id, "
        "preset_id, previous_preset_id"
    )
    buffer = io.StringIO()
    for n in range(rows):
        moment += step * rng.uniform(0.2, 1.8)
        moment = min(moment, now - timedelta(seconds=rows - n))
        name = "chat" if rng.random() < 0.4 else rng.choice(CHAINS[1:])
        live = state[name]
        chain_presets = presets[name]
        default = chain_presets["normal"]
        pins = [p for p in chain_presets.values() if p.pk != default.pk]
        pinned = live.preset_id != default.pk
        if pinned:
            action = rng.choices(["extend", "revert", "expire", "restore", "sync"], [3, 4, 4, 1, 1])[0]
        else:
            action = rng.choices(["select", "restore", "sync"], [12, 1, 1])[0]
        if action in ("select", "restore") and not pinned:
            preset, expires = rng.choice(pins), moment + timedelta(hours=4)
        elif action in ("revert", "expire") or (action == "restore" and pinned):
            preset, expires = default, None
        else:  # extend or sync keep the preset
            preset, expires = live.preset, (moment + timedelta(hours=4) if pinned else None)
        actor = {
            "expire": "system:expiry",
            "sync": "system:sync",
        }.get(action) or ("token:deploy-bot" if rng.random() < 0.05 else rng.choice(PEOPLE[:-1]))
        if rng.random() < 0.0001:
            actor = "mallory"  # a rare actor
        reason = f"INC-{rng.randint(1000, 9999)} {action} by {actor}: " + "vendor_a slow " * rng.randint(0, 8)
        row = (
            live.pk,
            live.version + 1,
            json.dumps(preset.steps),
            json.dumps(preset.marking),
            actor,
            reason.strip(),
            moment.isoformat(),
            expires.isoformat() if expires else None,
            action,
            live.version,
            json.dumps(live.steps),
            live.expires_at.isoformat() if live.expires_at else None,
            moment.isoformat(),
            None,
            "~",
            chains[name].pk,
            preset.pk,
            live.preset_id,
        )
        buffer.write("\t".join(r"\N" if v is None else str(v).replace("\\", "\\\\") for v in row) + "\n")
        live.version += 1
        live.preset, live.preset_id, live.steps, live.expires_at = preset, preset.pk, preset.steps, expires
        live.updated_at, live.action, live.updated_by, live.reason = moment, action, actor, reason.strip()
    with connection.cursor() as cursor:
        with cursor.connection.cursor().copy(f"COPY presets_historicalselection ({columns}) FROM STDIN") as copy:
            copy.write(buffer.getvalue())
        # VACUUM too, as autovacuum would have after a bulk load: it marks the pages all-visible,
        # so the capped counts read the index alone (the table's own pages are never read).
        cursor.execute("VACUUM ANALYZE presets_historicalselection")
    for live in state.values():
        # A live pin has not expired yet (else the pages would revert it, writing).
        expires = now + timedelta(hours=2) if live.expires_at else None
        Selection.objects.filter(pk=live.pk).update(
            version=live.version,
            preset=live.preset_id,
            steps=live.steps,
            expires_at=expires,
            updated_at=live.updated_at,
            action=live.action,
            updated_by=live.updated_by,
            reason=live.reason,
        )


SERVICES = ["checkout", "search", "support-bot", "summarizer", "triage", "translate", "mailer", "assistant"]
LAST_SEEN_S = 60.0  # an instance's row is written at most once a minute (audit.fleet_recorder)


def fill_fleet(live: int, stale: int) -> None:
    """``live`` instances reading now and ``stale`` ones gone for days, over the ten chains
    (chat has 40 %), written with COPY. Live ones: 90 % on the chain's live version, most of
    them running before its last change and on it within a few seconds of it (the apply
    delays), the rest started since; 8 % one version behind; 2 % behind because they refused
    the live version (a RejectedVersion row each, chat-2's and chat-3's)."""
    from django.db import connection

    from audit.models import FleetInstance, RejectedVersion
    from presets.models import Selection

    FleetInstance.objects.all().delete()
    RejectedVersion.objects.all().delete()
    rng = random.Random(11)
    now = datetime.now(UTC)
    selections = {s.chain.name: s for s in Selection.objects.select_related("chain")}
    buffer, refusals = io.StringIO(), io.StringIO()
    for n in range(live + stale):
        name = "chat" if rng.random() < 0.4 else rng.choice(CHAINS[1:])
        selection = selections[name]
        client = f"{rng.choice(SERVICES)}/{name}-pod-{n:06d}-{rng.getrandbits(20):05x}"
        if n >= live:  # stopped reading 1 to 30 days ago, on whatever it had then
            last = now - timedelta(days=rng.uniform(1, 30))
            first = last - timedelta(hours=rng.uniform(1, 72))
            version = max(1, selection.version - rng.randint(1, 50))
            row = (selection.chain_id, client, version, first, first, last)
        else:
            last = now - timedelta(seconds=rng.uniform(0, LAST_SEEN_S))
            first = now - timedelta(hours=rng.uniform(0.5, 72))
            roll = rng.random()
            if roll < 0.90:
                version = selection.version
                if first < selection.updated_at:  # it waited for the change: a delay of a few 100 ms
                    seen = selection.updated_at + timedelta(seconds=rng.lognormvariate(-1.2, 0.8))
                else:
                    seen = first
            else:
                version = max(1, selection.version - 1)
                seen = min(first + timedelta(minutes=rng.uniform(0, 30)), selection.updated_at)
                seen = max(seen, first)
                if roll >= 0.98 and name in ("chat-2", "chat-3"):
                    reason = "chain[0]: unknown provider 'vendor_b' (this release's registry lacks it)"
                    at = selection.updated_at + timedelta(seconds=rng.uniform(0.1, 60))
                    refusals.write(f"{selection.chain_id}\t{client}\t{selection.version}\t{reason}\t{at.isoformat()}\n")
            row = (selection.chain_id, client, version, seen, first, last)
        buffer.write("\t".join(v.isoformat() if isinstance(v, datetime) else str(v) for v in row) + "\n")
    with connection.cursor() as cursor:
        columns = "chain_id, client, applied_version, version_seen_at, first_seen_at, last_seen_at"
        with cursor.connection.cursor().copy(f"COPY audit_fleetinstance ({columns}) FROM STDIN") as copy:
            copy.write(buffer.getvalue())
        with cursor.connection.cursor().copy(
            "COPY audit_rejectedversion (chain_id, client, version, reason, at) FROM STDIN"
        ) as copy:
            copy.write(refusals.getvalue())
        cursor.execute("VACUUM ANALYZE audit_fleetinstance")
        cursor.execute("VACUUM ANALYZE audit_rejectedversion")


def keep_fleet_alive(since: list[float]) -> None:
    """Every few minutes of the run, the live instances read again (as a real fleet's rows
    are rewritten each minute), so none drops out of the fleet mid-run."""
    if time.monotonic() - since[0] < 240:
        return
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_fleetinstance SET last_seen_at = now() - random() * interval '60 seconds' "
            "WHERE last_seen_at > now() - interval '1 day'"
        )
    since[0] = time.monotonic()


# --- the measurement ------------------------------------------------------------------------


def cases() -> list[tuple[str, str]]:
    from audit.models import FleetInstance
    from presets.models import Selection

    history = Selection.history
    oldest = list(history.order_by("history_date", "history_id").values_list("history_id", "history_date")[:200])
    deep_id, deep_date = oldest[100]
    chat_deep = history.filter(chain__name="chat").order_by("version").values_list("history_id", flat=True)[100]
    alice_deep = history.filter(updated_by="alice").order_by("history_date").values_list("history_id", flat=True)[100]
    a_year_ago = (deep_date + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M")
    a_year_ago_next_day = (deep_date + timedelta(days=366)).strftime("%Y-%m-%dT%H:%M")
    early = (deep_date + timedelta(days=3)).strftime("%Y-%m-%d")
    chat = FleetInstance.objects.filter(chain__name="chat", last_seen_at__gte=datetime.now(UTC) - timedelta(days=1))
    chat_middle = chat.order_by("client").values_list("client", flat=True)[chat.count() // 2] if chat.exists() else ""
    return [
        ("dashboard", "/"),
        ("chain page: chat", "/chains/chat/"),
        ("api: fleet", "/api/v1/fleet"),
        ("api: fleet ?detail=0 (the pages' poll)", "/api/v1/fleet?detail=0"),
        ("api: chat instances, first page", "/api/v1/chains/chat/instances"),
        ("api: chat instances, middle page", "/api/v1/chains/chat/instances?" + urlencode({"after": chat_middle})),
        ("all: newest", "/history/"),
        ("all: page 4,000 (older_than)", f"/history/?older_than={deep_id}"),
        ("all: near the oldest, going newer", f"/history/?newer_than={deep_id}"),
        ("all: chain", "/history/?chain=incident-summary"),
        ("all: actor", "/history/?actor=alice"),
        ("all: action select", "/history/?action=select"),
        ("all: action restore", "/history/?action=restore"),
        ("all: rare actor", "/history/?actor=mallory"),
        ("all: no such actor", "/history/?actor=nobody"),
        ("all: a day a year ago", f"/history/?since={a_year_ago}&until={a_year_ago_next_day}"),
        ("all: until the first days", f"/history/?until={early}"),
        ("all: chain+actor+action", "/history/?chain=chat-9&actor=alice&action=restore"),
        ("all: actor+action, none match", "/history/?actor=system:expiry&action=select"),
        ("all: actor, deep page", f"/history/?actor=alice&older_than={alice_deep}"),
        ("all: bad date (400)", "/history/?since=yesterday"),
        ("chat: newest", "/chains/chat/history/"),
        ("chat: deep page", f"/chains/chat/history/?older_than={chat_deep}"),
        ("chat: actor", "/chains/chat/history/?actor=alice"),
        ("chat: action restore", "/chains/chat/history/?action=restore"),
        ("chat: rare actor", "/chains/chat/history/?actor=mallory"),
        ("chat: actor+action, none match", "/chains/chat/history/?actor=system:expiry&action=select"),
        ("chat: a day a year ago", f"/chains/chat/history/?since={a_year_ago}&until={a_year_ago_next_day}"),
        ("chat: until the first days", f"/chains/chat/history/?until={early}"),
    ]


class Counted:
    """A database execute wrapper that counts the queries."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)

    def __len__(self) -> int:
        return self.count


def measure(repeat: int, *, fleet: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    logging.getLogger("django.request").setLevel(logging.ERROR)  # the bad-filter page's 400s
    client = Client()
    client.force_login(User.objects.get(username="bench"))
    queries_of = {}
    for label, url in cases():
        queries = Counted()
        with connection.execute_wrapper(queries):
            client.get(url)
        queries_of[label] = len(queries)
    print("in this process (Django's test client):")
    results = timed(lambda url: client.get(url).status_code, repeat, queries_of)
    worst = max(results, key=lambda r: r[2])
    median_of = {label: median for label, median, _ in results}
    # The pages with the 50 ms budget (the API's fleet listing has none): the dashboard, the
    # chain page and the history pages.
    history = [median for label, median, _ in results if label.startswith(("all:", "chat:"))]
    served_results = served(repeat, queries_of)
    served_worst = max(served_results, key=lambda r: r[2])
    print(
        f"pages={len(results)} worst_p95_ms={worst[2]:.1f} worst_page={worst[0].replace(' ', '_')!s} "
        f"worst_median_ms={max(r[1] for r in results):.1f} budget_ratio={worst[2] / BUDGET_MS:.2f} "
        f"fleet_instances={fleet} dashboard_median_ms={median_of['dashboard']:.1f} "
        f"chain_page_median_ms={median_of['chain page: chat']:.1f} history_worst_median_ms={max(history):.1f} "
        f"served_worst_p95_ms={served_worst[2]:.1f} served_worst_median_ms={max(r[1] for r in served_results):.1f} "
        f"python_ref_us={python_reference_us()}"
    )


def timed(get: Callable[[str], int], repeat: int, queries_of: dict[str, int]) -> list[tuple[str, float, float]]:
    """Each page ``repeat`` times after 3 to warm up (templates, connections, PostgreSQL's
    caches); prints and returns each page's median and p95 in ms."""
    results = []
    print(f"{'page':40} {'median ms':>9} {'p95 ms':>7} {'p95/50ms':>8} {'queries':>7}  status")
    alive = [time.monotonic()]
    for label, url in cases():
        keep_fleet_alive(alive)
        for _ in range(3):
            status = get(url)
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            get(url)
            timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        median, p95 = statistics.median(timings), timings[min(len(timings) - 1, int(0.95 * len(timings)))]
        results.append((label, median, p95))
        print(f"{label:40} {median:9.1f} {p95:7.1f} {p95 / BUDGET_MS:8.2f} {queries_of[label]:7}  {status}")
    return results


def served(repeat: int, queries_of: dict[str, int]) -> list[tuple[str, float, float]]:
    """The same pages through the production web process as ``make serve`` runs it (granian,
    two workers), over HTTP on 127.0.0.1 with a signed-in session's cookie."""
    import http.client
    import tempfile

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user = User.objects.get(username="bench")
    session = SessionStore()
    session.update(
        {
            SESSION_KEY: str(user.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: user.get_session_auth_hash(),
        }
    )
    session.create()
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session.session_key}"}
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        env = bench_env(
            Path(workdir), DATABASE_URL=os.environ["DATABASE_URL"], SECRET_KEY=settings.SECRET_KEY, LOG_LEVEL="ERROR"
        )
        process = start(granian("controlplane.asgi:application", port), env)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz")
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

            def get(url: str) -> int:
                connection.request("GET", url, headers=headers)
                response = connection.getresponse()
                response.read()
                return response.status

            print("served (granian, 2 workers, HTTP/1.1 keep-alive):")
            return timed(get, repeat, queries_of)
        finally:
            stop(process)


if __name__ == "__main__":
    main()
