"""Tokens become digests (the column is renamed and widened; 0006 hashes the old keys), a device
may hold several tokens, and users can be deactivated."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("qim", "0004_anchor_events_by_time"),
    ]

    operations = [
        migrations.AddField(
            model_name="user",
            name="is_active",
            field=models.BooleanField(default=True),
        ),
        migrations.AlterField(
            model_name="devicetoken",
            name="key",
            field=models.CharField(max_length=64, primary_key=True, serialize=False),
        ),
        migrations.AlterField(
            model_name="devicetoken",
            name="device",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="tokens", to="qim.device"
            ),
        ),
        migrations.RenameField(model_name="devicetoken", old_name="key", new_name="digest"),
    ]
