from django.apps import AppConfig


class CommandsConfig(AppConfig):
    """The manage.py commands (runbook, tokens, release steps); an app so that Django finds
    them (no models)."""

    name = "commands"
    verbose_name = "Commands"
