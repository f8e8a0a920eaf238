from django.apps import AppConfig


class PresetsConfig(AppConfig):
    name = "presets"
    verbose_name = "Chains and presets"

    def ready(self) -> None:
        # A token found active is kept for a while in this process: forgotten at once when
        # any token changes. (The read path connects its own receivers: read_path/apps.py.)
        from django.db.models.signals import post_delete, post_save

        from presets.models import ServiceToken, forget_checked_tokens

        for signal in (post_save, post_delete):
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

        # Every change (a new version, a raised epoch) and every key's activation publishes the
        # documents anew where PUBLISH_* says, once it commits (presets/publishing.py).
        from presets import events, publishing

        events.selection_changed.connect(publishing.publish_after_commit, dispatch_uid="presets.publish_change")
        events.signing_key_activated.connect(
            publishing.publish_all_after_commit, dispatch_uid="presets.publish_after_key_activated"
        )
