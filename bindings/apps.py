from __future__ import annotations

from django.apps import AppConfig


class BindingsConfig(AppConfig):
    name = "bindings"
    verbose_name = "SSE bindings"

    def ready(self) -> None:
        from bindings import changes, models  # noqa: PLC0415  (models exist only once apps are ready)

        changes.connect([models.Endpoint, models.Route, models.RouteCondition, models.RouteFilter])
