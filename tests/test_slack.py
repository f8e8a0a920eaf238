"""Acting from Slack (docs/on-call.md, "Acting from Slack"), against a local fake Slack: requests
signed and built as Slack builds them (interactivity's form-encoded ``payload``, the slash
command's form fields), the Web API (``views.open``, ``chat.update``, ``users.info``) and a
``response_url`` answered by a local server. A button opens the action's review in a modal;
submitting it changes the chain as the Slack user's account (``slack:<username>``), updates the
message, then the fleet's progress; refusals change nothing."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from audit import actions, slack
from audit.models import FleetInstance
from presets import services
from presets.access_history import link_identity
from presets.models import AccessChange, Chain, Selection, SignInIdentity

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM, ALICE, BOB, CAROL = "T024BE7LD", "U0ALICE", "U0BOB", "U0CAROL"
REASON = "INC-7 vendor_a returns garbage"


class FakeSlack:
    """Slack's Web API and an interaction's response_url on 127.0.0.1: records every call
    (method, JSON body or query) and answers ok (``users`` says what users.info knows)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.bot_channels = {"C1"}  # where the app's bot is a member (may post)
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                method, sent = urlsplit(self.path).path.rsplit("/", 1)[1], json.loads(body)
                fake.calls.append((method, sent))
                if method == "chat.postMessage" and sent.get("channel") in fake.bot_channels:
                    self.answer({"ok": True, "channel": sent["channel"], "ts": "1700000009.000900"})
                elif method == "chat.postMessage":
                    self.answer({"ok": False, "error": "not_in_channel"})
                else:
                    self.answer({"ok": True})

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                fake.calls.append((url.path.rsplit("/", 1)[1], query))
                user = fake.users.get(query.get("user", ""))
                self.answer({"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"})

            def answer(self, document: dict[str, Any]) -> None:
                raw = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def of(self, method: str) -> list[dict[str, Any]]:
        return [body for name, body in self.calls if name == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(settings: Any, synced: None) -> Iterator[FakeSlack]:
    slack_app = FakeSlack()
    settings.SLACK_SIGNING_SECRET = SECRET
    settings.SLACK_BOT_TOKEN = "xoxb-test"
    settings.SLACK_API_URL = slack_app.base + "/api/"
    cache.clear()
    yield slack_app
    slack_app.close()


@pytest.fixture
def linked(alice: User, bob: User) -> None:
    """alice (on-call) and bob (viewer) linked by an admin, as docs/on-call.md says to."""
    call_command("slack_link", "alice", "--team", TEAM, "--slack-user", ALICE, "--actor", "admin")
    call_command("slack_link", "bob", "--team", TEAM, "--slack-user", BOB, "--actor", "admin")


def signed(body: str, *, at: float | None = None, secret: str = SECRET) -> dict[str, str]:
    """The headers Slack sends with ``body``."""
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": f"v0={digest}"}


def send(path: str, fields: dict[str, str], **signing: Any) -> Any:
    body = urlencode(fields)
    return Client().post(path, body, content_type="application/x-www-form-urlencoded", **signed(body, **signing))


def interact(payload: dict[str, Any], **signing: Any) -> Any:
    return send("/slack/actions", {"payload": json.dumps(payload)}, **signing)


PRESSES = iter(range(10**6))


def press(fake: FakeSlack, action: actions.Action, user: str = ALICE) -> Any:
    """Press the button Slack shows for ``action`` under the message C1/1700000000.000100
    (each press its own trigger, as Slack gives it)."""
    answer = interact(
        {
            "type": "block_actions",
            "user": {"id": user, "team_id": TEAM},
            "team": {"id": TEAM},
            "trigger_id": f"13345224609.738474920.{next(PRESSES)}",
            "response_url": fake.base + "/respond/1",
            "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C1"},
            "channel": {"id": "C1"},
            "actions": [
                {
                    "type": "button",
                    "action_id": f"act.{action.kind}",
                    "block_id": "controlplane.actions",
                    "value": json.dumps(action.to_value()),
                }
            ],
        }
    )
    assert answer.status_code == 200, answer.content
    return answer


