"""Make the database match the reviewed presets file, all or nothing."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets import services
from presets.presets_file import PresetsFileError, load_presets_file
from presets.providers import get_registry


class Command(BaseCommand):
    help = "Apply the reviewed presets file (default: the PRESETS_FILE setting); print the diff."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", default=None, help="presets file (default: PRESETS_FILE)")
        parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"] or settings.PRESETS_FILE
        try:
            presets_file = load_presets_file(path, registry=get_registry())
            report = services.sync_presets(presets_file=presets_file, dry_run=options["dry_run"])
        except PresetsFileError as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError(f"{path}: rejected, nothing changed") from None
        except services.SyncRefused as exc:
            for refusal in exc.problems:
                self.stderr.write(refusal)
            raise CommandError(f"{path}: rejected, nothing changed") from None
        for line in report.lines:
            self.stdout.write(line)
        if not report.changed:
            self.stdout.write(f"{path}: already in sync, nothing to change")
        elif options["dry_run"]:
            self.stdout.write(f"{path}: dry run, nothing written")
        else:
            self.stdout.write(f"{path}: applied {len(report.lines)} change(s)")
