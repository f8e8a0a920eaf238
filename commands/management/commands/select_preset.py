"""Pin a reviewed preset on a chain (or make its default live), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from commands.operations import add_change_arguments, expiry_option_names, expiry_options, make_change
from presets import services


class Command(BaseCommand):
    help = (
        "Make PRESET live on CHAIN. A non-default preset is a pin that expires (default "
        "duration unless --minutes or --until). Needs --reason; prints the new version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("preset", metavar="PRESET")
        parser.add_argument("--minutes", default=None, metavar="N", help="pin for N minutes")
        parser.add_argument("--until", default=None, metavar="ISO", help="pin until this time, e.g. 2026-12-01T09:00Z")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        make_change(
            self,
            options,
            services.select_preset,
            preset=options["preset"],
            expires_at=expiry_options(options),
            names=expiry_option_names(options),
        )
