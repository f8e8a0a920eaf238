"""Pin a reviewed preset on a chain (or make its default live), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from commands.operations import (
    actor_from,
    add_change_arguments,
    changed,
    expiry_option_names,
    expiry_options,
    run,
    whole_number,
)
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
        expires = expiry_options(options)
        expected = whole_number("--expected-version", options["expected_version"])
        actor = actor_from(options)
        selection = run(
            lambda: services.select_preset(
                chain=options["chain"],
                preset=options["preset"],
                actor=actor,
                reason=options["reason"],
                expires_at=expires,
                expected_version=expected,
            ),
            names=expiry_option_names(options),
        )
        self.stdout.write(changed(selection, now=timezone.now()))
