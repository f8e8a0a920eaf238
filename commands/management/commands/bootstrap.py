"""A deployment's first start (the release step runs it after ``migrate`` every time): the
role groups, the first admin, from ADMIN_USERNAME, ADMIN_EMAIL and ADMIN_PASSWORD, and the
first key chain documents are signed with."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from commands.sign_in_box import sign_in_box
from presets import accounts, signing

VARIABLES = {"username": "ADMIN_USERNAME", "email": "ADMIN_EMAIL", "password": "ADMIN_PASSWORD"}


class Command(BaseCommand):
    help = (
        "Create the viewer and oncall groups and the first admin: a superuser named ADMIN_USERNAME "
        "(default admin) with ADMIN_EMAIL and ADMIN_PASSWORD; without ADMIN_PASSWORD a password is "
        "generated and printed once, with the sign-in URL from PUBLIC_BASE_URL. Safe on every release: "
        "an existing admin is never changed. Also makes the first signing key of the chain documents "
        "if there is none, and prints the public keys services should trust."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("ADMIN_USERNAME", "").strip() or "admin"
        password = os.environ.get("ADMIN_PASSWORD", "")
        created = accounts.ensure_role_groups()
        self.stdout.write(
            f"groups {', '.join(accounts.ROLE_GROUPS)}: " + (f"created {', '.join(created)}" if created else "exist")
        )
        try:
            admin = accounts.ensure_admin(
                username=username, email=os.environ.get("ADMIN_EMAIL", "").strip(), password=password
            )
        except accounts.AdminRefused as exc:
            raise CommandError(f"{VARIABLES[exc.field]}: {str(exc).rstrip('.')}; no admin was created") from None
        url = settings.PUBLIC_BASE_URL.rstrip("/") + str(settings.LOGIN_URL)
        if admin.generated_password:
            note = "Shown only this once: keep it, or change it after signing in."
            self.stdout.write(sign_in_box(url=url, username=username, password=admin.generated_password, note=note))
        elif admin.created:
            self.stdout.write(f"admin {username!r} created with the password in ADMIN_PASSWORD; sign in at {url}")
        else:
            unused = " (ADMIN_PASSWORD is not applied to it)" if password else ""
            self.stdout.write(f"admin {username!r} exists: left as it is, password unchanged{unused}")
            if not admin.is_superuser:
                self.stderr.write(f"warning: {username!r} is not a superuser; make it one in the admin if it should be")
        self._signing_key()

    def _signing_key(self) -> None:
        if signing.signing_key() is None:
            key = signing.create_key(actor="system:bootstrap", activate=True)
            self.stdout.write(f"signing key {key.key_id} created: chain documents are signed from now on")
        public = ", ".join(f"{key.key_id}={key.public_key}" for key in signing.trusted_keys())
        self.stdout.write(f"services verifying documents trust: {public} (manage.py signing_keys public)")
