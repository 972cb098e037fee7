"""The REST API for routes and endpoints: representation, create, replace, partial update, 400s naming the field
(under `errors` in the problem body)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.models import Route, default_endpoint
from bindings.services import do_delete_route, do_put_endpoint, do_put_route

pytestmark = pytest.mark.django_db

ITEMS: dict[str, Any] = {
    "name": "items",
    "position": 0,
    "endpoint": "default",
    "topic": "items-${params.id}",
    "paths": ["/items/{id}"],
    "filters": [
        {"key": "${params.id}", "headers": {"tag": "x"}, "value": None, "expression": ""},
        {"key": None, "headers": {}, "value": {"path": "status", "equals": "open"}, "expression": ""},
    ],
    "event_id": "${etag}",
    "start": "historical",
    "caught_up": False,
    "slow_client": "close",
    "guarded": {},
    "fields": [],
    "conflate_ms": 0,
}


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def test_it_creates_a_route_and_shows_it_as_it_was_given(api: Client) -> None:
    created = api.post("/api/v1/routes/", ITEMS, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json() == ITEMS
    assert api.get("/api/v1/routes/items/").json() == ITEMS
    assert api.get("/api/v1/routes/").json()["results"] == [ITEMS]


def test_it_refuses_to_create_a_route_twice(api: Client) -> None:
    do_put_route(name="items", path="/items", topic="items")
    response = api.post("/api/v1/routes/", ITEMS, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["name"]


def test_put_creates_then_replaces(api: Client) -> None:
    body = {key: value for key, value in ITEMS.items() if key != "name"}
    first = api.put("/api/v1/routes/items/", body, content_type="application/json")
    assert first.status_code == 201, first.content
    second = api.put(
        "/api/v1/routes/items/", {"topic": "things", "paths": ["/things"]}, content_type="application/json"
    )
    assert second.status_code == 200, second.content
    assert second.json() == {**ITEMS, "topic": "things", "paths": ["/things"], "filters": []}
    assert Route.objects.count() == 1


def test_patch_changes_only_what_it_names(api: Client) -> None:
    api.post("/api/v1/routes/", ITEMS, content_type="application/json")
    response = api.patch("/api/v1/routes/items/", {"start": "live", "position": 4}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json() == {**ITEMS, "start": "live", "position": 4}


def test_a_route_keeps_its_name(api: Client) -> None:
    api.post("/api/v1/routes/", ITEMS, content_type="application/json")
    response = api.patch("/api/v1/routes/items/", {"name": "other"}, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["name"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"topic": "items-${params.nope}"}, "topic"),
        ({"paths": ["/items/{id}", "/items"]}, "paths[1]"),
        ({"paths": "/items/{id}"}, "paths"),
        ({"filters": [ITEMS["filters"][0], {"headers": {"": "x"}}]}, "filters[1].headers"),
        ({"filters": [{"value": {"path": "", "equals": "x"}}]}, "filters[0].value.path"),
        ({"endpoint": "nope"}, "endpoint"),
        ({"start": "soon"}, "start"),
    ],
)
def test_it_answers_400_naming_the_bad_field(api: Client, change: dict[str, Any], field: str) -> None:
    response = api.post("/api/v1/routes/", {**ITEMS, **change}, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]
    assert not Route.objects.exists()


def test_it_needs_a_topic_and_paths(api: Client) -> None:
    response = api.post("/api/v1/routes/", {"name": "items"}, content_type="application/json")
    assert response.status_code == 400
    assert sorted(response.json()["errors"]) == ["paths", "topic"]


def test_it_deletes_a_route(api: Client) -> None:
    api.post("/api/v1/routes/", ITEMS, content_type="application/json")
    assert api.delete("/api/v1/routes/items/").status_code == 204
    assert not Route.objects.exists()


def test_it_creates_lists_and_updates_endpoints(api: Client) -> None:
    default_endpoint()
    created = api.post(
        "/api/v1/endpoints/",
        {"name": "app", "cors_origins": ["https://app.example.com"]},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json() == {
        "name": "app",
        "retry_ms": 2000,
        "keepalive_s": 15,
        "cors_origins": ["https://app.example.com"],
        "cors_credentials": False,
        "max_streams_per_client": None,
        "max_streams_per_identity": None,
    }
    changed = api.patch("/api/v1/endpoints/app/", {"keepalive_s": 0}, content_type="application/json")
    assert changed.json()["keepalive_s"] == 0
    limited = api.patch("/api/v1/endpoints/app/", {"max_streams_per_client": 3}, content_type="application/json")
    assert limited.json()["max_streams_per_client"] == 3
    negative = api.patch("/api/v1/endpoints/app/", {"max_streams_per_identity": -1}, content_type="application/json")
    assert negative.status_code == 400
    assert list(negative.json()["errors"]) == ["max_streams_per_identity"]
    names = [e["name"] for e in api.get("/api/v1/endpoints/").json()["results"]]
    assert names == ["app", "default"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "app", "cors_origins": ["https://app.example.com/x"]}, "cors_origins"),
        ({"name": "app", "cors_origins": ["*"], "cors_credentials": True}, "cors_credentials"),
        ({"name": "app", "retry_ms": -1}, "retry_ms"),
        ({"name": "default"}, "name"),
    ],
)
def test_it_answers_400_naming_the_bad_endpoint_field(api: Client, body: dict[str, Any], field: str) -> None:
    default_endpoint()
    response = api.post("/api/v1/endpoints/", body, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_an_endpoint_in_use_answers_409_to_delete(api: Client) -> None:
    do_put_endpoint(name="app")
    do_put_route(name="items", path="/items", topic="items", endpoint="app")
    conflict = api.delete("/api/v1/endpoints/app/")
    assert conflict.status_code == 409
    assert conflict["Content-Type"] == "application/problem+json"
    assert conflict.json()["detail"].startswith("Routes use this endpoint: items.")
    do_delete_route("items")
    assert api.delete("/api/v1/endpoints/app/").status_code == 204
