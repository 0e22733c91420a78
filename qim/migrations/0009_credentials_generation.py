"""The credentials generation row and the triggers that bump it (qim/models/credentials.py).

Triggers, not code: a revocation that skips the application (a queryset's update, raw SQL, a
restore script) must still move it, or a node would keep serving a revoked token (the token
re-check made O(changes): docs/performance.md,
"Idle cost: the timing wheel and the kernel's TCP keepalive")."""

from django.db import migrations, models

BUMP = "UPDATE qim_credentialsgeneration SET generation = generation + 1"
USER_CHANGED = "OLD.is_active IS NOT NEW.is_active OR OLD.tenant_id IS NOT NEW.tenant_id"
DEVICE_CHANGED = "OLD.user_id IS NOT NEW.user_id OR OLD.device_id IS NOT NEW.device_id"

SQLITE = [
    f"CREATE TRIGGER qim_credgen_token_delete AFTER DELETE ON qim_devicetoken BEGIN {BUMP}; END",
    f"CREATE TRIGGER qim_credgen_token_update AFTER UPDATE ON qim_devicetoken BEGIN {BUMP}; END",
    f"CREATE TRIGGER qim_credgen_user_update AFTER UPDATE ON qim_user WHEN {USER_CHANGED} BEGIN {BUMP}; END",
    f"CREATE TRIGGER qim_credgen_user_delete AFTER DELETE ON qim_user BEGIN {BUMP}; END",
    f"CREATE TRIGGER qim_credgen_device_update AFTER UPDATE ON qim_device WHEN {DEVICE_CHANGED} BEGIN {BUMP}; END",
    f"CREATE TRIGGER qim_credgen_device_delete AFTER DELETE ON qim_device BEGIN {BUMP}; END",
]
SQLITE_DROP = [f"DROP TRIGGER IF EXISTS {s.split()[2]}" for s in SQLITE]

# PostgreSQL: statement-level where any row counts (a bulk delete bumps once), TRUNCATE too;
# row-level with a WHEN where only some columns count.
PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION qim_bump_credentials_generation() RETURNS trigger "
    f"LANGUAGE plpgsql AS $$ BEGIN {BUMP}; RETURN NULL; END $$"
)
PG_CHANGED = {"user": USER_CHANGED.replace("IS NOT", "IS DISTINCT FROM"),
              "device": DEVICE_CHANGED.replace("IS NOT", "IS DISTINCT FROM")}
EXECUTE = "EXECUTE FUNCTION qim_bump_credentials_generation()"
POSTGRES = [
    PG_FUNCTION,
    f"CREATE TRIGGER qim_credgen_token AFTER DELETE OR UPDATE OR TRUNCATE ON qim_devicetoken FOR EACH STATEMENT {EXECUTE}",
    f"CREATE TRIGGER qim_credgen_user_update AFTER UPDATE ON qim_user FOR EACH ROW WHEN ({PG_CHANGED['user']}) {EXECUTE}",
    f"CREATE TRIGGER qim_credgen_user_delete AFTER DELETE OR TRUNCATE ON qim_user FOR EACH STATEMENT {EXECUTE}",
    f"CREATE TRIGGER qim_credgen_device_update AFTER UPDATE ON qim_device FOR EACH ROW WHEN ({PG_CHANGED['device']}) {EXECUTE}",
    f"CREATE TRIGGER qim_credgen_device_delete AFTER DELETE OR TRUNCATE ON qim_device FOR EACH STATEMENT {EXECUTE}",
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS qim_credgen_token ON qim_devicetoken",
    "DROP TRIGGER IF EXISTS qim_credgen_user_update ON qim_user",
    "DROP TRIGGER IF EXISTS qim_credgen_user_delete ON qim_user",
    "DROP TRIGGER IF EXISTS qim_credgen_device_update ON qim_device",
    "DROP TRIGGER IF EXISTS qim_credgen_device_delete ON qim_device",
    "DROP FUNCTION IF EXISTS qim_bump_credentials_generation()",
]


def statements(schema_editor, forward: bool) -> list[str]:  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        return SQLITE if forward else SQLITE_DROP
    if vendor == "postgresql":
        return POSTGRES if forward else POSTGRES_DROP
    raise RuntimeError(f"no credentials-generation triggers for {vendor}: revocations would go unseen")


def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    apps.get_model("qim", "CredentialsGeneration").objects.using(schema_editor.connection.alias).get_or_create(pk=1)
    for statement in statements(schema_editor, True):
        schema_editor.execute(statement)


def drop(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    for statement in statements(schema_editor, False):
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('qim', '0008_tenant_message_retention'),
    ]

    operations = [
        migrations.CreateModel(
            name='CredentialsGeneration',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(create, drop),
    ]
