from django.apps import AppConfig


class PresetsConfig(AppConfig):
    name = "presets"
    verbose_name = "Chains and presets"
