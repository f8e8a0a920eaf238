"""Create a service token and print its secret once (recorded in the access history)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from commands.operations import actor_from, add_actor_argument, run, time_option, whole_number
from presets import environments, service_tokens
from presets.documents import format_time
from presets.models import TokenPurpose, TokenScope


class Command(BaseCommand):
    help = (
        "Create an API token NAME for --purpose read (default), write or relay, working until revoked "
        "or until --expires-in DAYS / --expires-at ISO; prints the token once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who uses it, e.g. checkout-service")
        parser.add_argument(
            "--purpose",
            choices=TokenPurpose.values,
            default=None,
            help="read: a service; write: also changes selections; relay: a relay (may send fleet reports)",
        )
        parser.add_argument(
            "--scope", choices=TokenScope.values, default=None, help="the older name of --purpose read|write"
        )
        parser.add_argument(
            "--reports",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="whether it may send usage reports (default: yes, but not a relay's: it forwards the services')",
        )
        parser.add_argument(
            "--sole-evidence",
            action="store_true",
            help="its evidence alone may raise a page-level alert or move a guard (the one service reading its chains)",
        )
        parser.add_argument(
            "--environment",
            default="",
            metavar="ENV",
            help="the environment whose chains it reads and reports for (default: the default environment)",
        )
        parser.add_argument(
            "--chains",
            default="",
            metavar="A,B",
            help="the only chains it reads and reports for, comma-separated (default: all of its environment's)",
        )
        parser.add_argument("--expires-in", default=None, metavar="DAYS", help="the token stops working DAYS from now")
        parser.add_argument("--expires-at", default=None, metavar="ISO", help="the token stops working at this time")
        add_actor_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["expires_in"] is not None and options["expires_at"] is not None:
            raise CommandError("--expires-in and --expires-at: give one of them, not both")
        expires_at: datetime | None
        days = whole_number("--expires-in", options["expires_in"], maximum=service_tokens.TOKEN_MAX_DAYS)
        if days is not None:
            expires_at = timezone.now() + timedelta(days=days)
            names = {"expires_at": "--expires-in"}
        else:
            expires_at = time_option("--expires-at", options["expires_at"])
            names = {"expires_at": "--expires-at"}
        actor = actor_from(options)
        issued = run(
            lambda: service_tokens.create_token(
                name=options["name"],
                purpose=options["purpose"],
                scope=options["scope"],
                reports=options["reports"],
                sole_evidence=options["sole_evidence"],
                actor=actor,
                expires_at=expires_at,
                environment=options["environment"],
                chains=options["chains"].split(","),
            ),
            names={
                **names,
                "purpose": "--purpose",
                "scope": "--scope",
                "environment": "--environment",
                "chains": "--chains",
            },
        )
        token = issued.token
        until = f", expiring at {format_time(expires_at)}" if expires_at is not None else ""
        flags = (
            ("" if token.reports else ", sends no usage reports")
            + (", sole evidence" if token.sole_evidence else "")
            + (f" for {token.environment}" if environments.several() else "")
            + (f", chains {', '.join(token.chains)} only" if token.chains else "")
        )
        self.stderr.write(
            f"created {token.purpose} token {options['name']!r}{flags}{until}; it is shown only this once:"
        )
        self.stdout.write(issued.raw)
