"""Usage reports as evidence, within limits (audit/usage.py, audit/provider_health.py).

``ReportWindow`` counts each minute's usage reports per instance, per token and per chain, in
the database so that every web process shares the limits. ``ProviderEvidence`` keeps, for the
provider alerts' window only, what each instance that polls its chain reported about each step
and with which token: an alert weighs instances, not the counts one report claims.
``ProviderReporter`` rows become the instance's (a key to its fleet status row, not its name
again): only instances fleet status knows report health now. The reporters of the last hours
are forgotten on the way (they are the pages' "N instances" of the last 5 minutes; the next
reports make them again).
"""

import django.db.models.deletion
from django.db import migrations, models


def forget_reporters(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("audit", "ProviderReporter").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0006_fleet_indexes"),
    ]

    operations = [
        migrations.RunPython(forget_reporters, forget_reporters),
        migrations.RemoveConstraint(model_name="providerreporter", name="provider_reporter_unique"),
        migrations.RemoveField(model_name="providerreporter", name="client"),
        migrations.AddField(
            model_name="providerreporter",
            name="instance",
            field=models.ForeignKey(
                db_index=False,
                default=None,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="provider_reports",
                to="audit.fleetinstance",
            ),
            preserve_default=False,
        ),
        migrations.AddConstraint(
            model_name="providerreporter",
            constraint=models.UniqueConstraint(
                fields=("chain", "provider", "model", "instance"), name="provider_reporter_unique"
            ),
        ),
        migrations.CreateModel(
            name="ReportWindow",
            fields=[
                ("key", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("window_start", models.DateTimeField(help_text="the minute counted (UTC, truncated)")),
                ("reports", models.PositiveIntegerField()),
                ("allowed", models.PositiveIntegerField(help_text="the limit the last report was counted against")),
            ],
        ),
        migrations.CreateModel(
            name="ProviderEvidence",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("provider", models.CharField(max_length=100)),
                ("model", models.CharField(max_length=100)),
                ("minute", models.DateTimeField(help_text="the minute the reports arrived in (UTC, truncated)")),
                (
                    "token",
                    models.CharField(
                        help_text="the service token of the instance's last report that minute", max_length=100
                    ),
                ),
                ("served", models.PositiveBigIntegerField(default=0)),
                ("credentials", models.PositiveBigIntegerField(default=0)),
                ("rate_limited", models.PositiveBigIntegerField(default=0)),
                ("server_error", models.PositiveBigIntegerField(default=0)),
                ("timeout", models.PositiveBigIntegerField(default=0)),
                ("unknown", models.PositiveBigIntegerField(default=0)),
                ("unavailable", models.PositiveBigIntegerField(default=0)),
                ("verify_failed", models.PositiveBigIntegerField(default=0)),
                ("other", models.PositiveBigIntegerField(default=0)),
                (
                    "instance",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="provider_evidence",
                        to="audit.fleetinstance",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["minute"], name="provider_evidence_by_minute")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("instance", "provider", "model", "minute"), name="provider_evidence_minute"
                    )
                ],
            },
        ),
    ]
