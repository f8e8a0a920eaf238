"""What each chain serves now: for a runbook's first step, and to read the version a change
should expect (``--expected-version``)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from commands.operations import served
from presets import selectors
from presets.documents import format_duration, format_time
from presets.models import current_epoch


class Command(BaseCommand):
    help = (
        "Show what each chain (or CHAIN) serves: version, preset, the pin's expiry, who made "
        "the change and why. --json prints the chain documents the API serves."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", nargs="?", help="one chain (default: every chain)")
        parser.add_argument("--json", action="store_true", help="the chain documents, as GET /api/v1/chains")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = selectors.selections()
        if options["chain"]:
            rows = rows.filter(chain__name=options["chain"])
        chosen = list(rows)
        if options["chain"] and not chosen:
            known = ", ".join(selectors.selections().values_list("chain__name", flat=True)) or "none yet"
            raise CommandError(f"CHAIN: unknown chain {options['chain']!r}; the chains are: {known}")
        if options["json"]:
            epoch = current_epoch()
            self.stdout.write(json.dumps({"chains": [s.to_document(epoch=epoch) for s in chosen]}, indent=2))
            return
        if not chosen:
            self.stdout.write("no chains yet: run manage.py sync_presets")
            return
        now = timezone.now()
        for selection in chosen:
            self.stdout.write(served(selection, now=now))
            self.stdout.write(
                f"  {selection.action} by {selection.updated_by} at {format_time(selection.updated_at)}: "
                f"{selection.reason}"
            )
            start = selectors.live_pin_start(selection) if selection.is_pinned else None
            if start is not None and start.version != selection.version:
                self.stdout.write(
                    f"  pinned since v{start.version} ({format_duration(start.age(now))} ago) by {start.actor}: "
                    f"{start.reason}"
                )
