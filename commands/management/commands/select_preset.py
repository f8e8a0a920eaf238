"""Pin a reviewed preset on a chain (or make its default live), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from commands.operations import (
    add_change_arguments,
    add_expiry_arguments,
    expiry_option_names,
    expiry_options,
    make_change,
)
from presets import services


class Command(BaseCommand):
    help = (
        "Make PRESET live on CHAIN. A non-default preset is a pin that expires (default "
        "duration unless --minutes, --hours or --until). Needs --reason; prints the new version, "
        "then a warning line for each risk: the preset is marked degraded, providers lose all of "
        "the chain's traffic, or the fleet finds its head failing now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("preset", metavar="PRESET")
        add_expiry_arguments(parser, ends="the pin ends")
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
