"""Validate a presets file without a database (for the config repository's CI)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from presets.presets_file import PresetsFile, PresetsFileError, load_presets_file
from presets.providers import get_registry, price_of


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
        for line in unpriced_steps(presets_file):
            self.stderr.write(line)
        self.stdout.write(
            f"{options['file']}: OK ({len(presets_file.chains)} chains, {presets} presets, "
            f"sha256 {presets_file.sha256[:12]})"
        )


def unpriced_steps(presets_file: PresetsFile) -> list[str]:
    """A warning for each step whose model the registry has no price for: its spend shows as
    unknown on the pages and in every estimate (the file is still valid)."""
    warnings = []
    for chain_name, chain in presets_file.chains.items():
        for preset_name, preset in chain.presets.items():
            for index, step in enumerate(preset.steps):
                if price_of(step["provider"], step["model"]) is None:
                    warnings.append(
                        f"warning: $.chains.{chain_name}.presets.{preset_name}.chain[{index}]: "
                        f"{step['provider']}/{step['model']} has no price in the provider registry, so its spend "
                        "shows as unknown; add Price(...) to the registry's prices for it"
                    )
    return warnings
