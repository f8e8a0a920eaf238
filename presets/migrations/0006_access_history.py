"""The access history (presets.AccessChange), append-only like the selection history, and
an optional expiry on service tokens.

The table gets the trigger of 0003_history_append_only.py (its function refuses every UPDATE
and DELETE of a row), which is also how ``manage.py grant_app_role`` (presets/db_roles.py)
knows it is history: the app role may only SELECT and INSERT it.
"""

import django.utils.timezone
from django.db import migrations, models

TABLE = "presets_accesschange"
FUNCTION = "controlplane_history_is_append_only"  # created by 0003_history_append_only


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
    )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE}")


class Migration(migrations.Migration):
    dependencies = [("presets", "0005_history_indexes")]

    operations = [
        migrations.AddField(
            model_name="servicetoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="AccessChange",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("time", models.DateTimeField(default=django.utils.timezone.now)),
                ("actor", models.CharField(max_length=150)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("token_created", "Token Created"),
                            ("token_revoked", "Token Revoked"),
                            ("role_granted", "Role Granted"),
                            ("role_revoked", "Role Revoked"),
                            ("user_created", "User Created"),
                            ("user_deactivated", "User Deactivated"),
                            ("user_reactivated", "User Reactivated"),
                            ("user_deleted", "User Deleted"),
                            ("staff_granted", "Staff Granted"),
                            ("staff_revoked", "Staff Revoked"),
                            ("superuser_granted", "Superuser Granted"),
                            ("superuser_revoked", "Superuser Revoked"),
                        ],
                        max_length=20,
                    ),
                ),
                ("subject", models.CharField(max_length=150)),
                ("details", models.JSONField(blank=True, default=dict)),
            ],
            options={
                "ordering": ["-time", "-id"],
                "indexes": [
                    models.Index(fields=["time", "id"], name="presets_access_time"),
                    models.Index(fields=["subject", "time", "id"], name="presets_access_subject_time"),
                ],
            },
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
