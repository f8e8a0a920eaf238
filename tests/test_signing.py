"""Signed chain documents (issue 37): keys made, activated and retired by ``manage.py
signing_keys`` (each in the access history), every document a service reads signed by the
key that signs now (the API, the read front, a change's notification), and a new key taking
over in a running read front without waking a long poll."""

from __future__ import annotations

import asyncio
import getpass
import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.asgi import get_asgi_application
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from presets import signing
from presets.models import AccessChange, Selection, SigningKey
from presets.wire import signed_content
from read_path.front import ReadFront
from read_path.notifications import decode_payload, encode_payload
from tests.test_read_front import auth, call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("synced")]

ME = f"cli:{getpass.getuser()}"


def keys(*args: str) -> str:
    out = StringIO()
    call_command("signing_keys", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def trusted() -> dict[str, str]:
    return json.loads(keys("public", "--format", "json"))


def verify(document: dict[str, Any], public_keys: dict[str, str]) -> str:
    """The key id that signed ``document``; raises InvalidSignature or KeyError."""
    signature = document["signature"]
    public = Ed25519PublicKey.from_public_bytes(signing.decode(public_keys[signature["key_id"]]))
    public.verify(signing.decode(signature["value"]), signed_content(document))
    return signature["key_id"]


def read(token: str, path: str = "/api/v1/chains/chat") -> dict[str, Any]:
    response = Client(headers=auth(token)).get(path)
    assert response.status_code == 200
    return response.json()


def test_without_a_key_documents_are_unsigned_as_before(read_token) -> None:
    assert "signature" not in read(read_token)
    assert trusted() == {}
    assert "documents go out unsigned" in keys("list")


def test_the_first_key_signs_every_document_a_service_reads(read_token) -> None:
    out = keys("create")
    key = SigningKey.objects.get()
    assert f"created signing key {key.key_id}: signs" in out
    assert trusted() == {key.key_id: key.public_key}
    assert keys("public") == f"{key.key_id}={key.public_key}\n"

    document = read(read_token)
    assert document["signature"]["alg"] == "ed25519"
    assert verify(document, trusted()) == key.key_id
    for listed in read(read_token, "/api/v1/chains")["chains"]:
        assert verify(listed, trusted()) == key.key_id

    # A change's own answer and the notification every web process applies are signed too.
    changed = Client(headers=auth(_write_token())).post(
        "/api/v1/chains/chat/select",
        {"preset": "pin_secondary", "reason": "INC-7 vendor_a down", "expected_version": 1},
        content_type="application/json",
    )
    assert changed.status_code == 200, changed.content
    assert verify(changed.json(), trusted()) == key.key_id
    selection = Selection.objects.get(chain__name="chat")
    notified, _ = decode_payload(encode_payload(selection, epoch=0))
    assert verify(dict(notified), trusted()) == key.key_id
    assert notified["version"] == 2 and notified["reason"] == "INC-7 vendor_a down"

    created = AccessChange.objects.get(action="key_created")
    assert (created.actor, created.subject) == (ME, key.key_id)
    assert AccessChange.objects.get(action="key_activated").subject == key.key_id


TAMPERINGS = {
    "reason": lambda d: d.update(reason=d["reason"] + "!"),
    "steps-swapped": lambda d: d.update(chain=list(reversed(d["chain"]))),
    "version": lambda d: d.update(version=d["version"] + 1),
    "expiry": lambda d: d.update(expires_at="2031-01-01T00:00:00.000Z"),
    "default-dropped": lambda d: d.update(default=None),
    "signed-at": lambda d: d["signature"].update(signed_at="2020-01-01T00:00:00.000Z"),
    "field-added": lambda d: d.update(note="trust me"),
}


@pytest.mark.parametrize("tamper", TAMPERINGS.values(), ids=TAMPERINGS.keys())
def test_the_signature_covers_everything_a_service_acts_on(read_token, tamper) -> None:
    keys("create")
    document = read(read_token)
    assert len(document["chain"]) > 1
    verify(document, trusted())  # as served, it verifies
    tamper(document)
    with pytest.raises(InvalidSignature):
        verify(document, trusted())


def test_rotation_without_a_gap(read_token) -> None:
    """create (the new key waits), give services both, activate: the old key stays trusted for
    the overlap, then retires."""
    keys("create")
    old = SigningKey.objects.get()
    out = keys("create")
    new = SigningKey.objects.exclude(pk=old.pk).get()
    assert f"created signing key {new.key_id}: next" in out
    assert f"manage.py signing_keys activate {new.key_id}" in out
    assert trusted() == {old.key_id: old.public_key, new.key_id: new.public_key}
    assert verify(read(read_token), trusted()) == old.key_id  # not yet the new one

    now = timezone.now()
    with time_machine.travel(now, tick=False):
        out = keys("activate", new.key_id)
    assert f"activated signing key {new.key_id}: signs" in out
    assert verify(read(read_token), trusted()) == new.key_id
    old.refresh_from_db()
    assert old.retires_at == now + timedelta(hours=168)
    assert f"trusted until {old.retires_at:%Y-%m-%dT%H:%M:%SZ} (overlap)" in keys("list")
    with time_machine.travel(old.retires_at - timedelta(seconds=1), tick=False):
        assert set(trusted()) == {old.key_id, new.key_id}
    with time_machine.travel(old.retires_at, tick=False):
        assert set(trusted()) == {new.key_id}
        assert f"{old.key_id}  created" in keys("list") and "retired" in keys("list")

    keys("retire", old.key_id)
    assert set(trusted()) == {new.key_id}
    assert [a.action for a in AccessChange.objects.order_by("id") if a.action.startswith("key_")] == [
        "key_created",
        "key_activated",
        "key_created",
        "key_activated",
        "key_retired",
    ]


def test_key_commands_refuse_in_words_and_change_nothing() -> None:
    keys("create")
    key = SigningKey.objects.get()
    with pytest.raises(CommandError, match=f"key '{key.key_id}' signs the documents: activate another key first"):
        keys("retire", key.key_id)
    with pytest.raises(CommandError, match=f"key '{key.key_id}' already signs"):
        keys("activate", key.key_id)
    with pytest.raises(CommandError, match="no signing key 'nope' \\(manage.py signing_keys list lists them\\)"):
        keys("activate", "nope")
    keys("create", "--activate")
    keys("retire", key.key_id)
    with pytest.raises(CommandError, match="was retired; create a new key instead"):
        keys("activate", key.key_id)
    with pytest.raises(CommandError, match="was already retired at"):
        keys("retire", key.key_id)
    assert AccessChange.objects.filter(action__startswith="key_").count() == 5


def test_a_running_read_front_signs_again_with_a_new_key_without_answering_long_polls(read_token) -> None:
    keys("create")
    first = SigningKey.objects.get()
    keys("create")
    second = SigningKey.objects.exclude(pk=first.pk).get()
    public = trusted()

    async def body(app: ReadFront) -> tuple[Any, ...]:
        before = await call(app, "/api/v1/chains/chat", auth(read_token))
        held = asyncio.ensure_future(
            call(app, "/api/v1/chains/chat", auth(read_token, **{"If-None-Match": '"1"'}), query="wait=2")
        )
        await asyncio.sleep(0.2)
        await asyncio.to_thread(signing.activate_key, key_id=second.key_id, actor="test")
        await app.snapshot.catch_up()  # what every process's version check does every few seconds
        after = await call(app, "/api/v1/chains/chat", auth(read_token))
        return before, after, held.done(), await held

    before, after, done_at_once, held = asyncio.run(_with_front(body))
    assert verify(json.loads(before[2]), public) == first.key_id
    assert verify(json.loads(after[2]), public) == second.key_id
    assert before[1][b"etag"] == after[1][b"etag"] == b'"1"'  # the same version, signed again
    assert not done_at_once and held[0] == 304  # the held poll was not answered for it


async def _with_front(body: Any) -> Any:
    app = ReadFront(get_asgi_application())
    try:
        await app.snapshot.start()
        return await body(app)
    finally:
        await app.stop()


def _write_token() -> str:
    from presets.service_tokens import create_token

    return create_token(name="deployer", scope="write", actor="test").raw


def test_bootstrap_makes_the_first_key_once_and_prints_what_to_trust() -> None:
    out = StringIO()
    call_command("bootstrap", stdout=out, stderr=StringIO())
    key = SigningKey.objects.get()
    assert f"signing key {key.key_id} created: chain documents are signed from now on" in out.getvalue()
    assert f"services verifying documents trust: {key.key_id}={key.public_key}" in out.getvalue()
    again = StringIO()
    call_command("bootstrap", stdout=again, stderr=StringIO())
    assert SigningKey.objects.count() == 1 and "created" not in again.getvalue().split("signing")[-1]
    assert AccessChange.objects.get(action="key_created").actor == "system:bootstrap"
