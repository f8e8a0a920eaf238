from django.apps import AppConfig


class PresetsConfig(AppConfig):
    name = "presets"
    verbose_name = "Chains and presets"

    def ready(self) -> None:
        # Wiring, not logic: the read path announces every change the services make.
        from presets import events
        from presets.read_path.notifications import announce_change

        events.selection_changed.connect(announce_change, dispatch_uid="read_path.announce_change")
