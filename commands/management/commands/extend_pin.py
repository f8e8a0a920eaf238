"""Keep a chain's pin longer (or, with --shorten, end it earlier on purpose), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
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
        "Move CHAIN's pin expiry to N minutes from now (--minutes) or to a time (--until). "
        "Never ends the pin sooner unless --shorten. Needs --reason; prints the new expiry."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("--minutes", default=None, metavar="N", help="the pin ends N minutes from now")
        parser.add_argument("--until", default=None, metavar="ISO", help="the pin ends at this time")
        parser.add_argument("--shorten", action="store_true", help="end the pin earlier than it ends now (on purpose)")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        expires = expiry_options(options)
        if expires is None:
            raise CommandError("--minutes N or --until ISO: say when the pin should end")
        expected = whole_number("--expected-version", options["expected_version"])
        actor = actor_from(options)
        selection = run(
            lambda: services.extend_pin(
                chain=options["chain"],
                expires_at=expires,
                actor=actor,
                reason=options["reason"],
                expected_version=expected,
                shorten=options["shorten"],
            ),
            names=expiry_option_names(options),
        )
        self.stdout.write(changed(selection, now=timezone.now()))
