"""The importers' shared core and the shapes every write is checked against, whoever writes."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from bindings.asyncapi.document import AsyncApiImportError, export_asyncapi, import_asyncapi
from bindings.documents.importing import ImportProblems, Write, run_import
from bindings.history import Actor
from bindings.models import Change, Endpoint, Guard, Route
from bindings.services import do_put_endpoint, do_put_guard, do_put_route

pytestmark = pytest.mark.django_db

ACTOR = Actor(name="test", source="import")


def writes(*, route_topic: str = "items") -> list[Write]:
    """An endpoint, a route on it and a guard, each placed at a made-up spot of a document."""
    return [
        Write(
            "endpoint",
            "eu",
            "doc.eu",
            partial(do_put_endpoint, name="eu", retry_ms=500, actor=ACTOR),
            lambda key: f"doc.eu.{key}",
        ),
        Write(
            "route",
            "items",
            "doc.items",
            partial(do_put_route, name="items", path="/items", topic=route_topic, endpoint="eu", actor=ACTOR),
            lambda key: f"doc.items.{key}" if key else "doc.items",
        ),
        Write(
            "guard",
            "jwt",
            "doc.jwt",
            partial(do_put_guard, name="jwt", issuer="https://issuer", audience="", actor=ACTOR),
            lambda key: f"doc.jwt.{key}",
        ),
    ]


def test_every_problem_is_reported_where_it_is_and_nothing_is_written() -> None:
    changes = Change.objects.count()
    with pytest.raises(ImportProblems) as refused:
        run_import(writes(route_topic="not a topic!"), dry_run=False)
    errors = refused.value.errors
    assert {"doc.items.topic", "doc.jwt.audience"} <= set(errors)  # the later problems are found too
    assert not Endpoint.objects.filter(name="eu").exists()  # the write that succeeded is rolled back
    assert Change.objects.count() == changes


def test_a_dry_run_reports_what_the_import_would_do_and_rolls_back() -> None:
    good = [write for write in writes() if write.kind != "guard"]
    result = run_import(good, dry_run=True, ignored=["channel x: ignored, not SSE"])
    assert [(item.kind, item.name, item.action, item.origin) for item in result.objects] == [
        ("endpoint", "eu", "created", "doc.eu"),
        ("route", "items", "created", "doc.items"),
    ]
    assert result.as_dict()["ignored"] == ["channel x: ignored, not SSE"]
    assert result.lines()[:2] == ["endpoint eu: would create", "route items: would create"]
    assert not Route.objects.filter(name="items").exists()


def test_a_second_run_reports_each_changed_field_and_the_rest_unchanged() -> None:
    good = [write for write in writes() if write.kind != "guard"]
    run_import(good, dry_run=False)
    again = [*good[:1], *(w for w in writes(route_topic="items-v2") if w.kind == "route")]
    result = run_import(again, dry_run=False)
    assert [(item.name, item.action) for item in result.objects] == [("eu", "unchanged"), ("items", "updated")]
    assert result.of("updated")[0].changes == {"topic": ("items", "items-v2")}
    assert result.as_dict()["updated"] == [
        {
            "kind": "route",
            "name": "items",
            "from": "doc.items",
            "changes": {"topic": {"before": "items", "after": "items-v2"}},
        }
    ]


def test_an_asyncapi_import_reports_field_diffs_like_the_zilla_import() -> None:
    do_put_route(name="items", path="/items", topic="items")
    document: Any = export_asyncapi("http://x")
    document["channels"]["items"]["x-sse-kafka"]["topic"] = "items-v2"
    result = import_asyncapi(document, dry_run=True)
    assert result.as_dict()["updated"] == [
        {
            "kind": "route",
            "name": "items",
            "from": "channels.items",
            "changes": {"topic": {"before": "items", "after": "items-v2"}},
        }
    ]
    assert Route.objects.get(name="items").topic == "items"


def test_an_asyncapi_import_places_a_wrong_type_from_the_route_shape() -> None:
    document: Any = {
        "asyncapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "channels": {"items": {"address": "/items", "x-sse-kafka": {"topic": ["items"]}}},
    }
    with pytest.raises(AsyncApiImportError) as refused:
        import_asyncapi(document)
    assert list(refused.value.errors) == ["channels.items.x-sse-kafka.topic"]


GUARD = {"name": "g", "issuer": "https://i", "audience": "a"}


@pytest.mark.parametrize(
    ("put", "arguments", "field"),
    [
        (do_put_endpoint, {"name": "e", "cors_origins": ["https://a", 5]}, "cors_origins[1]"),
        (do_put_endpoint, {"name": "e", "cors_credentials": "maybe"}, "cors_credentials"),
        (do_put_guard, {**GUARD, "roles_claim": 5}, "roles_claim"),
        (do_put_guard, {**GUARD, "attributes": {"a": 1}}, "attributes.a"),
        (do_put_route, {"name": "r", "path": "/r", "topic": 5}, "topic"),
        (do_put_route, {"name": "r", "path": "/r", "topic": "r", "start": "sometime"}, "start"),
        (do_put_route, {"name": "r", "path": "/r", "topic": "r", "position": -1}, "position"),
    ],
)
def test_the_services_check_each_write_against_its_shape(put: Any, arguments: dict[str, Any], field: str) -> None:
    """The shell and the importers get the answers the API gets: the shapes are checked by the services."""
    with pytest.raises(ValidationError) as refused:
        put(**arguments)
    assert list(refused.value.message_dict) == [field]
    assert not Endpoint.objects.filter(name="e").exists()
    assert not Guard.objects.exists()
    assert not Route.objects.exists()
