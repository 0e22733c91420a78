"""Mailbox heads move to a narrow table of their own (the existing heads are copied), and
mailbox entries lose the FK checks and indexes nothing reads by (qim/models/mailbox.py)."""

import django.db.models.deletion
from django.db import migrations, models


def fill_factor_50(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    """Room on every page for the row's next version: updates stay in place (HOT). The two
    per-user counters every message to a group moves a thousand of."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE qim_usermailboxhead SET (fillfactor = 50)")
        schema_editor.execute("ALTER TABLE qim_userbadgestate SET (fillfactor = 50)")


class Migration(migrations.Migration):

    dependencies = [
        ('qim', '0002_control_events'),
    ]

    operations = [
        migrations.CreateModel(
            name='UserMailboxHead',
            fields=[
                ('user', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='mailbox_head', serialize=False, to='qim.user')),
                ('mailbox_head', models.PositiveBigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(fill_factor_50, migrations.RunPython.noop),
        migrations.RunSQL(
            "INSERT INTO qim_usermailboxhead (user_id, mailbox_head) "
            "SELECT id, mailbox_head FROM qim_user WHERE mailbox_head > 0",
            "UPDATE qim_user SET mailbox_head = COALESCE((SELECT h.mailbox_head FROM qim_usermailboxhead h "
            "WHERE h.user_id = qim_user.id), 0)",
        ),
        migrations.RemoveField(
            model_name='user',
            name='mailbox_head',
        ),
        migrations.AlterField(
            model_name='usermailboxentry',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='qim.conversation'),
        ),
        migrations.AlterField(
            model_name='usermailboxentry',
            name='message',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='qim.messagerecord'),
        ),
        migrations.AlterField(
            model_name='usermailboxentry',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, to='qim.tenant'),
        ),
        migrations.AlterField(
            model_name='usermailboxentry',
            name='user',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='mailbox', to='qim.user'),
        ),
    ]
