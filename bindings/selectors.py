"""Read functions for the data plane: frozen dataclasses, never ORM objects across the async boundary."""

from __future__ import annotations

from dataclasses import dataclass

from bindings.models import Route


@dataclass(frozen=True)
class RouteSpec:
    name: str
    path: str
    topic: str


def route_specs() -> tuple[RouteSpec, ...]:
    """Every route, in the order they are tried."""
    return tuple(RouteSpec(name=r.name, path=r.path, topic=r.topic) for r in Route.objects.order_by("position", "id"))
