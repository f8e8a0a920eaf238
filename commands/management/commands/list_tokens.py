"""List the service tokens and their state (never their secrets)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from presets.documents import format_time
from presets.models import ServiceToken


class Command(BaseCommand):
    help = (
        "List the service tokens: name, purpose, state, created, expires, last used, revoked, whether it "
        "may send usage reports and whether its evidence alone counts. Never the secret."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help='{"tokens": [...]}')

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        tokens = [
            {
                "name": token.name,
                "purpose": token.purpose,
                "scope": token.scope,  # what it may change, as before purposes
                "state": "revoked" if token.revoked_at else "expired" if token.is_expired(now) else "active",
                "created_at": format_time(token.created_at),
                "expires_at": format_time(token.expires_at),
                "last_used_at": format_time(token.last_used_at),
                "revoked_at": format_time(token.revoked_at),
                "reports": token.reports,
                "sole_evidence": token.sole_evidence,
                "environment": token.environment,
                "chains": ",".join(token.chains) or "all",
            }
            for token in ServiceToken.objects.order_by("name")
        ]
        if options["json"]:
            self.stdout.write(json.dumps({"tokens": tokens}, indent=2))
            return
        if not tokens:
            self.stdout.write("no tokens: manage.py create_token NAME makes one")
            return
        columns = [
            "name",
            "purpose",
            "environment",
            "chains",
            "state",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "reports",
            "sole_evidence",
        ]
        rows = [[_cell(token[column]) for column in columns] for token in tokens]
        widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
        for row in [columns, *rows]:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value or "-")