def submit(view: dict[str, Any], reason: str = REASON, user: str = ALICE) -> Any:
    """Submit the modal ``view`` (as views.open got it) with ``reason`` typed."""
    return interact(
        {
            "type": "view_submission",
            "user": {"id": user, "team_id": TEAM},
            "team": {"id": TEAM},
            "view": {
                "callback_id": view["callback_id"],
                "private_metadata": view["private_metadata"],
                "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}},
            },
        }
    )


def command(text: str, user: str = ALICE, **signing: Any) -> Any:
    fields = {
        "team_id": TEAM,
        "user_id": user,
        "command": "/chains",
        "text": text,
        "response_url": "http://127.0.0.1:9/unused",
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "channel_id": "C1",
    }
    return send("/slack/commands", fields, **signing)


def live() -> Selection:
    return services.revert_expired_and_read(chain="chat")


def now_at() -> int:
    return int(timezone.now().timestamp())


def modal_text(view: dict[str, Any]) -> str:
    return view["blocks"][0]["text"]["text"]


def pinned() -> Selection:
    return services.select_preset(chain="chat", preset="pin_secondary", actor="alice", reason=REASON)


# --- the buttons ---------------------------------------------------------------------------------------


def test_pin_from_the_button_through_the_modal_changes_the_chain_as_the_slack_user(fake, linked) -> None:
    action = actions.Action(
        "pin", "chat", 1, preset="pin_secondary", minutes=240, reason="vendor_a failing", at=now_at()
    )
    assert press(fake, action).status_code == 200
    [opened] = fake.of("views.open")
    view = opened["view"]
    assert opened["trigger_id"].startswith("13345224609.738474920.")
    text = modal_text(view)
    assert "*chat* now: v1 normal → *pin_secondary*" in text
    assert "New head: vendor_b/large" in text
    assert "• vendor_b/large: no reports in the last hour" in text
    assert view["blocks"][1]["element"]["initial_value"] == "vendor_a failing"
    assert live().version == 1  # the modal changed nothing

    assert submit(view).status_code == 200
    selection = live()
    assert (selection.version, selection.preset.name, selection.updated_by) == (2, "pin_secondary", "slack:alice")
    assert selection.reason == REASON
    [update] = fake.of("chat.update")
    assert (update["channel"], update["ts"], update["blocks"]) == ("C1", "1700000000.000100", [])
    assert update["text"].startswith(":white_check_mark: alice pinned pin_secondary on chat until ")
    assert update["text"].endswith(f"(v2) from Slack: {REASON}")


def test_extend_and_revert_from_the_buttons(fake, linked) -> None:
    pin = pinned()
    extend, revert = actions.pinned_actions("chat", pin.version, at=now_at(), why="after a pin")
    press(fake, extend)
    assert submit(fake.of("views.open")[-1]["view"], "INC-7 still open").status_code == 200
    selection = live()
    assert (selection.version, selection.action, selection.updated_by) == (3, "extend", "slack:alice")
    assert selection.expires_at == pin.expires_at + timedelta(hours=1)

    revert = actions.Action("revert", "chat", 3, reason="Reverted after a pin", at=now_at())
    press(fake, revert)
    assert "*chat* now: v3 pin_secondary → *normal*" in modal_text(fake.of("views.open")[-1]["view"])
    assert submit(fake.of("views.open")[-1]["view"], "INC-7 fixed").status_code == 200
    assert (live().version, live().is_default, live().updated_by) == (4, True, "slack:alice")
    history = [(s.version, s.updated_by) for s in Selection.history.filter(chain__name="chat").order_by("version")]
    assert history[-3:] == [(2, "alice"), (3, "slack:alice"), (4, "slack:alice")]


def test_a_stale_version_is_refused_in_slack_s_words_and_nothing_changes(fake, linked) -> None:
    action = actions.Action("pin", "chat", 1, preset="pin_secondary", minutes=240, reason="x", at=now_at())
    press(fake, action)
    view = fake.of("views.open")[-1]["view"]
    services.select_preset(chain="chat", preset="drop_vendor_b", actor="bob", reason="INC-8")  # meanwhile
    answer = submit(view)
    assert answer.status_code == 200  # Slack shows errors only on a 200
    body = answer.json()
    assert body["response_action"] == "errors"
    assert body["errors"]["reason"].startswith(
        "chat changed since this was suggested: now v2, select of drop_vendor_b by bob"
    )
    assert body["errors"]["reason"].endswith("Close this and act on what is live now.")
    assert (live().version, live().updated_by) == (2, "bob")
    assert fake.of("chat.update") == []
    # A button pressed on an old message is refused before any modal opens.
    press(fake, action)
    [told] = fake.of("1")
    assert told["response_type"] == "ephemeral" and "changed since this was suggested" in told["text"]
    assert len(fake.of("views.open")) == 1


