from __future__ import annotations

from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    verbose_name = "SSE streams"
