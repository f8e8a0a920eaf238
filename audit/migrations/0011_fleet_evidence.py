# The fleet's evidence bounded by who sends it (issue 53).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0010_publish_evidence"),
    ]

    operations = []
