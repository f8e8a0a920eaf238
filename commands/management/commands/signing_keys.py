"""The keys chain documents are signed with: create, activate, retire, list, reseal, and print
the public keys services should trust (each change recorded in the access history)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from commands.operations import actor_from, add_actor_argument, run
from presets import key_sealing, signing
from presets.documents import format_time
from presets.models import SigningKey


class Command(BaseCommand):
    help = (
        "Signing keys of the chain documents. Rotation without a gap: create (a later key waits), "
        "give services the keys from 'public', activate the new key, and the old one stays "
        "trusted for SIGNING_KEY_OVERLAP_HOURS. Private keys are sealed with SIGNING_KEYS_SECRET (or a key "
        "derived from SECRET_KEY); after changing it, 'reseal' seals them with the new one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser("create", help="add a key; the first one signs at once, a later one once activated")
        create.add_argument(
            "--activate",
            action="store_true",
            help="sign with it at once (services that do not trust it yet refuse documents until they do)",
        )
        add_actor_argument(create)
        activate = actions.add_parser("activate", help="sign with KEY_ID from now on; the key it replaces overlaps")
        activate.add_argument("key_id")
        add_actor_argument(activate)
        retire = actions.add_parser("retire", help="stop listing KEY_ID as trusted now")
        retire.add_argument("key_id")
        add_actor_argument(retire)
        actions.add_parser("list", help="every key, its state, and where its private half is kept")
        reseal = actions.add_parser(
            "reseal",
            help="seal every private key with this process's SIGNING_KEYS_SECRET (or SECRET_KEY's key), "
            "opening each with the secret it was sealed with (list old ones in SIGNING_KEYS_SECRET_FALLBACKS)",
        )
        add_actor_argument(reseal)
        public = actions.add_parser("public", help="the public keys services should trust now, by key id")
        public.add_argument(
            "--format",
            choices=["env", "json"],
            default="env",
            help="KEY_ID=PUBLIC_KEY lines (default) or one JSON object, as ChainClient(trusted_keys=...) takes it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list()
        elif action == "public":
            keys = {key.key_id: key.public_key for key in signing.trusted_keys()}
            if options["format"] == "json":
                self.stdout.write(json.dumps(keys))
            else:
                for key_id, public in keys.items():
                    self.stdout.write(f"{key_id}={public}")
            if not keys:
                self.stderr.write("no signing key yet: manage.py signing_keys create makes the first one")
        elif action == "create":
            actor = actor_from(options)
            key = run(lambda: signing.create_key(actor=actor, activate=options["activate"]))
            self._done(f"created signing key {key.key_id}", key)
        elif action == "reseal":
            actor = actor_from(options)
            try:
                done = signing.reseal_keys(actor=actor)
            except key_sealing.SealedKeyError as exc:
                raise CommandError(f"nothing resealed: {exc}") from None
            current = key_sealing.sealing_key()
            for item in done:
                if item.resealed:
                    self.stdout.write(f"{item.key.key_id}: resealed with {current} (was {item.was})")
                elif item.key.sealed_with == current.fingerprint:
                    self.stdout.write(f"{item.key.key_id}: already sealed with {current}")
                else:
                    self.stdout.write(f"{item.key.key_id}: retired, left sealed with {item.was}")
            if not done:
                self.stdout.write("no signing key yet: nothing to reseal")
        elif action == "activate":
            actor = actor_from(options)
            key = run(lambda: signing.activate_key(key_id=options["key_id"], actor=actor), names={"key_id": "KEY_ID"})
            self._done(f"activated signing key {key.key_id}", key)
        else:
            actor = actor_from(options)
            key = run(lambda: signing.retire_key(key_id=options["key_id"], actor=actor), names={"key_id": "KEY_ID"})
            self._done(f"retired signing key {key.key_id}", key)

    def _done(self, what: str, key: SigningKey) -> None:
        key.refresh_from_db()
        state = signing.state_of(key, now=timezone.now(), signing=signing.signing_key())
        self.stdout.write(f"{what}: {state}")
        if state.startswith("next"):
            self.stdout.write(
                "give services the keys from 'manage.py signing_keys public', then "
                f"'manage.py signing_keys activate {key.key_id}'"
            )
        self.stdout.write(f"public key: {key.public_key}")

    def _list(self) -> None:
        now = timezone.now()
        signing_key = signing.signing_key()
        keys = list(SigningKey.objects.all())
        if not keys:
            self.stdout.write("no signing key yet: documents go out unsigned (manage.py signing_keys create)")
            return
        for key in keys:
            state = signing.state_of(key, now=now, signing=signing_key)
            where = key_sealing.where_sealed(key.sealed_with)
            self.stdout.write(
                f"{key.key_id}  created {format_time(key.created_at)}  {state}  {key.public_key}  {where}"
            )
