# The fleet's evidence bounded by who sends it (issue 53): each instance row names the token
# that recorded it (null for the rows recorded before: they count against no token's cap and
# age out as before), and what each token's evidence lost is counted.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0010_publish_evidence"),
        ("presets", "0012_token_evidence"),
    ]

    operations = [
        migrations.CreateModel(
            name="RefusedEvidence",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token", models.CharField(help_text="the token's name", max_length=100)),
                ("chain", models.CharField(blank=True, help_text="pruned instance rows: their chain", max_length=100)),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("instances_pruned", "Instances Pruned"),
                            ("seen_not_relay", "Seen Not Relay"),
                            ("seen_too_many", "Seen Too Many"),
                            ("reports_not_allowed", "Reports Not Allowed"),
                            ("reports_too_many", "Reports Too Many"),
                        ],
                        max_length=20,
                    ),
                ),
                ("count", models.PositiveBigIntegerField(default=0)),
                ("last_at", models.DateTimeField()),
            ],
            options={
                "indexes": [models.Index(fields=["reason", "chain", "last_at"], name="refused_evidence_recent")],
                "constraints": [
                    models.UniqueConstraint(fields=("token", "chain", "reason"), name="refused_evidence_unique")
                ],
            },
        ),
        migrations.AddField(
            model_name="fleetinstance",
            name="token",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="presets.servicetoken",
            ),
        ),
        migrations.AddIndex(
            model_name="fleetinstance",
            index=models.Index(fields=["token", "last_seen_at"], name="fleet_instance_token"),
        ),
    ]
