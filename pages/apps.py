from django.apps import AppConfig


class PagesConfig(AppConfig):
    """The on-call pages and the admin's registrations; an app for its template tags, static
    files and admin module (no models)."""

    name = "pages"
    verbose_name = "On-call pages"
