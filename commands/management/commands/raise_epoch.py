"""Raise the epoch after restoring the database from a backup (docs/deploy.md, "Backup and
restore")."""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets import services
from presets.exceptions import InvalidInput
from presets.models import current_epoch


class Command(BaseCommand):
    help = (
        "Run once after restoring the database: raises the epoch that chain documents "
        "carry, so services that saved versions newer than the backup follow this "
        "database again. Prints the old and new epoch."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reason", default="database restored from a backup", help="why (kept with the epoch)")
        parser.add_argument("--actor", default=None, help="who raises it (default: the operating-system user)")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = options["actor"] or getpass.getuser()
        before = current_epoch()
        try:
            after = services.raise_epoch(actor=actor, reason=options["reason"])
        except InvalidInput as exc:
            raise CommandError(f"--reason {exc.field_message}") from None
        self.stdout.write(
            f"epoch raised from {before} to {after}; every chain's document "
            "now carries it and services follow this database's versions again"
        )
