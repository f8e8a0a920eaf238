"""The two roles of the on-call pages: viewer (reads) and oncall (changes selections)."""

from django.db import migrations

ROLES = ("viewer", "oncall")


def create_roles(apps, schema_editor):  # type: ignore[no-untyped-def]
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.get_or_create(name=name)


def remove_roles(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [("presets", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_roles, remove_roles)]
