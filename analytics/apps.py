from __future__ import annotations

from django.apps import AppConfig


class AnalyticsConfig(AppConfig):
    name = "analytics"