def test_a_viewer_is_refused_and_nothing_changes(fake, linked) -> None:
    action = actions.Action("pin", "chat", 1, preset="pin_secondary", minutes=240, reason="x", at=now_at())
    press(fake, action, user=BOB)
    [told] = fake.of("1")
    assert told["text"] == ("Changing a chain needs the oncall role; bob does not have it, so nothing was changed.")
    assert fake.of("views.open") == []
    # Nor can a modal opened by someone else be submitted by bob.
    press(fake, action)
    body = submit(fake.of("views.open")[-1]["view"], user=BOB).json()
    assert "needs the oncall role" in body["errors"]["reason"]
    assert live().version == 1


def test_an_unmapped_user_is_refused_and_nothing_changes(fake, linked) -> None:
    action = actions.Action("revert", "chat", 2, at=now_at())
    pinned()
    press(fake, action, user="U0STRANGER")
    [told] = fake.of("1")
    assert told["text"].startswith("Your Slack account is not linked to a control-plane user, so nothing was changed.")
    assert "manage.py slack_link <username> --team T024BE7LD --slack-user U0STRANGER" in told["text"]
    assert fake.of("views.open") == []
    assert live().version == 2


def test_a_user_is_mapped_by_the_email_single_sign_on_gave_them(fake, settings, db) -> None:
    settings.OIDC_ISSUER = "https://sso.example.com"
    carol = User.objects.create_user("carol", email="carol@example.com")
    carol.groups.add(Group.objects.get_or_create(name="oncall")[0])
    link_identity(
        user=carol, issuer="https://sso.example.com", subject="sso-carol", actor="system", how="first sign-in"
    )
    fake.users[CAROL] = {"id": CAROL, "is_email_confirmed": True, "profile": {"email": "Carol@Example.com"}}
    # Someone with the same email but no sign-on is nobody's match: dave is never acted as.
    User.objects.create_user("dave", email="dave@example.com")
    fake.users["U0DAVE"] = {"id": "U0DAVE", "is_email_confirmed": True, "profile": {"email": "dave@example.com"}}

    assert command("revert chat", user="U0DAVE").json()["text"].startswith("Your Slack account is not linked")
    action = actions.Action("pin", "chat", 1, preset="pin_secondary", minutes=60, reason="x", at=now_at())
    press(fake, action, user=CAROL)
    assert submit(fake.of("views.open")[-1]["view"], user=CAROL).status_code == 200
    assert live().updated_by == "slack:carol"
    identity = SignInIdentity.objects.get(issuer=f"https://slack.com/team/{TEAM}", subject=CAROL)
    assert identity.user == carol
    link = AccessChange.objects.filter(subject="carol").order_by("-pk").first()
    assert link is not None and link.details["how"] == "slack email" and link.actor == "system:slack"


# --- signatures and replays ---------------------------------------------------------------------------


def test_a_bad_signature_an_old_request_and_the_same_request_twice_are_refused(fake, linked) -> None:
    pinned()
    action = actions.Action("revert", "chat", 2, at=now_at())
    payload = {
        "payload": json.dumps(
            {
                "type": "block_actions",
                "user": {"id": ALICE, "team_id": TEAM},
                "actions": [{"action_id": "act.revert", "value": json.dumps(action.to_value())}],
                "trigger_id": "t",
            }
        )
    }
    bad = send("/slack/actions", payload, secret="not-the-secret")
    assert (bad.status_code, bad.content) == (401, b"refused: the signature does not match this app's signing secret")
    old = send("/slack/actions", payload, at=time.time() - 301)
    assert old.status_code == 401 and b"more than 5 minutes old" in old.content
    unsigned = Client().post("/slack/actions", payload)
    assert unsigned.status_code == 401
    assert fake.of("views.open") == []

    body = urlencode(payload)
    headers = signed(body)
    first = Client().post("/slack/actions", body, content_type="application/x-www-form-urlencoded", **headers)
    again = Client().post("/slack/actions", body, content_type="application/x-www-form-urlencoded", **headers)
    assert (first.status_code, again.status_code) == (200, 401)
    assert again.content == b"refused: this request was received already (a replay)"
    assert len(fake.of("views.open")) == 1
    assert live().version == 2


