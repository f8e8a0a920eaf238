"""Pin a reviewed preset on a chain (or make its default live), from a runbook."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

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
        selection = make_change(
            self,
            options,
            services.select_preset,
            preset=options["preset"],
            expires_at=expiry_options(options),
            guard=options["guard"],
            spend_bound=amount("--spend-bound", options["spend_bound"]),
            names={**expiry_option_names(options), "spend_bound_per_hour": "--spend-bound"},
        )
        guard = guards.live_guard(chain=selection.chain.name)
        if guard is not None and guard.pin_version == selection.version:
            self.stdout.write(guard_line(guard))
        elif options["guard"]:
            self.stdout.write(
                "warning: not guarded: only a pin that changes the chain's head (its first step) is guarded",
                style_func=self.style.WARNING,
            )
