"""Migration 0002 keeps the routes of 0001: each route's path becomes its first condition."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from bindings.models import Route

BEFORE = [("bindings", "0001_initial")]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


@pytest.mark.django_db(transaction=True)
def test_it_turns_each_path_into_a_condition_and_back() -> None:
    executor = migrate(BEFORE)
    latest = executor.loader.graph.leaf_nodes()
    try:
        old_route = executor.loader.project_state(BEFORE).apps.get_model("bindings", "Route")
        old_route.objects.create(name="items", path="/items/{id}", topic="items-${params.id}", position=2)

        migrate(latest)
        route = Route.objects.get()
        assert (route.name, route.topic, route.position) == ("items", "items-${params.id}", 2)
        assert [c.path for c in route.conditions.all()] == ["/items/{id}"]
        assert route.endpoint.name == "default"

        executor = migrate(BEFORE)
        old_route = executor.loader.project_state(BEFORE).apps.get_model("bindings", "Route")
        assert list(old_route.objects.values_list("name", "path")) == [("items", "/items/{id}")]
    finally:
        migrate(latest)