def test_without_the_slack_app_the_endpoints_are_not_there(settings, db) -> None:
    settings.SLACK_SIGNING_SECRET = ""
    assert Client().post("/slack/actions", {"payload": "{}"}).status_code == 404
    assert Client().post("/slack/commands", {"text": "help"}).status_code == 404


# --- the /chains command ----------------------------------------------------------------------------------


def test_slash_status_says_what_the_chain_serves_its_steps_and_the_fleet(fake, linked) -> None:
    pinned()
    answer = command("status chat", user=BOB).json()  # a viewer may look
    assert answer["response_type"] == "ephemeral"
    lines = answer["text"].split("\n")
    assert lines[0].startswith("*chat* v2: pinned to *pin_secondary* until ")
    assert lines[1].startswith("select by alice at ") and lines[1].endswith(REASON)
    assert "• vendor_b/large: no reports in the last hour" in lines
    assert lines[-1].startswith("Fleet: ")
    assert command("status nope").json()["text"].startswith("There is no chain named nope")
    assert "`/chains status <chain>`" in command("").json()["text"]
    assert command("launch chat").json()["text"].startswith("`/chains launch chat` is not a command I know.")


def test_slash_pin_opens_the_same_review_and_submitting_it_pins(fake, linked) -> None:
    assert command("pin chat pin_secondary 60").status_code == 200
    view = fake.of("views.open")[-1]["view"]
    assert "*chat* now: v1 normal → *pin_secondary*" in modal_text(view)
    assert submit(view, "INC-9").status_code == 200
    selection = live()
    assert (selection.updated_by, selection.reason) == ("slack:alice", "INC-9")
    assert timedelta(minutes=59) < selection.expires_at - timezone.now() <= timedelta(minutes=60)
    # Said in the channel the command was typed in, by the bot: that message is followed.
    [posted] = fake.of("chat.postMessage")
    assert posted["channel"] == "C1" and posted["text"].startswith(":white_check_mark: alice pinned pin_secondary")
    assert command("pin chat").json()["text"] == "Name the preset to pin: `/chains pin chat <preset> [minutes]`."
    # The services' words, as the pages and the command line say them.
    assert command("pin chat nope").json()["text"] == (
        "Nothing can be done: 'nope' does not exist on chat: use one of drop_vendor_b, local_only, normal, "
        "pin_secondary."
    )
    assert command("pin chat drop_vendor_b 0").json()["text"] == "Nothing can be done: the minutes must be positive."
    too_long = command("pin chat drop_vendor_b 99999").json()["text"]
    assert too_long.startswith("Nothing can be done: 99999 minutes is longer than the maximum pin of ")
    assert "needs the oncall role" in command("revert chat", user=BOB).json()["text"]


def test_a_slash_change_is_followed_in_its_channel_or_said_through_response_url_where_the_bot_cannot_post(
    fake, linked, monkeypatch
) -> None:
    queued: list[slack.Followed] = []
    monkeypatch.setattr(slack, "queue_follow", queued.append)  # the broker's side is the worker test's
    command("pin chat pin_secondary 60")
    submit(fake.of("views.open")[-1]["view"], "INC-9")
    [followed] = queued
    assert (followed.channel, followed.ts, followed.chain, followed.version) == ("C1", "1700000009.000900", "chat", 2)
    assert slack.follow(followed) is None  # no instance polls chat here: said at once
    assert fake.of("chat.update")[-1]["text"].endswith(":satellite: no instance polls chat now")

    fake.bot_channels.clear()  # the bot is not in the channel: the command's response_url answers
    command("revert chat")
    submit(fake.of("views.open")[-1]["view"], "INC-9 fixed")
    assert len(queued) == 1 and live().version == 3
    assert fake.of("chat.postMessage")[-1]["channel"] == "C1"


