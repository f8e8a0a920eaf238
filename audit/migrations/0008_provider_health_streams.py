"""Streams in provider health (audit/provider_health.py): the outcome class ``interrupted``
(a stream that broke after chunks had reached the caller, a failure of the provider, so the
alerts' evidence counts it too) and the time-to-first-chunk histogram of streamed attempts,
per minute (``first_chunk_0`` .. ``first_chunk_8``, the served-latency buckets). Added with a
default of 0: PostgreSQL adds such columns without rewriting the tables, and the minutes
before stay valid (nothing streamed, nothing interrupted).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0007_usage_report_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='providerevidence',
            name='interrupted',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_0',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_1',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_2',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_3',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_4',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_5',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_6',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_7',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='first_chunk_8',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='providerhealthminute',
            name='interrupted',
            field=models.PositiveBigIntegerField(default=0),
        ),
    ]
