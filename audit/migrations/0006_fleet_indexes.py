"""Indexes for fleet status at any fleet size (audit/fleet.py ``fleet_statuses``).

Fleet status counts a chain's live instances (seen within FLEET_INSTANCE_TTL_MINUTES), but an
instance's row stays after it stops reading (a replaced pod, a scaled-down deployment): by
(chain, last_seen_at) the reads take only the live rows, however many gone ones there are.
A version's refusals are listed newest first with their count, and every version's stay: by
(chain, version, at) that is one index range, not the chain's whole refusal history.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_notifications"),
        ("presets", "0006_access_history"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="fleetinstance",
            index=models.Index(fields=["chain", "last_seen_at"], name="fleet_instance_live"),
        ),
        migrations.AddIndex(
            model_name="rejectedversion",
            index=models.Index(fields=["chain", "version", "-at"], name="rejection_of_version"),
        ),
    ]
