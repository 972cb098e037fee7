"""The rollup's schedule: every ANALYTICS_ROLLUP_EVERY_S seconds (60 by default), editable in the admin."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations

TASK = "analytics.tasks.rollup_delivery_log"
NAME = "analytics: roll up the delivery log"


def create_schedule(apps: Any, schema_editor: Any) -> None:
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = interval_model.objects.get_or_create(every=settings.ANALYTICS_ROLLUP_EVERY_S, period="seconds")
    task_model.objects.get_or_create(name=NAME, defaults={"task": TASK, "interval": interval, "enabled": True})


def remove_schedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("analytics", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, remove_schedule)]
