"""Token commands (create_token with an expiry, list_tokens, revoke_token) and token expiry:
an expired token is refused by the API and by the read front, cached or not; each creation
and revocation is in the access history with who did it."""

from __future__ import annotations

import asyncio
import getpass
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.asgi import get_asgi_application
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from presets.models import AccessChange, ServiceToken, hash_token
from read_path.front import ReadFront
from tests.test_read_front import auth, call

pytestmark = pytest.mark.usefixtures("synced")

NOON = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
ME = f"cli:{getpass.getuser()}"


def create(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_token", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def read_chat(raw: str) -> int:
    return Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/v1/chains/chat").status_code


def test_a_token_made_to_expire_works_until_then_and_is_refused_after() -> None:
    with time_machine.travel(NOON, tick=False):
        raw, err = create("nightly-report", "--expires-in", "7")
        assert "expiring at 2030-01-08T12:00:00Z; it is shown only this once" in err
        token = ServiceToken.objects.get(name="nightly-report")
        assert token.expires_at == NOON + timedelta(days=7)
        assert token.token_hash == hash_token(raw)
    with time_machine.travel(NOON + timedelta(days=7) - timedelta(seconds=1), tick=False):
        assert read_chat(raw) == 200
    with time_machine.travel(NOON + timedelta(days=7), tick=False):
        refused = Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/v1/chains/chat")
        assert refused.status_code == 401
        assert "expired" in refused.json()["error"]["message"]


def test_a_token_may_expire_at_a_time() -> None:
    with time_machine.travel(NOON, tick=False):
        create("quarterly", "--scope", "write", "--expires-at", "2030-03-31T00:00:00Z")
    token = ServiceToken.objects.get(name="quarterly")
    assert (token.scope, token.expires_at) == ("write", datetime(2030, 3, 31, tzinfo=UTC))


@pytest.mark.parametrize(
    "args,message",
    [
        (["x", "--expires-in", "0"], "--expires-in: must be at least 1"),
        (["x", "--expires-in", "a week"], "--expires-in: 'a week' is not a whole number"),
        (["x", "--expires-in", "99999"], "--expires-in: must be at most 3660"),
        (["x", "--expires-at", "2029-12-31T00:00:00Z"], "--expires-at: Mon 31 Dec 2029 00:00 UTC (36 h ago) is not"),
        (["x", "--expires-at", "2030-02-01T00:00"], "--expires-at: '2030-02-01T00:00' needs a time zone"),
        (["x", "--expires-at", "soon"], "--expires-at: 'soon' is not an ISO 8601 time"),
        (["x", "--expires-in", "1", "--expires-at", "2030-02-01T00:00Z"], "give one of them, not both"),
        (["not a slug!"], "NAME: 'not a slug!': token names are slugs"),
    ],
    ids=["zero-days", "not-a-number", "ten-years", "past", "naive", "not-a-time", "both", "bad-name"],
)
def test_create_token_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    with time_machine.travel(NOON, tick=False), pytest.raises(CommandError) as refused:
        call_command("create_token", *args)
    assert message in str(refused.value)
    assert not ServiceToken.objects.exists()
    assert not AccessChange.objects.filter(action="token_created").exists()


def test_list_tokens_shows_each_tokens_state_and_never_its_secret() -> None:
    with time_machine.travel(NOON, tick=False):
        kept, _ = create("checkout", "--scope", "write")
        short, _ = create("trial", "--expires-in", "1")
        gone, _ = create("old-etl")
        run("revoke_token", "old-etl")
        assert read_chat(kept) == 200
    with time_machine.travel(NOON + timedelta(days=2), tick=False):
        listing = json.loads(run("list_tokens", "--json"))["tokens"]
        text = run("list_tokens")
    assert {token["name"]: token["state"] for token in listing} == {
        "checkout": "active",
        "old-etl": "revoked",
        "trial": "expired",
    }
    checkout = next(token for token in listing if token["name"] == "checkout")
    assert checkout == {
        "name": "checkout",
        "purpose": "write",
        "scope": "write",
        "state": "active",
        "created_at": "2030-01-01T12:00:00Z",
        "expires_at": None,
        "last_used_at": "2030-01-01T12:00:00Z",
        "revoked_at": None,
        "reports": True,
        "sole_evidence": False,
        "environment": "production",
        "chains": "all",
    }
    assert text.splitlines()[0].split() == [
        "name",
        "purpose",
        "environment",
        "chains",
        "state",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "reports",
        "sole_evidence",
    ]
    assert text.splitlines()[3].split()[:7] == [
        "trial",
        "read",
        "production",
        "all",
        "expired",
        "2030-01-01T12:00:00Z",
        "2030-01-02T12:00:00Z",
    ]
    for secret in (kept, short, gone):
        assert secret not in text and secret not in json.dumps(listing)
        assert hash_token(secret) not in text and hash_token(secret) not in json.dumps(listing)


def test_revoke_token_refuses_it_at_once_and_is_recorded_with_its_actor() -> None:
    raw, _ = create("checkout", "--scope", "write")
    assert read_chat(raw) == 200
    assert run("revoke_token", "checkout", "--actor", "cli:incident-bot").startswith("revoked token 'checkout' (write)")
    assert read_chat(raw) == 401
    rows = list(AccessChange.objects.order_by("id").values_list("actor", "action", "subject", "details"))
    assert rows == [
        (
            ME,
            "token_created",
            "checkout",
            {
                "purpose": "write",
                "reports": True,
                "sole_evidence": False,
                "expires_at": None,
                "environment": "production",
                "chains": [],
            },
        ),
        ("cli:incident-bot", "token_revoked", "checkout", {"purpose": "write"}),
    ]
    with pytest.raises(CommandError, match="^NAME: token 'checkout' was already revoked at "):
        call_command("revoke_token", "checkout")
    with pytest.raises(CommandError, match=r"^no token named 'nope' \(manage.py list_tokens lists them\)$"):
        call_command("revoke_token", "nope")
    assert AccessChange.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_read_front_refuses_a_token_at_its_expiry_even_while_it_is_cached() -> None:
    token = ServiceToken(name="short-lived", expires_at=timezone.now() + timedelta(minutes=1))
    raw = token.issue()
    token.save()

    async def body(app: ReadFront) -> tuple[int, int]:
        first = await call(app, "/api/v1/chains/chat", auth(raw))
        # The front caches the token's answer for seconds (monotonic time, not travelled);
        # the expiry is wall-clock time, which the cached answer must still respect.
        with time_machine.travel(timezone.now() + timedelta(minutes=2), tick=True):
            later = await call(app, "/api/v1/chains/chat", auth(raw))
        return first[0], later[0]

    async def main() -> tuple[int, int]:
        app = ReadFront(get_asgi_application())
        try:
            return await body(app)
        finally:
            await app.stop()

    # A thread of its own: a browser test earlier in the session leaves Playwright's event
    # loop running in this one.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, main()).result() == (200, 401)
