"""The local superuser 'admin' for `make run`, and how to sign in (controlplane/run_local.py
runs this once the web process answers and the worker is ready, so the box is the last
thing on the screen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from commands.sign_in_box import sign_in_box
from presets import accounts

USERNAME = "admin"


class Command(BaseCommand):
    help = (
        "Create the local admin (its generated password kept in VAR_DIR/admin-password.txt) and print how to sign in."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default=None, help="where to sign in (default: PUBLIC_BASE_URL)")

    def handle(self, *args: Any, **options: Any) -> None:
        password_file = Path(settings.VAR_DIR) / "admin-password.txt"
        kept = password_file.read_text().strip() if password_file.exists() else ""
        try:
            admin = accounts.ensure_admin(username=USERNAME, email="admin@localhost", password=kept)
        except accounts.AdminRefused as exc:
            raise CommandError(f"{password_file}: {exc}; delete the file to get a new password") from None
        if admin.generated_password:
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(admin.generated_password + "\n")
            password_file.chmod(0o600)
            kept = admin.generated_password
        if kept:
            password, note = kept, f"(kept in {password_file})"
        else:
            # The admin existed before the file: its password is whatever it was set to.
            password, note = "(unchanged)", f"forgot it? manage.py changepassword {USERNAME}"
        url = options["url"] or settings.PUBLIC_BASE_URL.rstrip("/") + "/"
        self.stdout.write(sign_in_box(url=url, username=USERNAME, password=password, note=note))
