"""Validate a presets file without a database (for the config repository's CI)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets.presets_file import PresetsFileError, load_presets_file
from presets.providers import get_registry


class Command(BaseCommand):
    help = "Validate a reviewed presets file; print every problem with its JSON path."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path to the presets JSON file")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            presets_file = load_presets_file(options["file"], registry=get_registry())
        except PresetsFileError as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError(
                f"{options['file']}: {len(exc.problems)} problem(s); nothing is valid until all are fixed"
            ) from None
        presets = sum(len(c.presets) for c in presets_file.chains.values())
        self.stdout.write(
            f"{options['file']}: OK ({len(presets_file.chains)} chains, {presets} presets, "
            f"sha256 {presets_file.sha256[:12]})"
        )
