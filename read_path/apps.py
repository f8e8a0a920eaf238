from django.apps import AppConfig


class ReadPathConfig(AppConfig):
    name = "read_path"
    verbose_name = "Read path"

    def ready(self) -> None:
        # Wiring, not logic: the read path announces every change the services make...
        from django.db.models.signals import post_delete, post_save

        from presets import events
        from presets.models import ServiceToken
        from read_path.notifications import announce_change, announce_tokens_changed

        events.selection_changed.connect(announce_change, dispatch_uid="read_path.announce_change")
        # ... and every change of a service token, which read fronts hold in memory.
        for signal in (post_save, post_delete):
            signal.connect(announce_tokens_changed, sender=ServiceToken, dispatch_uid="read_path.tokens_changed")
