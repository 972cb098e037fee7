"""`route_specs()`: the data plane's view of the configuration, in order, in a fixed number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bindings.selectors import (
    EVENT_ID_KEY_AND_ETAG,
    EndpointSpec,
    FilterSpec,
    RouteSpec,
    ValueFilterSpec,
    route_specs,
)
from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from tests.support.jwt_keys import ISSUER, guard_fields

pytestmark = pytest.mark.django_db


def test_it_gives_every_setting_of_a_route() -> None:
    do_put_endpoint(name="public", retry_ms=500, keepalive_s=0, cors_origins=["https://app.example.com"])
    do_put_route(
        name="items",
        paths=["/items/{id}", "/things/{id}"],
        topic="items-${params.id}",
        filters=[
            {"key": "${params.id}", "headers": {"b": "2", "a": "1"}},
            {"value": {"path": "item.status", "equals": "open"}},
        ],
        event_id=EVENT_ID_KEY_AND_ETAG,
        start="live",
        caught_up=True,
        endpoint="public",
    )
    assert route_specs() == (
        RouteSpec(
            name="items",
            paths=("/items/{id}", "/things/{id}"),
            topic="items-${params.id}",
            filters=(
                FilterSpec(key="${params.id}", headers=(("a", "1"), ("b", "2")), value=None),
                FilterSpec(key=None, headers=(), value=ValueFilterSpec(path="item.status", equals="open")),
            ),
            event_id=EVENT_ID_KEY_AND_ETAG,
            start="live",
            caught_up=True,
            endpoint=EndpointSpec(
                name="public",
                retry_ms=500,
                keepalive_s=0,
                cors_origins=("https://app.example.com",),
                cors_credentials=False,
            ),
        ),
    )


def test_a_route_without_settings_gets_the_defaults() -> None:
    do_put_route(name="items", path="/items", topic="items")
    assert route_specs() == (RouteSpec(name="items", paths=("/items",), topic="items"),)


def test_routes_come_in_position_order_then_creation_order() -> None:
    do_put_route(name="c", path="/c", topic="c", position=1)
    do_put_route(name="a", path="/a", topic="a", position=2)
    do_put_route(name="b", path="/b", topic="b", position=1)
    assert [spec.name for spec in route_specs()] == ["c", "b", "a"]


def test_it_reads_any_number_of_routes_in_four_queries() -> None:
    do_put_guard(**guard_fields("jwt"))
    do_put_guard(**guard_fields("other"))
    for index in range(5):
        do_put_route(
            name=f"r{index}",
            paths=[f"/r{index}", f"/s{index}"],
            topic="t",
            filters=[{"key": "a"}, {"key": "b"}],
            guarded={"jwt": ["read"], "other": []},
        )
    with CaptureQueriesContext(connection) as queries:
        specs = route_specs()
    assert len(specs) == 5
    assert len(queries) == 4
    assert [(guard.name, roles) for guard, roles in specs[0].guarded] == [("jwt", ("read",)), ("other", ())]
    assert specs[0].guarded[0][0].issuer == ISSUER


def test_a_routes_delivery_is_made_once_and_follows_its_settings() -> None:
    """Every open stream of a route keeps its delivery (streams/routes/table.py): one tuple per route, not per stream;
    a route made with other settings has another, and equality of routes ignores it."""
    spec = RouteSpec(name="items", paths=("/items",), topic="items")
    assert spec.delivery() is spec.delivery()
    assert spec.delivery() == RouteSpec(name="other", paths=("/x",), topic="items").delivery()  # paths are not in it
    assert spec.delivery() != RouteSpec(name="items", paths=("/items",), topic="items", conflate_ms=500).delivery()
    assert spec == RouteSpec(name="items", paths=("/items",), topic="items")
    assert "_delivery" not in repr(spec)
