# Tokens' purpose and evidence flags (issue 53).
#
# ``scope`` (read, write) becomes ``purpose`` (read, write, relay): the column is renamed, so
# every existing token keeps its value as its purpose, the data migrated with no rewrite. Every
# existing token keeps sending usage reports (``reports`` True, as before there was a choice)
# and none is sole evidence until an operator says so. ``ServiceToken.scope`` and
# ``create_token --scope`` stay, derived from and setting the purpose.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0011_pin_guards"),
    ]

    operations = [
        migrations.RenameField(
            model_name="servicetoken",
            old_name="scope",
            new_name="purpose",
        ),
        migrations.AlterField(
            model_name="servicetoken",
            name="purpose",
            field=models.CharField(
                choices=[("read", "Read"), ("write", "Write"), ("relay", "Relay")], default="read", max_length=10
            ),
        ),
        migrations.AddField(
            model_name="servicetoken",
            name="reports",
            field=models.BooleanField(default=True, help_text="may send usage reports (a relay's token: no)"),
        ),
        migrations.AddField(
            model_name="servicetoken",
            name="sole_evidence",
            field=models.BooleanField(
                default=False, help_text="its evidence alone may raise a page-level alert or move a guard"
            ),
        ),
    ]
