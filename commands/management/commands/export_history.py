"""Write the audit trail, every chain's changes oldest first, as NDJSON (the lines of
GET /api/v1/history) or CSV, to stdout or a file, a batch at a time (presets/history_export.py)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit import spend
from presets.documents import format_instant
from presets.exceptions import InvalidInput
from presets.history import HistoryEntry
from presets.history_export import (
    CSV_COLUMNS,
    FORMATS,
    csv_header,
    csv_lines,
    export_entries,
    ndjson_lines,
    place,
    start_export,
)
from presets.history_filter import FILTER_PARAMETERS, filter_from


class Command(BaseCommand):
    help = (
        "Write every chain's changes, oldest first, as NDJSON (one history entry a line, as GET "
        "/api/v1/history) or CSV (a header row; lists and objects as JSON in one cell), to stdout "
        "or --output FILE. Filters as on the history pages; --after CHAIN:VERSION continues an "
        "earlier export after its last entry (the command ends by saying which)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Values are checked in handle (a one-line error), not by argparse (a usage block).
        parser.add_argument("--format", default="ndjson", help="ndjson (default) or csv")
        parser.add_argument("--output", default=None, metavar="FILE", help="write FILE (in place once complete)")
        parser.add_argument("--chain", help="only this chain's changes")
        parser.add_argument("--actor", help="only changes by this actor (alice, token:NAME, system:expiry)")
        parser.add_argument("--action", help="only changes of this action (select, revert, extend, ...)")
        parser.add_argument("--since", help="changes written at or after this UTC time: 2026-11-30, 2026-11-30T02:00")
        parser.add_argument("--until", help="changes written up to the end of this UTC time (a date: that whole day)")
        parser.add_argument("--after", metavar="CHAIN:VERSION", help="continue after this entry, e.g. chat:7")

    def handle(self, *args: Any, **options: Any) -> None:
        export_format = options["format"]
        if export_format not in FORMATS:
            raise CommandError(f"--format: {export_format!r} is not a format: use {' or '.join(FORMATS)}")
        try:
            filters = filter_from({name: options[name] for name in FILTER_PARAMETERS})
            export = start_export(filters=filters, after=options["after"])
        except InvalidInput as exc:
            raise CommandError(f"--{exc.field}: {exc.field_message}") from None
        columns = CSV_COLUMNS + spend.EXPORT_COLUMNS  # each change with the chain's spend around it

        def encode(entries: list[HistoryEntry]) -> str:
            found = spend.around_changes(entries)
            return csv_lines(found, columns) if export_format == "csv" else ndjson_lines(found)

        count, last = 0, options["after"]
        try:
            with _destination(options["output"], self.stdout) as out:
                if export_format == "csv":
                    out.write(csv_header(columns))
                for entries in export_entries(export):
                    out.write(encode(entries))
                    count, last = count + len(entries), place(entries[-1])
        except BrokenPipeError:
            # The reader went away (| head): stop, as other command-line tools do, without a
            # second error when Python flushes stdout on the way out.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(1) from None
        until = format_instant(export.filters.until)
        where = f" to {options['output']}" if options["output"] else ""
        more = f"; to continue later: --after {last}" if last else ""
        noun = "entry" if count == 1 else "entries"
        self.stderr.write(f"exported {count} {noun}{where}, changes made before {until}{more}")


@contextmanager
def _destination(path: str | None, stdout: Any) -> Iterator[Any]:
    """stdout, or a file that appears at ``path`` only once complete: a failed export leaves
    the previous file (or none), never half of one."""
    if path is None:
        yield stdout
        return
    target = Path(path)
    if target.is_dir():
        raise CommandError(f"--output: {path} is a directory: name a file, e.g. {target / 'history.ndjson'}")
    if not target.parent.is_dir():
        raise CommandError(f"--output: there is no directory {target.parent}: create it or write elsewhere")
    try:
        handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise CommandError(f"--output: cannot write in {target.parent}: {exc.strerror}") from None
    try:
        with open(handle, "w", encoding="utf-8", newline="") as out:
            yield out
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
