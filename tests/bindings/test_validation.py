"""Validation of routes, conditions and filters on save: each error keyed by the field that is wrong (endpoints:
tests/bindings/test_endpoints.py; guards: tests/bindings/api/test_guards.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from bindings.models import EVENT_ID_KEY_AND_ETAG, START_LIVE, Route, RouteFilter
from bindings.services import do_delete_route, do_put_endpoint, do_put_guard, do_put_route
from tests.support.jwt_keys import guard_fields

pytestmark = pytest.mark.django_db


def put_errors(**kwargs: Any) -> dict[str, list[str]]:
    """The message_dict `do_put_route` raises; it must have written nothing."""
    kwargs = {"name": "r", "paths": ["/items"], "topic": "items", **kwargs}
    with pytest.raises(ValidationError) as info:
        do_put_route(**kwargs)
    assert not Route.objects.filter(name=kwargs["name"]).exists()
    return info.value.message_dict


def test_it_keeps_the_old_call_working() -> None:
    route = do_put_route(name="items", path="/items", topic="items")
    assert [c.path for c in route.conditions.all()] == ["/items"]
    assert (route.endpoint.name, route.event_id, route.start, route.caught_up) == (
        "default",
        "${etag}",
        "historical",
        False,
    )


def test_it_stores_every_setting_of_a_route() -> None:
    do_put_endpoint(name="public", retry_ms=500, keepalive_s=0, cors_origins=["https://app.example.com"])
    route = do_put_route(
        name="items",
        paths=["/items/{id}"],
        topic="items",
        filters=[{"key": "${params.id}", "headers": {"tag": "x"}, "value": {"path": "item.status", "equals": ""}}],
        event_id=EVENT_ID_KEY_AND_ETAG,
        start=START_LIVE,
        caught_up=True,
        endpoint="public",
        position=3,
    )
    route.refresh_from_db()
    assert (route.endpoint.name, route.event_id, route.start, route.caught_up, route.position) == (
        "public",
        EVENT_ID_KEY_AND_ETAG,
        "live",
        True,
        3,
    )
    only = route.filters.get()
    assert (only.key, only.headers, only.value_path, only.value_equals) == (
        "${params.id}",
        {"tag": "x"},
        "item.status",
        "",
    )


def test_it_replaces_the_filters_on_a_second_put() -> None:
    do_put_route(name="items", path="/items", topic="items", filters=[{"key": "a"}, {"key": "b"}])
    do_put_route(name="items", path="/items", topic="items", filters=[{"key": "c"}])
    assert list(RouteFilter.objects.values_list("key", flat=True)) == ["c"]


def test_it_writes_nothing_when_a_second_put_is_invalid() -> None:
    do_put_route(name="items", path="/items", topic="items", filters=[{"key": "a"}])
    with pytest.raises(ValidationError):
        do_put_route(name="items", paths=["/things", "bad"], topic="things")
    route = Route.objects.get(name="items")
    assert (route.topic, [c.path for c in route.conditions.all()], route.filters.count()) == ("items", ["/items"], 1)


def test_it_deletes_a_route() -> None:
    do_put_route(name="items", path="/items", topic="items")
    assert do_delete_route("items") is True
    assert do_delete_route("items") is False
    assert not Route.objects.exists()


@pytest.mark.parametrize(
    ("kwargs", "errors"),
    [
        ({"paths": []}, {"paths": ["A route needs at least one path."]}),
        ({"paths": ["/a", "a"]}, {"paths[1]": ["A path pattern starts with '/'."]}),
        (
            {"paths": ["/a/{id"]},
            {"paths[0]": ["Segment '{id': a parameter is a whole segment, written {name}."]},
        ),
        ({"path": "/a", "paths": ["/b"]}, {"path": ["Give paths or path, not both."]}),
        ({"topic": "bad topic"}, "topic"),
        ({"topic": "a" * 250}, "topic"),
        ({"topic": "items-${params.id}"}, {"topic": ["${params.id} is not declared by the path pattern /items."]}),
        (
            {"topic": "items-${guarded['jwt'].identity}"},
            {"topic": ["${guarded['jwt']...}: the route is not guarded by 'jwt'."]},
        ),
        (
            {"topic": "items-${guarded['jwt'].roles}"},
            {
                "topic": [
                    "${guarded['jwt'].roles}: write ${guarded['<guard>'].identity} or "
                    "${guarded['<guard>'].attributes.<name>}."
                ]
            },
        ),
        (
            {"guarded": {"nobody": ["read"]}},
            {"guarded.nobody": ["There is no guard named 'nobody'."]},
        ),
        (
            {"topic": "items-${etag}"},
            {
                "topic": [
                    "${etag} is not a template expression: write ${params.<name>} or ${guarded['<guard>'].identity}."
                ]
            },
        ),
        ({"event_id": "${key}"}, "event_id"),
        ({"start": "earliest"}, "start"),
        ({"endpoint": "nope"}, {"endpoint": ["There is no endpoint named 'nope'."]}),
        ({"name": "not a slug"}, "name"),
        ({"position": -1}, "position"),
    ],
)
def test_it_refuses_a_bad_route_on_the_right_field(kwargs: dict[str, Any], errors: dict[str, list[str]] | str) -> None:
    found = put_errors(**kwargs)
    if isinstance(errors, str):
        assert list(found) == [errors]
    else:
        assert found == errors


def test_a_param_must_be_declared_by_every_path() -> None:
    found = put_errors(paths=["/items/{id}", "/all/{id}/{tag}", "/things"], topic="items-${params.id}")
    assert found == {
        "paths[2]": ["/things does not declare {id}, which the topic uses: every path of the route must declare it."]
    }


def test_a_param_that_no_path_declares_is_the_templates_error() -> None:
    found = put_errors(paths=["/a/{x}", "/b/{x}"], topic="t-${params.id}-${params.tag}")
    assert found == {
        "topic": [
            "${params.id} is not declared by the path patterns /a/{x}, /b/{x}.",
            "${params.tag} is not declared by the path patterns /a/{x}, /b/{x}.",
        ]
    }


def test_a_path_lacking_params_of_several_templates_names_them_all() -> None:
    found = put_errors(
        paths=["/items/{id}", "/items"],
        topic="items-${params.id}",
        filters=[{"key": "${params.id}", "headers": {"h": "${params.id}"}}],
    )
    assert found == {
        "paths[1]": [
            "/items does not declare {id}, which the topic and a filter's key and a filter's header 'h' use: "
            "every path of the route must declare it."
        ]
    }


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        ({}, {"filters[0]": ["A filter needs a key, a header, a value condition or an expression."]}),
        ("key", {"filters[0]": ["A filter is an object with a key, headers and/or a value."]}),
        (
            {"key": "k", "other": 1},
            {"filters[0].other": ["Unknown field; known: key, headers, value, expression."]},
        ),
        ({"key": 1}, "filters[0].key"),
        ({"key": "${params.id}"}, {"filters[0].key": ["${params.id} is not declared by the path pattern /items."]}),
        (
            {"key": "${guarded['g'].attributes.a}"},
            {"filters[0].key": ["${guarded['g']...}: the route is not guarded by 'g'."]},
        ),
        (
            {"headers": ["tag", "x"]},
            {"filters[0].headers": ['Headers are an object of header name -> value, e.g. {"tag": "x"}.']},
        ),
        ({"headers": {"": "x"}}, {"filters[0].headers": ["A header name cannot be empty."]}),
        ({"headers": {"tag": 1}}, {"filters[0].headers": ["Header 'tag': the value must be a string, not a number."]}),
        (
            {"headers": {"tag": "${params.tag}"}},
            {"filters[0].headers": ["${params.tag} is not declared by the path pattern /items."]},
        ),
        (
            {"value": {"equals": "open"}},
            {"filters[0].value.path": ["A value filter needs the path of the value to compare."]},
        ),
        ({"value": {"path": "a..b", "equals": "x"}}, "filters[0].value.path"),
        ({"value": {"path": ".a", "equals": "x"}}, "filters[0].value.path"),
        ({"value": "status"}, "filters[0].value"),
        ({"value": {"path": "status", "equals": 1}}, "filters[0].value.equals"),
        (
            {"value": {"path": "status", "equals": "${params.s}"}},
            {"filters[0].value.equals": ["${params.s} is not declared by the path pattern /items."]},
        ),
    ],
)
def test_it_refuses_a_bad_filter_on_the_right_field(spec: object, errors: dict[str, list[str]] | str) -> None:
    found = put_errors(filters=[spec])
    if isinstance(errors, str):
        assert list(found) == [errors]
    else:
        assert found == errors


@pytest.mark.parametrize(
    "spec",
    [
        {"key": ""},
        {"headers": {"tag": ""}},
        {"value": {"path": "status", "equals": ""}},
        {"value": {"path": "item.status"}},
        {
            "key": "${params.id}",
            "headers": {"a": "${params.id}", "b": "x"},
            "value": {"path": "s", "equals": "${params.id}"},
        },
    ],
)
def test_it_accepts_good_filters(spec: dict[str, Any]) -> None:
    do_put_route(name="r", path="/items/{id}", topic="items", filters=[spec])


def test_placeholders_that_touch_beside_a_guarded_value_are_an_error_on_the_template() -> None:
    do_put_guard(**guard_fields("jwt"))
    errors = put_errors(paths=["/items/{s}"], topic="t-${guarded['jwt'].identity}${params.s}", guarded={"jwt": []})
    assert errors == {
        "topic": [
            "${guarded['jwt'].identity} and ${params.s} touch: put a separator between them (e.g. '-'), which "
            "values filled in next to it may then not contain."
        ]
    }
    errors = put_errors(
        paths=["/items/{s}"], topic="t", guarded={"jwt": []}, filters=[{"key": "${params.s}${guarded['jwt'].identity}"}]
    )
    assert list(errors) == ["filters[0].key"]
