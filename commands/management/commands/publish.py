"""Publish the chains' signed documents now (docs/publishing.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets import publishing
from presets.exceptions import NotFound


class Command(BaseCommand):
    help = (
        "Publish every chain's signed document now (or one chain's, --chain) to PUBLISH_DIRECTORY and "
        "PUBLISH_S3_BUCKET: at first setup, or after turning either on. A target that holds a newer "
        "document keeps it; one that holds a document the control plane did not make (it does not verify "
        "with the trusted keys, or claims a version beyond the chain's) gets the current one, and that is "
        "said on stderr. One line per chain and target; exits 1 if a target failed or held such a document."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--chain", metavar="NAME", help="this chain only (default: every chain)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not publishing.enabled():
            raise CommandError(
                "nothing to publish to: set PUBLISH_DIRECTORY (a directory a web server serves) or "
                "PUBLISH_S3_BUCKET (docs/publishing.md)"
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
        # Replaced, yet a failure: someone else writes where services read their chains.
        for replaced in report.replaced:
            self.stderr.write(str(replaced))
        problems = []
        if report.failed:
            problems.append(
                f"{len(report.failed)} chain(s) not published everywhere (above); fix that and run it again"
            )
        if report.replaced:
            problems.append(
                f"{len(report.replaced)} document(s) at the targets were not the control plane's and were replaced "
                "(above, and alert publish_forged): someone else writes there; find out who"
            )
        if problems:
            raise CommandError("; ".join(problems))
