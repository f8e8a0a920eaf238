# The publisher's reports of a replaced forged document (issue 53): the alert kind
# ``publish_forged`` (audit/publish_alerts.py).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0009_plan_and_guard_alerts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("stale_pin", "Stale Pin"),
                    ("pin_expired", "Pin Expired"),
                    ("provider_failing", "Provider Failing"),
                    ("provider_credentials", "Provider Credentials"),
                    ("plan_suspended", "Plan Suspended"),
                    ("plan_missed", "Plan Missed"),
                    ("guard_restored", "Guard Restored"),
                    ("publish_forged", "Publish Forged"),
                ],
                max_length=20,
            ),
        ),
    ]
