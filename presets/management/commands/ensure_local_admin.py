"""Create the local superuser 'admin' for `make run`, and print how to sign in."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the local admin (password kept in var/admin-password.txt) and print it."

    def handle(self, *args: Any, **options: Any) -> None:
        password_file = Path(settings.VAR_DIR) / "admin-password.txt"
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None or not password_file.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser("admin", "admin@localhost", password)
            else:
                user.set_password(password)
                user.save()
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        self.stdout.write(f"Sign in as admin / {password}  (kept in {password_file})")
