"""Promote a presets revision to the next environment from a runbook or a config repository's CI
(``audit.promotions``; the API's POST /api/v1/environments/ENV/promotions)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit import promotions
from commands.operations import actor_from, add_actor_argument, run, whole_number


class Command(BaseCommand):
    help = (
        "Promote the presets revision the environment below ENV serves to ENV (--to ENV --reason R), once its "
        "evidence holds: served there PROMOTION_MIN_SERVED_MINUTES, an error rate no worse than before, a passed "
        "drill of each changed default, and with PROMOTION_APPROVAL a second person's --approve ID. --check says "
        "what a promotion would stand on and exits 1 when it would be refused (for CI)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", required=True, metavar="ENV", help="the environment to promote to")
        # Checked by the promotions (a one-line error), not by argparse (a usage block).
        parser.add_argument("--reason", default="", help="why (required), e.g. the change ticket")
        parser.add_argument("--approve", default=None, metavar="ID", help="approve pending promotion ID to ENV")
        parser.add_argument(
            "--check", action="store_true", help="only say what the evidence is now; exit 1 if it does not hold"
        )
        parser.add_argument("--json", action="store_true", help="the promotion (or --check's evidence) as JSON")
        add_actor_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        names = {"to": "--to", "promotion": "--approve", "reason": "--reason"}
        if options["check"]:
            found = run(lambda: promotions.evidence(to=options["to"]), names=names)
            self.stdout.write(json.dumps(found.as_json(), indent=2) if options["json"] else promotions.describe(found))
            if not found.holds:
                raise SystemExit(1)
            return
        actor = actor_from(options)
        if options["approve"] is not None:
            promotion_id = whole_number("--approve", options["approve"])
            assert promotion_id is not None
            held = run(lambda: promotions.get(promotion_id), names=names)
            if held.target != options["to"]:
                raise CommandError(f"--approve: promotion {promotion_id} is to {held.target}, not {options['to']}")
            promotion = run(lambda: promotions.approve(promotion=promotion_id, actor=actor), names=names)
        else:
            promotion = run(
                lambda: promotions.promote(to=options["to"], actor=actor, reason=options["reason"]), names=names
            )
        if options["json"]:
            self.stdout.write(json.dumps(promotions.entry(promotion), indent=2))
            return
        if promotion.state == "pending":
            self.stdout.write(
                f"promotion {promotion.pk} to {promotion.target} waits for a second person's approval: "
                f"manage.py promote --to {promotion.target} --approve {promotion.pk}"
            )
            return
        self.stdout.write(
            f"promoted {promotion.revision.name} sha256 {promotion.revision.sha256[:12]} from {promotion.source} "
            f"to {promotion.target} (promotion {promotion.pk})"
        )
        for line in promotion.changes:
            self.stdout.write(f"  {line}")
