"""Publish the chains' signed documents now (README, "Publishing to a static host or object store")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets import publishing
from presets.exceptions import NotFound


class Command(BaseCommand):
    help = (
        "Publish every chain's signed document now (or one chain's, --chain) to PUBLISH_DIRECTORY and "
        "PUBLISH_S3_BUCKET: at first setup, or after turning either on. A target that holds a newer "
        "document keeps it. One line per chain and target; exits 1 if a target failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--chain", metavar="NAME", help="this chain only (default: every chain)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not publishing.enabled():
            raise CommandError(
                "nothing to publish to: set PUBLISH_DIRECTORY (a directory a web server serves) or "
                'PUBLISH_S3_BUCKET (README, "Publishing to a static host or object store")'
            )
        chains = [options["chain"]] if options["chain"] else None
        try:
            report = publishing.publish_chains(chains=chains)
        except NotFound as exc:
            raise CommandError(f"--chain: {exc.message}") from None
        if not report.outcomes and not report.failed:
            raise CommandError("no chains to publish: manage.py sync_presets makes them")
        for outcome in report.outcomes:
            self.stdout.write(str(outcome))
        for failed in report.failed:
            self.stderr.write(str(failed))
        if report.failed:
            raise CommandError(
                f"{len(report.failed)} chain(s) not published everywhere (above); fix that and run it again"
            )
