"""End a chain's pin: serve its default preset again, from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from commands.operations import actor_from, add_change_arguments, changed, run, whole_number
from presets import services


class Command(BaseCommand):
    help = "End CHAIN's pin now: its default preset is live again. Needs --reason; prints the new version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        expected = whole_number("--expected-version", options["expected_version"])
        actor = actor_from(options)
        selection = run(
            lambda: services.revert_to_default(
                chain=options["chain"], actor=actor, reason=options["reason"], expected_version=expected
            )
        )
        self.stdout.write(changed(selection, now=timezone.now()))
