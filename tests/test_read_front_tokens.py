"""The read front's tokens: held in the process, reloaded on every token change, never a
stampede of lookups, use recorded in batches."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from presets import service_tokens
from presets.models import ServiceToken
from read_path.notifications import state
from read_path.snapshot import PG_SAFETY_POLL_S
from tests.conftest import make_token
from tests.test_read_front import auth, call, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

CHAT = "/api/v1/chains/chat"


def token_queries(seen: list[str]) -> list[str]:
    """The token lookups and reloads among the statements run."""
    return [sql for sql in seen if "presets_servicetoken" in sql and sql.startswith("SELECT")]


def test_a_burst_of_reads_never_looks_tokens_up(read_token, count_queries) -> None:
    async def body(app):
        await call(app, CHAT, auth(read_token))  # the front has started: its tokens are loaded
        count_queries.clear()
        return await asyncio.gather(*(call(app, CHAT, auth(read_token)) for _ in range(300)))

    answers = run(body)
    assert {status for status, _, _ in answers} == {200}
    assert token_queries(count_queries) == []


async def listening(app) -> None:
    """Wait until the front's LISTEN connection is checked (and its catch-up done)."""
    while state() is None or state().mode != "listen":
        await asyncio.sleep(0.01)
    await app.snapshot.tokens.reload()


@pytest.mark.postgres
def test_many_reads_of_a_token_the_front_has_not_seen_share_one_lookup(read_token, count_queries) -> None:
    async def body(app):
        await call(app, CHAT, auth(read_token))
        await listening(app)
        count_queries.clear()
        # Created a moment ago (its notification may not have arrived): one lookup for all...
        fresh = await asyncio.to_thread(make_token, "fresh", "read")
        first = await asyncio.gather(*(call(app, CHAT, auth(fresh)) for _ in range(100)))
        # ...and a bad token is looked up once, then refused from memory.
        bad = await asyncio.gather(*(call(app, CHAT, auth("cpt_not-a-token")) for _ in range(100)))
        again = await asyncio.gather(*(call(app, CHAT, auth("cpt_not-a-token")) for _ in range(100)))
        return first, bad + again

    first, bad = run(body)
    assert {status for status, _, _ in first} == {200}
    assert {status for status, _, _ in bad} == {401}
    lookups = token_queries(count_queries)
    # At most: the reload the creation announced, the fresh token's lookup, the bad one's.
    assert 1 <= len(lookups) <= 3, lookups


@pytest.mark.postgres
def test_a_revoked_token_stops_working_within_a_second(read_token) -> None:
    async def body(app):
        assert (await call(app, CHAT, auth(read_token)))[0] == 200
        await listening(app)
        await asyncio.to_thread(service_tokens.revoke_token, name="reader", actor="cli:test")
        revoked = time.monotonic()
        statuses = []
        while time.monotonic() - revoked < PG_SAFETY_POLL_S:
            statuses.append((await call(app, CHAT, auth(read_token)))[0])
            if statuses[-1] != 200:
                break
            await asyncio.sleep(0.01)
        return statuses, time.monotonic() - revoked

    statuses, took = run(body)
    assert statuses[-1] == 401, statuses
    # The change's notification reloads the set, not the periodic check (every 5 s).
    assert took < 1.0, took


@pytest.mark.postgres
def test_an_expiry_set_in_the_admin_reaches_the_front_by_its_notification(read_token) -> None:
    async def body(app):
        assert (await call(app, CHAT, auth(read_token)))[0] == 200
        await listening(app)

        def expire_in_an_hour() -> None:  # as the admin would: a save() of the token
            token = ServiceToken.objects.get(name="reader")
            token.expires_at = timezone.now() + timedelta(hours=1)
            token.save()

        await asyncio.to_thread(expire_in_an_hour)
        saved = time.monotonic()
        later = timezone.now() + timedelta(hours=2)
        statuses = []
        while time.monotonic() - saved < 1.0:  # well before the periodic check (every 5 s)
            with time_machine.travel(later, tick=False):  # two hours on: past the new expiry
                statuses.append((await call(app, CHAT, auth(read_token)))[0])
            if statuses[-1] != 200:
                break
            await asyncio.sleep(0.01)
        now_status = (await call(app, CHAT, auth(read_token)))[0]
        return statuses, now_status

    statuses, now_status = run(body)
    assert statuses[-1] == 401, statuses  # the set holds the new expiry, checked on the clock
    assert now_status == 200  # and until then the token works


def test_token_use_is_recorded_at_most_once_a_minute_in_one_batch(read_token) -> None:
    other = make_token("other", "read")

    def last_used() -> dict[str, object]:
        return dict(ServiceToken.objects.values_list("name", "last_used_at"))

    async def body(app):
        tokens = app.snapshot.tokens
        with time_machine.travel(timezone.now(), tick=True) as traveller:
            await call(app, CHAT, auth(read_token))
            await call(app, CHAT, auth(other))
            await tokens.record_use()
            first = await asyncio.to_thread(last_used)
            traveller.shift(timedelta(seconds=30))
            for _ in range(10):
                await call(app, CHAT, auth(read_token))
            assert tokens.due_for_recording() == []  # used 30 s after its recorded use: not due
            traveller.shift(timedelta(seconds=40))
            await call(app, CHAT, auth(read_token))
            await tokens.record_use()
            second = await asyncio.to_thread(last_used)
        return first, second

    first, second = run(body)
    assert first["reader"] is not None and first["other"] is not None
    assert second["other"] == first["other"]  # not read since
    assert second["reader"] - first["reader"] >= timedelta(seconds=70)


@pytest.mark.system
def test_a_process_that_cannot_load_its_tokens_answers_503_not_a_hung_read() -> None:
    """A front started while its database is down (a closed port here) answers a read 503
    after a bounded wait, in a process of its own."""
    code = (
        "import asyncio, django\n"
        "django.setup()\n"
        "from django.core.asgi import get_asgi_application\n"
        "from read_path import front\n"
        "from tests.test_read_front import call\n"
        "front.STARTUP_WAIT_S = 0.5\n"
        "async def main():\n"
        "    app = front.ReadFront(get_asgi_application())\n"
        "    status, headers, body = await call(app, '/api/v1/chains/chat', {'Authorization': 'Bearer cpt_x'})\n"
        "    print(status, headers.get(b'retry-after'), body.decode())\n"
        "    await app.stop()\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere", "LOG_LEVEL": "CRITICAL"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    status, retry_after, body = done.stdout.strip().split(" ", 2)
    assert (status, retry_after) == ("503", "b'1'")
    assert json.loads(body)["error"]["code"] == "unavailable"
