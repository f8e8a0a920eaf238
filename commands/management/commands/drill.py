"""Failover drills from a runbook: start (or plan) one on a chain, list a chain's, print one's
report, abort one (``presets.drills``, ``audit.drills``; the API's /api/v1/chains/CHAIN/drills
and /api/v1/drills/ID)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from audit import drills as fleet_drills
from commands.operations import (
    CHAINS_LISTED,
    COMMAND_WORDS,
    actor_from,
    add_actor_argument,
    add_environment_argument,
    refused,
    time_option,
    whole_number,
)
from presets import drills as chain_drills
from presets import environments
from presets import services as changes
from presets.documents import format_time
from presets.exceptions import Conflict, NotFound, ServiceError
from presets.models import Chain, Drill, DrillState
from presets.wire import DRILL_FAULTS
from presets.wording import for_people

# The drills' refusals name their fields; this command names its own options.
OPTION_OF = {
    "hop": "--hop",
    "fault": "--fault",
    "share": "--share",
    "services": "--services",
    "start": "--start",
    "minutes": "--minutes",
    "repeat_days": "--repeat-days",
    "max_failed": "--max-failed",
    "max_fallback_error_pct": "--max-fallback-error-pct",
    "drill": "ID",
    "chain": "CHAIN",
}
LIST_DEFAULT = 20


class Command(BaseCommand):
    help = (
        "Failover drills: for a window of at most 60 minutes, the SDK in every service (or those named) "
        "fails a share of the requests reaching one hop of CHAIN with a fault, before dispatch, so the "
        "fallback to the next hop is proven on live traffic. Refused while the chain is pinned, a provider "
        "alert is open on it, or another drill runs; any change to the chain aborts it. Times are ISO 8601 "
        "with a time zone, e.g. 2026-12-10T02:00Z."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        start = actions.add_parser("start", help="start a drill on CHAIN now, or plan it with --start")
        start.add_argument("chain", metavar="CHAIN")
        # Checked by the drills (a one-line error naming the option), not by argparse (a usage block).
        start.add_argument("--hop", default=None, metavar="N", help="the 1-based step to fail; never the last")
        start.add_argument("--fault", default=None, metavar="FAULT", help=f"one of {', '.join(DRILL_FAULTS)}")
        start.add_argument("--share", default=None, metavar="PCT", help="percent of its requests, 0.1 to 25")
        start.add_argument(
            "--services", default="", metavar="A,B", help="the drilled services' token names (default: every service)"
        )
        start.add_argument("--start", default=None, metavar="ISO", help="plan it for this time (default: now)")
        start.add_argument("--minutes", default=None, metavar="N", help="the window, 1 to 60 (default 15)")
        start.add_argument("--repeat-days", default=None, metavar="D", help="plan the next one D days after each start")
        start.add_argument(
            "--max-failed",
            default=None,
            metavar="N",
            help="abort once more drilled requests than N failed for the caller (default 0)",
        )
        start.add_argument(
            "--max-fallback-error-pct",
            default=None,
            metavar="PCT",
            help=f"abort once the fallback hop failed more than PCT %% of its attempts (default "
            f"{chain_drills.DEFAULT_MAX_FALLBACK_ERROR_PCT:g})",
        )
        _add_reason(start)
        add_environment_argument(start)

        listing = actions.add_parser("list", help="CHAIN's drills, the latest start first, one line each")
        listing.add_argument("chain", metavar="CHAIN")
        add_environment_argument(listing)
        listing.add_argument("--limit", default=None, metavar="N", help=f"at most N (default {LIST_DEFAULT})")

        report = actions.add_parser("report", help="a drill's report: live while it runs, kept after")
        report.add_argument("drill", metavar="ID", help="the drill's number (#ID in 'drill list')")
        report.add_argument("--json", action="store_true", help="the report as GET /api/v1/drills/ID answers")

        abort = actions.add_parser("abort", help="abort a running drill, or cancel a planned one")
        abort.add_argument("drill", metavar="ID", help="the drill's number (#ID in 'drill list')")
        _add_reason(abort)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list(options)
        elif action == "report":
            drill = _run(lambda: chain_drills.get(_drill_id(options)))
            document = fleet_drills.report(drill)
            self.stdout.write(json.dumps(document, indent=2) if options["json"] else fleet_drills.report_text(document))
        elif action == "abort":
            drill_id = _drill_id(options)
            actor = actor_from(options)
            drill = _run(lambda: chain_drills.abort_drill(drill=drill_id, actor=actor, reason=options["reason"]))
            self.stdout.write(f"{'cancelled' if drill.started_version is None else 'aborted'}: {line(drill)}")
        else:
            self._start(options)

    def _start(self, options: dict[str, Any]) -> None:
        for name, example in (("hop", "--hop 1"), ("fault", "--fault server_error"), ("share", "--share 10")):
            if options[name] is None:
                raise CommandError(f"--{name}: say it, e.g. {example}")
        actor = actor_from(options)
        start = time_option("--start", options["start"])
        # Given ones only: the drills' defaults are the API's. Text is fine: the drills read it.
        given = {
            name: options[name]
            for name in ("minutes", "repeat_days", "max_failed", "max_fallback_error_pct")
            if options[name] is not None
        }
        services = [name.strip() for name in options["services"].split(",") if name.strip()]
        drill = _run(
            lambda: fleet_drills.start_drill(
                chain=options["chain"],
                environment=options["environment"],
                hop=options["hop"],
                fault=options["fault"],
                share=options["share"],
                services=services,
                start=start,
                reason=options["reason"],
                actor=actor,
                **given,
            )
        )
        self.stdout.write(f"{'started' if drill.state == DrillState.RUNNING else 'planned'}: {line(drill)}")

    def _list(self, options: dict[str, Any]) -> None:
        environment = environments.resolve(options["environment"] or "")
        chain = Chain.objects.filter(name=options["chain"], environment=environment).first()
        if chain is None:
            raise CommandError(
                f"CHAIN: {changes.unknown_chain(options['chain'], environment).message}: {CHAINS_LISTED}"
            )
        limit = whole_number("--limit", options["limit"], maximum=1000) or LIST_DEFAULT
        drills = chain_drills.of_chain(chain, limit=limit)
        if not drills:
            self.stdout.write(f"no drills on {chain.name}")
        for drill in drills:
            self.stdout.write(line(drill))


def line(drill: Drill) -> str:
    """A drill in one line: its id, chain and verdict, what it fails, its window, who and why,
    then its latest reason (why it waits, was aborted, failed or passed)."""
    window = f"{format_time(drill.starts_at)} to {format_time(drill.ends_at)} ({drill.minutes} min)"
    version = f" from v{drill.started_version}" if drill.started_version is not None else ""
    text = (
        f"#{drill.pk} {drill.chain.name} {drill.verdict}: {chain_drills.describe(drill)}; {window}{version}, "
        f"by {drill.created_by}: {drill.reason}"
    )
    if drill.repeat_days:
        text += f"; every {drill.repeat_days} days"
    if drill.reasons:
        text += f"; {drill.reasons[-1]}"
    return text


def _drill_id(options: dict[str, Any]) -> int:
    drill = whole_number("ID", options["drill"])
    assert drill is not None
    return drill


def _add_reason(parser: CommandParser) -> None:
    # Checked by the drills (a one-line error), not by argparse (a usage block).
    parser.add_argument("--reason", default="", help="why (required), e.g. the quarterly drill's ticket")
    add_actor_argument(parser)


def _run(operation: Callable[[], Drill]) -> Drill:
    """One of the drills' operations, its refusal a one-line command error naming our option."""
    try:
        return operation()
    except NotFound as exc:
        if "drill" in exc.details:
            raise CommandError(f"ID: {exc.message}: manage.py drill list CHAIN lists a chain's drills") from None
        raise refused(exc, OPTION_OF) from None
    except Conflict as exc:
        # Not a stale --expected-version (drills take none): the chain's state refuses it.
        raise CommandError(for_people(exc.message, now=timezone.now(), phrases=COMMAND_WORDS)) from None
    except ServiceError as exc:
        raise refused(exc, OPTION_OF) from None
