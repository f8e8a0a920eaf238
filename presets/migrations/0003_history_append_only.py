"""The history tables are append-only in the database itself, not only in the code: on
PostgreSQL a trigger refuses every UPDATE and DELETE of their rows, whoever connects.

(TRUNCATE, which test teardown and `manage.py flush` use, is not a row change and still
works.) SQLite, used for local runs, gets nothing: this is a production safeguard.
"""

from django.db import migrations

TABLES = ["presets_historicalselection", "presets_historicalpreset", "presets_historicalchain"]

FUNCTION = """
CREATE OR REPLACE FUNCTION controlplane_history_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'history is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)  # its % are PL/pgSQL's, not placeholders
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION controlplane_history_is_append_only()"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS controlplane_history_is_append_only()")


class Migration(migrations.Migration):
    dependencies = [("presets", "0002_roles")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
