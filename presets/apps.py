from django.apps import AppConfig


class PresetsConfig(AppConfig):
    name = "presets"
    verbose_name = "Chains and presets"

    def ready(self) -> None:
        # Wiring, not logic: the read path announces every change the services make.
        from presets import events
        from presets.read_path.notifications import announce_change

        events.selection_changed.connect(announce_change, dispatch_uid="read_path.announce_change")
        # ... and every change of a service token, which read fronts hold in memory.
        from django.db.models.signals import post_delete, post_save

        from presets.models import ServiceToken, forget_checked_tokens
        from presets.read_path.notifications import announce_tokens_changed

        for signal in (post_save, post_delete):
            signal.connect(announce_tokens_changed, sender=ServiceToken, dispatch_uid="read_path.tokens_changed")
            signal.connect(forget_checked_tokens, sender=ServiceToken, dispatch_uid="presets.forget_checked_tokens")

        # The access history: every change of a person's role groups and access flags,
        # wherever it is made (the admin, a command, single sign-on).
        from django.contrib.auth.models import User
        from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

        from presets import access_history

        pre_save.connect(access_history.remember_flags, sender=User, dispatch_uid="access_history.remember_flags")
        post_save.connect(access_history.record_user_saved, sender=User, dispatch_uid="access_history.user_saved")
        pre_delete.connect(access_history.record_user_deleted, sender=User, dispatch_uid="access_history.user_deleted")
        m2m_changed.connect(
            access_history.record_groups_changed,
            sender=User.groups.through,
            dispatch_uid="access_history.groups_changed",
        )
