"""Keep a chain's pin longer (or, with --shorten, end it earlier on purpose), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit import change_review
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
        "Move CHAIN's pin expiry to N minutes (--minutes) or H hours (--hours) from now, or to a "
        "time (--until). "
        "Never ends the pin sooner unless --shorten. Needs --reason; prints the new expiry."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        add_expiry_arguments(parser, ends="the pin ends")
        parser.add_argument("--shorten", action="store_true", help="end the pin earlier than it ends now (on purpose)")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        expires = expiry_options(options)
        if expires is None:
            raise CommandError("--minutes N, --hours H or --until ISO: say when the pin should end")
        make_change(
            self,
            options,
            services.extend_pin,
            review=lambda live: change_review.review_extend(live, expires_at=expires, shorten=options["shorten"]),
            expires_at=expires,
            shorten=options["shorten"],
            names=expiry_option_names(options),
        )
