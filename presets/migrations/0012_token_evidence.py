# Tokens' purpose and evidence flags (issue 53).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0011_pin_guards"),
    ]

    operations = []
