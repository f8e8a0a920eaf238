"""End a chain's pin: serve its default preset again, from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit import change_review
from commands.operations import add_change_arguments, make_change
from presets import services


class Command(BaseCommand):
    help = "End CHAIN's pin now: its default preset is live again. Needs --reason; prints the new version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        make_change(self, options, services.revert_to_default, review=change_review.review_revert)
