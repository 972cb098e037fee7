"""Write functions: every change to the configuration goes through here."""

from __future__ import annotations

from django.db import transaction

from bindings.models import Route


@transaction.atomic
def do_put_route(*, name: str, path: str, topic: str, position: int = 0) -> Route:
    """Create or update the route called `name` (idempotent), validating it as the admin does."""
    route = Route.objects.filter(name=name).first() or Route(name=name)
    route.path, route.topic, route.position = path, topic, position
    route.full_clean()
    route.save()
    return route
