"""Undo one change of a chain's history (make its previous value live again), from a runbook."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit import change_review
from commands.operations import add_change_arguments, make_change, whole_number
from presets import services
from presets.history import history_rows
from presets.models import Selection


class Command(BaseCommand):
    help = (
        "Undo the change that made CHAIN's VERSION: what it replaced is live again, as a new "
        "version (a restored pin gets the default duration). See chain_history. Needs --reason; "
        "prints the new version, then a warning line for each risk, as select_preset does."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("version", metavar="VERSION", help="the version whose change to undo")
        add_change_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        version = whole_number("VERSION", options["version"])
        assert version is not None

        def review(live: Selection) -> change_review.ChangeReview:
            entry = (
                history_rows(chain=live.chain.name, environment=live.chain.environment).filter(version=version).first()
            )
            if entry is None:  # the service says so in its words
                return change_review.ChangeReview(change_review.RESTORE, live)
            return change_review.review_restore(live, version=version, previous=entry.previous_preset)

        make_change(self, options, services.restore, review=review, version=version)
