"""A guarded pin's guard from a runbook: read the live pin's guard, or switch it off
(``presets.guards``; the API's GET /api/v1/chains/CHAIN/guard and POST .../guard/off)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.guards import Figures
from commands.operations import actor_from, add_actor_argument, add_environment_argument, guard_line, refused, run
from presets import guards
from presets.exceptions import NotFound
from presets.models import PinGuard


class Command(BaseCommand):
    help = (
        "The guard of the pin CHAIN serves now, in one line, as the chain's card says it (a guard "
        "that passed or was switched off says why), then the old head's figures before the "
        "pin once read. No guard: one line on stderr saying why, and what the chain's last guard "
        "did (restored the selection its pin replaced, with the evidence). --off --reason R "
        "switches it off: it will not act on this pin. A guard is made with its pin "
        "(select_preset --guard)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("chain", metavar="CHAIN")
        parser.add_argument("--json", action="store_true", help="the guard as GET /api/v1/chains/CHAIN/guard answers")
        parser.add_argument("--off", action="store_true", help="switch the guard off (needs --reason)")
        # Checked by the guards (a one-line error), not by argparse (a usage block).
        parser.add_argument("--reason", default=None, help="why it is switched off (required with --off)")
        add_actor_argument(parser)
        add_environment_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        chain, environment = options["chain"], options["environment"]
        if options["off"]:
            actor = actor_from(options)
            reason = options["reason"] or ""
            guard = run(
                lambda: guards.switch_off(chain=chain, environment=environment, actor=actor, reason=reason),
                names={"environment": "--environment"},
            )
            self.stdout.write(f"switched off: {guard_line(guard)}")
            return
        for option in ("reason", "actor"):
            if options[option] is not None:
                raise CommandError(f"--{option}: only with --off (reading the guard changes nothing)")
        try:
            guard = guards.get_live_guard(chain=chain, environment=environment)
        except NotFound as exc:
            if "version" in exc.details:  # the chain is known: it serves no guarded pin
                raise CommandError(exc.message) from None
            raise refused(exc) from None
        if options["json"]:
            self.stdout.write(json.dumps(guards.guard_entry(guard), indent=2))
            return
        self.stdout.write(guard_line(guard))
        for line in evidence_lines(guard):
            self.stdout.write(f"  {line}")


def evidence_lines(guard: PinGuard) -> list[str]:
    """What the guard weighs the pin's head against, once it has read it (a minute after the
    pin): the old head's figures before the pin. A guard that acted is no longer the live pin's
    (its restore is a new version): the chain's no-guard refusal says what it did and why."""
    if not guard.baseline:
        return []
    return [f"{guard.old_head_text} before the pin: {Figures.from_json(guard.baseline).words()}"]
