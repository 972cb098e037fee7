"""The `api-readers` group: its members may read the whole REST API (bindings.permissions)."""

from __future__ import annotations

from django.db import migrations

API_READERS = "api-readers"  # bindings.permissions.API_READERS, copied: migrations do not import app code


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name=API_READERS)


def delete_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=API_READERS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("bindings", "0004_guards_and_changes"),
    ]

    operations = [migrations.RunPython(create_group, delete_group)]
