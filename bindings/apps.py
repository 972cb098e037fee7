from __future__ import annotations

from django.apps import AppConfig


class BindingsConfig(AppConfig):
    name = "bindings"
    verbose_name = "SSE bindings"
