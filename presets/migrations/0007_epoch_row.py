"""The epoch's one row, so that every change can hold it (``presets.models.epoch_held``):
a change reading no row would hold nothing, and the first ``raise_epoch`` could slip between
its read and its commit."""

from django.db import migrations


def create_epoch_row(apps, schema_editor):
    Epoch = apps.get_model("presets", "Epoch")
    Epoch.objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0006_access_history"),
    ]

    operations = [
        migrations.RunPython(create_epoch_row, migrations.RunPython.noop),
    ]