# --- the fleet's progress ------------------------------------------------------------------------------------


def test_the_message_is_updated_with_the_fleet_s_progress_until_every_instance_has_the_change(fake, linked) -> None:
    from worker.tasks import follow_slack_convergence

    chain = Chain.objects.get(name="chat")
    start = timezone.now()
    for n in range(3):
        FleetInstance.objects.create(
            chain=chain,
            client=f"svc/{n}",
            applied_version=1,
            version_seen_at=start,
            first_seen_at=start,
            last_seen_at=start,
        )
    selection = pinned()
    body = {
        "channel": "C1",
        "ts": "1.2",
        "text": "done",
        "chain": "chat",
        "version": 2,
        "since": selection.updated_at.isoformat(),
    }
    # Two of three have it: not yet; the task looks again in a moment.
    FleetInstance.objects.filter(client__in=["svc/0", "svc/1"]).update(
        applied_version=2,
        version_seen_at=selection.updated_at + timedelta(milliseconds=400),
        last_seen_at=timezone.now(),
    )
    assert slack.follow(slack.followed_from(body)) == slack.FOLLOW_EVERY_SECONDS
    assert fake.of("chat.update") == []
    FleetInstance.objects.filter(client="svc/2").update(
        applied_version=2,
        version_seen_at=selection.updated_at + timedelta(milliseconds=300),
        last_seen_at=timezone.now(),
    )
    follow_slack_convergence(**body)  # the task, as the worker runs it
    [update] = fake.of("chat.update")
    assert update == {
        "channel": "C1",
        "ts": "1.2",
        "text": "done\n:satellite: 3 of 3 instances on v2 in 0.4 s",
        "blocks": [],
    }


def test_following_stops_after_two_minutes_saying_how_far_the_fleet_got(fake, linked) -> None:
    chain = Chain.objects.get(name="chat")
    selection = pinned()
    FleetInstance.objects.create(
        chain=chain,
        client="svc/late",
        applied_version=1,
        version_seen_at=timezone.now(),
        first_seen_at=timezone.now(),
        last_seen_at=timezone.now(),
    )
    followed = slack.Followed("C1", "1.2", "done", "chat", 2, selection.updated_at)
    with time_machine.travel(selection.updated_at + timedelta(minutes=2, seconds=1), tick=False):
        FleetInstance.objects.update(last_seen_at=timezone.now())
        assert slack.follow(followed) is None
    [update] = fake.of("chat.update")
    assert update["text"] == "done\n:satellite: 0 of 1 instances on v2 after 121 s"


def test_the_documented_app_manifest_parses_and_points_at_these_endpoints() -> None:
    import re
    from pathlib import Path

    import yaml
    from django.conf import settings as django_settings
    from django.urls import resolve

    on_call = (Path(django_settings.BASE_DIR) / "docs" / "on-call.md").read_text()
    section = on_call[on_call.index("### Acting from Slack") :]
    manifest = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))
    interactivity = urlsplit(manifest["settings"]["interactivity"]["request_url"]).path
    [chains] = manifest["features"]["slash_commands"]
    assert (resolve(interactivity).url_name, chains["command"]) == ("slack-actions", "/chains")
    assert resolve(urlsplit(chains["url"]).path).url_name == "slack-commands"
    assert {"chat:write", "commands", "users:read", "users:read.email"} <= set(
        manifest["oauth_config"]["scopes"]["bot"]
    )


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        json.dumps({"type": "block_actions", "actions": ["act.pin"]}),
        json.dumps({"type": "view_submission", "view": "x"}),
        json.dumps(
            {
                "type": "view_submission",
                "view": {
                    "callback_id": "controlplane.act",
                    "private_metadata": json.dumps({"action": {"kind": "revert", "chain": "chat", "version": 1}}),
                    "state": {"values": [1]},
                },
            }
        ),
    ],
)
def test_a_signed_payload_of_the_wrong_shape_is_a_400_and_changes_nothing(fake, linked, payload: str) -> None:
    answer = send("/slack/actions", {"payload": payload})
    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/plain")
    assert live().version == 1


