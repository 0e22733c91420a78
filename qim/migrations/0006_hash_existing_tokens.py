"""Hash the plaintext tokens issued before 0005, so an upgraded deployment keeps its sessions:
a client's old token still works, and the database no longer holds it."""

import hashlib

from django.db import migrations

# Tokens issued before 0005 were 40 hex characters; digests are 64.
PLAINTEXT_LENGTH = 40


def hash_plaintext_tokens(apps, schema_editor):  # type: ignore[no-untyped-def]
    DeviceToken = apps.get_model("qim", "DeviceToken")
    plaintext = [
        key for key in DeviceToken.objects.values_list("digest", flat=True).iterator()
        if len(key) == PLAINTEXT_LENGTH
    ]
    for key in plaintext:
        # Nothing references a token row, so its primary key may change in place.
        DeviceToken.objects.filter(digest=key).update(digest=hashlib.sha256(key.encode()).hexdigest())


def forget_tokens(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Going back cannot recover plaintext: every device logs in again."""
    apps.get_model("qim", "DeviceToken").objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ("qim", "0005_tokens_hashed"),
    ]

    operations = [
        migrations.RunPython(hash_plaintext_tokens, forget_tokens),
    ]
