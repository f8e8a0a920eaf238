from django.apps import AppConfig


class ChatopsConfig(AppConfig):
    """Acting from Slack: the interactive endpoints of the Slack app (docs/on-call.md, "Acting
    from Slack"). An interface like the pages and the API; no models."""

    name = "chatops"
    verbose_name = "Acting from Slack"
