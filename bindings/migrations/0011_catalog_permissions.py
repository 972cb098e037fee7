"""Catalogs and topic models join what the API's readers read and its writers write (bindings.api.permissions).

The `api-readers` group gets their view permissions; staff users holding an API token (the writers
`manage.py api_token` made) get their view, add, change and delete permissions, as migration 0008 gave them for
endpoints, routes and guards: the Zilla import and export now read and write catalogs and topic models too.
"""

from __future__ import annotations

from django.db import migrations

API_READERS = "api-readers"  # bindings.permissions.API_READERS, copied: migrations do not import app code
MODELS = ("catalog", "topicmodel")
READ = [("view", model) for model in MODELS]
WRITE = READ + [(action, model) for action in ("add", "change", "delete") for model in MODELS]


def permissions(apps, pairs):
    """The permissions, created if missing: on a new database they are only made after every migration ran."""
    content_type_model = apps.get_model("contenttypes", "ContentType")
    permission_model = apps.get_model("auth", "Permission")
    found = []
    for action, model_name in pairs:
        model = apps.get_model("bindings", model_name)
        content_type, _ = content_type_model.objects.get_or_create(app_label="bindings", model=model_name)
        permission, _ = permission_model.objects.get_or_create(
            content_type=content_type,
            codename=f"{action}_{model_name}",
            defaults={"name": f"Can {action} {model._meta.verbose_name_raw}"},
        )
        found.append(permission)
    return found


def writers(apps):
    token_model = apps.get_model("authtoken", "Token")
    user_ids = token_model.objects.filter(user__is_staff=True, user__is_superuser=False).values("user_id")
    return apps.get_model("auth", "User").objects.filter(pk__in=user_ids)


def grant(apps, schema_editor):
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=API_READERS)
    group.permissions.add(*permissions(apps, READ))
    write = permissions(apps, WRITE)
    for user in writers(apps):
        user.user_permissions.add(*write)


def revoke(apps, schema_editor):
    group = apps.get_model("auth", "Group").objects.filter(name=API_READERS).first()
    if group is not None:
        group.permissions.remove(*permissions(apps, READ))
    write = permissions(apps, WRITE)
    for user in writers(apps):
        user.user_permissions.remove(*write)


class Migration(migrations.Migration):
    dependencies = [
        ("authtoken", "0004_alter_tokenproxy_options"),
        ("bindings", "0010_catalogs_and_topic_models"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
