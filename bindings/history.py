"""The configuration's history: who wrote (`Actor`), and `record`, which notes each write as a `Change` row (shown
in the admin and the API) and announces it to every web process once the transaction commits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bindings import changes
from bindings.models import Catalog, Change, Endpoint, Guard, TopicModel, routes_in_order
from bindings.representations import (
    catalog_representation,
    endpoint_representation,
    guard_representation,
    route_representation,
    topic_model_representation,
)

CATALOG = "catalog"
TOPIC_MODEL = "topic-model"


@dataclass(frozen=True)
class Actor:
    """Who writes: a user name (or a command's), and through what (admin, api, import, command, shell)."""

    name: str
    source: str

    @classmethod
    def of(cls, user: Any, source: str) -> Actor:
        """The actor for a Django user (anonymous users are named so)."""
        name = getattr(user, "get_username", lambda: "")() or "anonymous"
        return cls(name=name, source=source)


SHELL = Actor(name="shell", source="shell")


def record(kind: str, name: str, before: dict[str, Any] | None, after: dict[str, Any] | None, actor: Actor) -> None:
    """Note a write in the history and announce it after commit; a write that changed nothing is not noted."""
    if before == after:
        return
    action = Change.Action.CREATE if before is None else Change.Action.DELETE if after is None else Change.Action.UPDATE
    Change.objects.create(
        actor=actor.name[:150], source=actor.source, action=action, kind=kind, name=name, before=before, after=after
    )
    changes.announce_after_commit(kind, name)


def route_state(name: str) -> dict[str, Any] | None:
    """The route called `name` as the API shows it, or None."""
    route = routes_in_order().filter(name=name).first()
    return None if route is None else route_representation(route)


def object_state(kind: str, name: str) -> dict[str, Any] | None:
    """The endpoint, guard, route, catalog or topic model (`kind`) called `name` as the API shows it, or None
    (a topic model is named by its topic)."""
    if kind == "route":
        return route_state(name)
    if kind == CATALOG:
        catalog = Catalog.objects.prefetch_related("schemas").filter(name=name).first()
        return None if catalog is None else catalog_representation(catalog)
    if kind == TOPIC_MODEL:
        found = TopicModel.objects.select_related("key_catalog", "value_catalog").filter(topic=name).first()
        return None if found is None else topic_model_representation(found)
    if kind == "endpoint":
        endpoint = Endpoint.objects.filter(name=name).first()
        return None if endpoint is None else endpoint_representation(endpoint)
    guard = Guard.objects.filter(name=name).first()
    return None if guard is None else guard_representation(guard)
