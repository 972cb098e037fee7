"""Migration 0002 keeps the routes of 0001 (each route's path becomes its first condition); 0008 keeps who
used the API able to, under the model permissions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
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


@pytest.mark.django_db(transaction=True)
def test_0008_keeps_readers_reading_and_token_writers_writing() -> None:
    before = [("bindings", "0005_api_readers_group"), ("authtoken", "0004_alter_tokenproxy_options")]
    executor = migrate(before)
    latest = executor.loader.graph.leaf_nodes()
    try:
        apps = executor.loader.project_state(before).apps
        user_model = apps.get_model("auth", "User")
        writer = user_model.objects.create(username="ci", is_staff=True)
        apps.get_model("authtoken", "Token").objects.create(key="k" * 40, user=writer)
        user_model.objects.create(username="person", is_staff=True)
        apps.get_model("auth", "Group").objects.get_or_create(name="api-readers")  # a flush may have removed it

        migrate(latest)
        assert User.objects.get(username="ci").has_perms(["bindings.add_route", "bindings.delete_guard"])
        assert not User.objects.get(username="person").has_perm("bindings.view_route"), "staff alone gets nothing"
        readers = Group.objects.get(name="api-readers").permissions.values_list("codename", flat=True)
        # 0011 adds catalogs and topic models to what readers read and token writers write
        assert set(readers) == {
            "view_endpoint", "view_route", "view_guard", "view_change", "view_catalog", "view_topicmodel",
        }  # fmt: skip
        assert User.objects.get(username="ci").has_perms(["bindings.add_catalog", "bindings.delete_topicmodel"])
    finally:
        migrate(latest)
