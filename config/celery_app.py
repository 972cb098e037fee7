"""The Celery application: Redis broker, tasks discovered in the installed apps."""

from __future__ import annotations

import os

from celery import Celery

# Production unless told otherwise: `make run` and the tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

app = Celery("platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
