"""Revoke a service token (recorded in the access history)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from commands.operations import actor_from, add_actor_argument, run
from presets import service_tokens
from presets.documents import format_time


class Command(BaseCommand):
    help = (
        "Revoke the token NAME: the API refuses it at once, the read front within seconds. "
        "The name stays taken, so what the token did stays attributable."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="the token's name (manage.py list_tokens)")
        add_actor_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        actor = actor_from(options)
        token = run(lambda: service_tokens.revoke_token(name=options["name"], actor=actor))
        assert token.revoked_at is not None
        self.stdout.write(f"revoked token {token.name!r} ({token.purpose}) at {format_time(token.revoked_at)}")
