"""A chain's changes, newest first: the entries of GET /api/v1/chains/CHAIN/history."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from commands.operations import CHAINS_LISTED, add_environment_argument, run, whole_number
from presets import environments, services
from presets.history import history_entries
from presets.models import Chain

LIMIT_MAX = 500  # as the API's history


class Command(BaseCommand):
    help = (
        "List CHAIN's changes, newest first: version, time, action, who, what it replaced, "
        "why. --json prints the API's history entries. The VERSION to undo is the first column."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("--limit", default="20", metavar="N", help=f"how many, 1..{LIMIT_MAX} (default 20)")
        parser.add_argument("--before", default=None, metavar="V", help="only versions below V (the next page)")
        parser.add_argument("--json", action="store_true", help='{"entries": [...]} as the API answers')
        add_environment_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        limit = whole_number("--limit", options["limit"])
        assert limit is not None
        if limit > LIMIT_MAX:
            raise CommandError(f"--limit: at most {LIMIT_MAX}, not {limit}")
        before = whole_number("--before", options["before"])
        name = options["chain"]
        environment = run(lambda: environments.resolve(options["environment"]), names={"environment": "--environment"})
        if not Chain.objects.filter(name=name, environment=environment).exists():
            raise CommandError(f"CHAIN: {services.unknown_chain(name, environment).message}: {CHAINS_LISTED}")
        entries = history_entries(chain=name, environment=environment, limit=limit, before=before)
        if options["json"]:
            self.stdout.write(json.dumps({"entries": entries}, indent=2))
            return
        for entry in entries:
            was = f"v{entry['previous_version']} {entry['previous_preset']}" if entry["previous_version"] else "-"
            until = f" until {entry['expires_at']}" if entry["expires_at"] else ""
            self.stdout.write(
                f"v{entry['version']}  {entry['at']}  {entry['action']:<7}  {entry['actor']}  "
                f"{was} -> {entry['preset']}{until}  reason: {entry['reason']}"
            )
