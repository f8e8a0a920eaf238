"""Pin a reviewed preset on a chain (or make its default live), from a runbook."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit import change_review
from commands.operations import (
    add_change_arguments,
    add_expiry_arguments,
    amount,
    expiry_option_names,
    expiry_options,
    guard_line,
    make_change,
)
from presets import guards, services


class Command(BaseCommand):
    help = (
        "Make PRESET live on CHAIN. A non-default preset is a pin that expires (default "
        "duration unless --minutes, --hours or --until). Needs --reason; prints the new version, "
        "then a warning line for each risk: the preset is marked degraded, providers lose all of "
        "the chain's traffic, or the fleet finds its head failing now. --guard (or "
        "GUARD_PINS_BY_DEFAULT) guards the pin: the selection it replaced is restored if the fleet "
        "finds its head clearly worse; the guard is printed on a line of its own."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("preset", metavar="PRESET")
        add_expiry_arguments(parser, ends="the pin ends")
        parser.add_argument(
            "--guard",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="guard the pin, or not (--no-guard); default: as GUARD_PINS_BY_DEFAULT says. Only a pin "
            "that changes the chain's head is guarded",
        )
        parser.add_argument(
            "--spend-bound",
            metavar="AMOUNT",
            help="a spend alert when the chain's spend passes AMOUNT an hour (the provider registry's currency) "
            "while the pin is live (e.g. 25.00)",
        )
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        expires_at = expiry_options(options)
        selection, review = make_change(
            self,
            options,
            services.select_preset,
            review=lambda live: change_review.review_pin(
                live, preset=options["preset"], expires_at=expires_at, guard=options["guard"]
            ),
            preset=options["preset"],
            expires_at=expires_at,
            guard=options["guard"],
            spend_bound=amount("--spend-bound", options["spend_bound"]),
            names={**expiry_option_names(options), "spend_bound_per_hour": "--spend-bound"},
        )
        guard = guards.live_guard(chain=selection.chain.name)
        made = guard is not None and guard.pin_version == selection.version
        if review.guard is not None and review.guard.acts and guard is not None and made:
            self.stdout.write(guard_line(guard))
        elif review.guard is not None and services.guard_wanted(options["guard"]):
            # What the review says of the guard: none is made, or it will not act on today's evidence.
            self.stdout.write(f"warning: {review.guard.text}", style_func=self.style.WARNING)
