"""Planned pins from a runbook: list the plans still to come, plan one, change, cancel, or start
a suspended one anyway (``presets.plans``; the API's /api/v1/plans and /chains/CHAIN/plans)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit import change_review
from commands.operations import (
    actor_from,
    add_actor_argument,
    add_environment_argument,
    refused,
    run,
    time_option,
    whole_number,
)
from presets import environments, plans, services
from presets.exceptions import NotFound, ServiceError
from presets.models import Chain, PlannedPin, PlanState

T = TypeVar("T")

# The plans' refusals name their fields; this command names its own options.
OPTION_OF = {
    "preset": "--preset",
    "starts_at": "--start",
    "ends_at": "--end",
    "plan": "ID",
    "chain": "CHAIN",
}


class Command(BaseCommand):
    help = (
        "Planned pins: a reviewed preset pinned on a chain from a start to an end, started by the "
        "worker's beat. A plan does not start by itself when a person changed the chain since it "
        "was planned, the chain serves a pin then, or its preset was retired or marked degraded: "
        "it is suspended, and someone starts it anyway or cancels it. Times are ISO 8601 with a "
        "time zone, e.g. 2026-12-10T02:00Z."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser("list", help="the plans still holding their time (planned, suspended, started)")
        listing.add_argument("--chain", default=None, metavar="CHAIN", help="only this chain's")
        listing.add_argument("--json", action="store_true", help='{"plans": [...]} as GET /api/v1/plans answers')
        add_environment_argument(listing)

        add = actions.add_parser("add", help="plan a pin of --preset on CHAIN from --start to --end")
        add.add_argument("chain", metavar="CHAIN")
        add.add_argument("--preset", default=None, metavar="PRESET", help="a reviewed preset, not the default")
        add.add_argument("--start", default=None, metavar="ISO", help="when the pin starts, e.g. 2026-12-10T02:00Z")
        add.add_argument("--end", default=None, metavar="ISO", help="when it ends (its pin expires then)")
        _add_reason(add)

        change = actions.add_parser("change", help="change a plan not started yet: its preset, start or end")
        _add_plan(change)
        change.add_argument("--preset", default=None, metavar="PRESET", help="plan this preset instead")
        change.add_argument("--start", default=None, metavar="ISO", help="a new start")
        change.add_argument("--end", default=None, metavar="ISO", help="a new end")
        _add_reason(change)

        cancel = actions.add_parser("cancel", help="cancel a plan not started yet")
        _add_plan(cancel)
        _add_reason(cancel)

        start = actions.add_parser("start", help="start a suspended plan anyway, until its end")
        _add_plan(start)
        _add_reason(start)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list(options)
            return
        actor = actor_from(options)
        chain, reason, environment = options["chain"], options["reason"], options["environment"]
        if action == "add":
            if options["preset"] is None:
                raise CommandError("--preset: say which reviewed preset to pin")
            starts_at = _required_time(options, "start")
            ends_at = _required_time(options, "end")
            plan = _run(
                lambda: plans.plan_pin(
                    chain=chain,
                    environment=environment,
                    preset=options["preset"],
                    starts_at=starts_at,
                    ends_at=ends_at,
                    actor=actor,
                    reason=reason,
                )
            )
            self._done("planned", plan)
            return
        plan_id = whole_number("ID", options["plan"])
        assert plan_id is not None
        if action == "change":
            if all(options[name] is None for name in ("preset", "start", "end")):
                raise CommandError("--preset, --start or --end: say what to change")
            new_start = time_option("--start", options["start"])
            new_end = time_option("--end", options["end"])
            plan = _run(
                lambda: plans.change_plan(
                    chain=chain,
                    environment=environment,
                    plan=plan_id,
                    actor=actor,
                    reason=reason,
                    preset=options["preset"],
                    starts_at=new_start,
                    ends_at=new_end,
                )
            )
            self._done("changed", plan)
        elif action == "cancel":
            plan = _run(
                lambda: plans.cancel_plan(
                    chain=chain, environment=environment, plan=plan_id, actor=actor, reason=reason
                )
            )
            self._done("cancelled", plan)
        else:
            self._start(chain, environment, plan_id, actor=actor, reason=reason)

    def _start(self, chain: str, environment: str, plan_id: int, *, actor: str, reason: str) -> None:
        """Start a suspended plan anyway, reviewed first as the chain page reviews it: what it
        replaces is what the review was of (refused if the chain moved since), then a
        ``warning:`` line for each of its dangers and its cost."""
        held = (
            PlannedPin.objects.filter(
                chain__name=chain, chain__environment=environments.resolve(environment), pk=plan_id
            )
            .select_related("preset__chain")
            .first()
        )
        if held is None:  # the plans say so in their words
            _run(
                lambda: plans.start_plan_anyway(
                    chain=chain, environment=environment, plan=plan_id, actor=actor, reason=reason
                )
            )
            return
        live = _run(lambda: services.revert_expired_and_read(chain=chain, environment=environment))
        review = change_review.review_plan_start(live, held)
        plan = _run(
            lambda: plans.start_plan_anyway(
                chain=chain,
                environment=environment,
                plan=plan_id,
                actor=actor,
                reason=reason,
                expected_version=live.version,
            )
        )
        self._done(f"started as {chain} v{plan.started_version}", plan)
        for danger in review.dangers:
            self.stdout.write(f"warning: {danger}", style_func=self.style.WARNING)
        if review.cost is not None:
            self.stdout.write(f"cost: {review.cost.words}")

    def _list(self, options: dict[str, Any]) -> None:
        chain = options["chain"]
        environment = run(lambda: environments.resolve(options["environment"]), names={"environment": "--environment"})
        if chain is not None and not Chain.objects.filter(name=chain, environment=environment).exists():
            raise CommandError(
                f"--chain: unknown chain {chain!r} in {environment}: manage.py chain_status lists the chains"
            )
        holding = plans.holding_plans(chain=chain, environment=environment)
        if options["json"]:
            self.stdout.write(json.dumps({"plans": [plans.plan_entry(plan) for plan in holding]}, indent=2))
            return
        if not holding:
            self.stdout.write("no plans to come" + (f" on {chain}" if chain else ""))
        for plan in holding:
            self.stdout.write(line(plan))

    def _done(self, what: str, plan: PlannedPin) -> None:
        self.stdout.write(f"{what}: {line(plan)}")


def line(plan: PlannedPin) -> str:
    """A plan in one line: its id, chain and state, then ``plans.describe``; a suspended plan
    says why (what to do about it is the command's start or cancel)."""
    text = f"#{plan.pk} {plan.chain.name} {plan.state}: {plans.describe(plan)}"
    if plan.state == PlanState.SUSPENDED and plan.state_reason:
        text += f"; suspended because {plan.state_reason}"
    return text


def _add_plan(parser: CommandParser) -> None:
    parser.add_argument("chain", metavar="CHAIN")
    parser.add_argument("plan", metavar="ID", help="the plan's number (#ID in 'plans list')")


def _add_reason(parser: CommandParser) -> None:
    # Checked by the plans (a one-line error), not by argparse (a usage block).
    parser.add_argument("--reason", default="", help="why (required), e.g. the change ticket")
    add_actor_argument(parser)
    add_environment_argument(parser)


def _required_time(options: dict[str, Any], name: str) -> datetime:
    value = time_option(f"--{name}", options[name])
    if value is None:
        raise CommandError(f"--{name}: say when, e.g. --{name} 2026-12-10T02:00Z")
    return value


def _run(operation: Callable[[], T]) -> T:
    """One of the plans' operations, its refusal a one-line command error naming our option."""
    try:
        return operation()
    except NotFound as exc:
        if "plan" in exc.details:
            chain = exc.details.get("chain")
            raise CommandError(
                f"ID: {exc.message}: manage.py plans list --chain {chain} lists the plans to come"
            ) from None
        raise refused(exc, OPTION_OF) from None
    except ServiceError as exc:
        raise refused(exc, OPTION_OF) from None
