# The publisher's reports of a replaced forged document (issue 53).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0009_plan_and_guard_alerts"),
    ]

    operations = []
