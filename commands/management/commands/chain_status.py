"""What each chain serves now: for a runbook's first step, to read the version a change should
expect (``--expected-version``), and how the fleet finds each live step lately (as the
dashboard shows it)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from audit import provider_health
from audit.change_risks import HealthMap, health_class, reported_health
from commands.operations import add_environment_argument, run, served
from presets import environments, selectors
from presets.documents import format_duration, format_time
from presets.models import Selection, current_epoch
from presets.step_changes import step_label


class Command(BaseCommand):
    help = (
        "Show what each chain (or CHAIN) serves: version, preset, the pin's expiry, who made "
        "the change and why, then each live step with the fleet's health of it over the last 5 "
        "minutes (error rate, p95 latency, reporting instances; 'failing now' by the dashboard's "
        "rule), or 'no reports'. --json prints the chain documents the API serves."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", nargs="?", help="one chain (default: every chain)")
        parser.add_argument("--json", action="store_true", help="the chain documents, as GET /api/v1/chains")
        add_environment_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        environment = run(lambda: environments.resolve(options["environment"]), names={"environment": "--environment"})
        rows = selectors.selections(environment)
        if options["chain"]:
            rows = rows.filter(chain__name=options["chain"])
        chosen = list(rows)
        if options["chain"] and not chosen:
            known = ", ".join(selectors.selections(environment).values_list("chain__name", flat=True)) or "none yet"
            raise CommandError(f"CHAIN: unknown chain {options['chain']!r}; the chains are: {known}")
        if options["json"]:
            epoch = current_epoch()
            self.stdout.write(json.dumps({"chains": [s.to_document(epoch=epoch) for s in chosen]}, indent=2))
            return
        if not chosen:
            self.stdout.write("no chains yet: run manage.py sync_presets")
            return
        now = timezone.now()
        # Every chain's live steps' health in one read, as the dashboard reads it.
        healths = provider_health.health_by_chain({s.chain: [s.steps] for s in chosen}, now=now)
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
            for line in step_lines(selection, healths[selection.chain_id]):
                self.stdout.write(line)


def step_lines(selection: Selection, health: HealthMap) -> list[str]:
    """Each live step in fallback order with the fleet's view of it, as the dashboard's step
    list reads: "failing now" by the fleet's rule, the recent figures, or no reports (nobody
    reported on it in the last hour)."""
    lines = []
    for number, step in enumerate(selection.steps, start=1):
        known = reported_health(step, health)
        if known is None:
            lines.append(f"  step {number} {step_label(step)}: no reports in the last hour")
            continue
        failing = "failing now: " if health_class(known) == "failing" else ""
        lines.append(f"  step {number} {step_label(step)}: {failing}{known['summary']}")
    return lines