# --- what went away between the modal opening and its submission ------------------------------------


def _delete_chain(name: str) -> None:
    """The chain gone from the database, with everything that points at it."""
    from presets.models import Preset

    Selection.objects.filter(chain__name=name).delete()
    Chain.objects.filter(name=name).update(default_preset=None)
    Preset.objects.filter(chain__name=name).delete()
    Chain.objects.filter(name=name).delete()


def _opened(fake: FakeSlack, action: actions.Action) -> dict[str, Any]:
    press(fake, action)
    return fake.of("views.open")[-1]["view"]


def _refused(answer: Any) -> str:
    """The submission's refusal: Slack's errors shape on a 200 (the modal stays open)."""
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["response_action"] == "errors"
    return body["errors"]["reason"]


@pytest.mark.parametrize("kind", ["pin", "extend", "revert"])
def test_a_modal_submitted_for_a_chain_deleted_meanwhile_is_refused_in_the_modal(fake, linked, kind) -> None:
    version = 1 if kind == "pin" else pinned().version
    preset = "drop_vendor_b" if kind == "pin" else ""
    action = actions.Action(kind, "chat", version, preset=preset, minutes=0 if kind == "revert" else 60, at=now_at())
    view = _opened(fake, action)
    _delete_chain("chat")
    text = _refused(submit(view))
    assert text.startswith("There is no chain named chat")
    assert not Chain.objects.filter(name="chat").exists()
    assert fake.of("chat.update") == [] and fake.of("chat.postMessage") == []
    # A button or a command for it now answers in Slack's words too, and opens nothing.
    press(fake, action)
    assert fake.of("1")[-1]["text"].startswith("There is no chain named chat")
    answer = command(f"{kind} chat drop_vendor_b" if kind == "pin" else f"{kind} chat")
    assert answer.status_code == 200 and answer.json()["text"].startswith("There is no chain named chat")
    assert command("status chat").json()["text"].startswith("There is no chain named chat")
    assert len(fake.of("views.open")) == 1


@pytest.mark.parametrize("gone", ["retired", "deleted"])
def test_a_modal_submitted_for_a_preset_gone_meanwhile_is_refused_in_the_modal(fake, linked, gone) -> None:
    from presets.models import Preset

    action = actions.Action("pin", "chat", 1, preset="drop_vendor_b", minutes=60, at=now_at())
    view = _opened(fake, action)
    presets = Preset.objects.filter(chain__name="chat", name="drop_vendor_b")
    if gone == "retired":
        presets.update(retired_at=timezone.now())
    else:
        presets.delete()
    text = _refused(submit(view))
    state = "is retired" if gone == "retired" else "does not exist"
    assert text.startswith(f"Nothing was changed: 'drop_vendor_b' {state} on chat: use one of ")
    assert (live().version, live().preset.name) == (1, "normal")
    assert fake.of("chat.update") == []
    press(fake, action)
    refused = f"Nothing can be done: 'drop_vendor_b' {state} on chat: use one of "
    assert fake.of("1")[-1]["text"].startswith(refused)
    assert command("pin chat drop_vendor_b").json()["text"].startswith(refused)
    assert len(fake.of("views.open")) == 1


@pytest.mark.parametrize("gone", ["deleted", "deactivated"])
def test_a_modal_submitted_by_a_user_gone_meanwhile_is_refused_in_the_modal(fake, linked, alice, gone) -> None:
    action = actions.Action("pin", "chat", 1, preset="pin_secondary", minutes=60, at=now_at())
    view = _opened(fake, action)
    if gone == "deleted":
        alice.delete()
    else:
        alice.is_active = False
        alice.save(update_fields=["is_active"])
    text = _refused(submit(view))
    assert text.startswith("Your Slack account is not linked to a control-plane user, so nothing was changed.")
    assert live().version == 1
    assert fake.of("chat.update") == []
    press(fake, action)
    assert fake.of("1")[-1]["text"].startswith("Your Slack account is not linked")
    assert command("pin chat pin_secondary").json()["text"].startswith("Your Slack account is not linked")
    assert command("status chat").json()["text"].startswith("Your Slack account is not linked")
    assert len(fake.of("views.open")) == 1
