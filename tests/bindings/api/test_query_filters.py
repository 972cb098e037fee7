"""List endpoints filter by query parameters and page with limit/offset; a bad parameter is a 400 problem."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from rest_framework.request import Request

from bindings.api.query_filters import MAX_PAGE, ApiPagination
from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from tests.support.jwt_keys import guard_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


@pytest.fixture
def routes() -> None:
    do_put_endpoint(name="app")
    do_put_guard(**guard_fields("jwt"))
    do_put_route(name="orders", topic="orders", path="/orders/{id}", position=1)
    do_put_route(name="items", topic="items", path="/shop/items", endpoint="app", position=2)
    do_put_route(name="secret", topic="items", path="/secret", guarded={"jwt": ["read"]}, position=3)


def names(api: Client, query: str, collection: str = "routes") -> list[str]:
    response = api.get(f"/api/v1/{collection}/?{query}")
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


@pytest.mark.usefixtures("routes")
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["orders", "items", "secret"]),
        ("topic=items", ["items", "secret"]),
        ("topic=item", []),
        ("endpoint=app", ["items"]),
        ("guard=jwt", ["secret"]),
        ("guard=nope", []),
        ("search=ORD", ["orders"]),
        ("search=shop", ["items"]),
        ("search=item", ["items", "secret"]),
        ("topic=items&search=sec", ["secret"]),
        ("limit=1&offset=1", ["items"]),
        (f"limit={10**30}", ["orders", "items", "secret"]),
        ("offset=-1&limit=abc", ["orders", "items", "secret"]),
    ],
)
def test_routes_filter(api: Client, query: str, expected: list[str]) -> None:
    assert names(api, query) == expected


@pytest.mark.usefixtures("routes")
def test_endpoints_and_guards_search_by_name(api: Client) -> None:
    assert names(api, "search=AP", "endpoints") == ["app"]
    assert names(api, "search=jw", "guards") == ["jwt"]
    assert names(api, "search=auth.example", "guards") == ["jwt"]
    assert names(api, "search=nope", "guards") == []


def test_a_filter_value_that_cannot_be_queried_is_a_400(api: Client) -> None:
    response = api.get("/api/v1/routes/?topic=a%00b")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["topic"]


def test_a_page_is_capped() -> None:
    """An unbounded limit would reach Postgres as an out-of-range LIMIT (a 500): it is cut to MAX_PAGE."""
    request = Request(RequestFactory().get(f"/api/v1/routes/?limit={10**30}"))
    assert ApiPagination().get_limit(request) == MAX_PAGE
