"""Grant the app's database role what web, worker and beat need, and nothing more
(docs/deploy.md, "Database roles"). Run as the owner, right after ``migrate``, on every
release."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from presets import db_roles


class Command(BaseCommand):
    help = (
        "Run as the owner (the role that ran migrate) after every migrate: grants ROLE, the role "
        "web, worker and beat connect as, exactly what the app needs (history: SELECT and INSERT "
        "only; no TRUNCATE, no ownership), revoking first whatever else it had. -v 2 prints the SQL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", help="the app's PostgreSQL role, e.g. controlplane_app")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            self.stdout.write(
                f"database roles apply only to PostgreSQL; this database is {connection.vendor}: nothing to grant"
            )
            return
        try:
            grants = db_roles.grant_app_role(role=options["role"])
        except db_roles.GrantRefused as exc:
            raise CommandError(str(exc)) from None
        if options["verbosity"] >= 2:
            for statement in grants.statements:
                self.stdout.write(statement + ";")
        for line in grants.lines:
            self.stdout.write(line)
        for warning in grants.warnings:
            self.stderr.write(warning)
