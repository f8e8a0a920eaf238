"""Create a service token and print its secret once."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from presets.models import ServiceToken, TokenScope


class Command(BaseCommand):
    help = "Create an API token NAME with scope read (default) or write; prints the token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who uses it, e.g. checkout-service")
        parser.add_argument("--scope", choices=TokenScope.values, default=TokenScope.READ)

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"]
        try:
            validate_slug(name)
        except ValidationError:
            raise CommandError(f"{name!r}: token names are slugs (letters, digits, - and _)") from None
        if ServiceToken.objects.filter(name=name).exists():
            raise CommandError(f"a token named {name!r} exists; pick another name or revoke it in the admin first")
        token = ServiceToken(name=name, scope=options["scope"])
        raw = token.issue()
        token.save()
        self.stderr.write(f"created {options['scope']} token {name!r}; it is shown only this once:")
        self.stdout.write(raw)
