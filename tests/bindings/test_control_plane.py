"""Routes in the admin and the API: validation on save, field errors, idempotent provisioning."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from bindings.models import Route, RouteCondition, default_endpoint
from bindings.services import do_put_route

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "a-long-test-password")
    client.force_login(user)
    return client


def route_form(**fields: Any) -> dict[str, Any]:
    """An admin add-route POST: the route's fields, then `paths`, `filters` and `guards` (guard pk -> roles) as
    inline forms."""
    paths: list[str] = fields.pop("paths", ["/items"])
    filters: list[dict[str, str]] = fields.pop("filters", [])
    guards: dict[int, str] = fields.pop("guards", {})
    data: dict[str, Any] = {
        "name": "items",
        "position": 0,
        "topic": "items",
        "event_id": "${etag}",
        "start": "historical",
        "slow_client": "close",
        "conflate_ms": 0,
        "endpoint": default_endpoint(),
        **fields,
    }
    data |= {
        "conditions-TOTAL_FORMS": len(paths),
        "conditions-INITIAL_FORMS": 0,
        "conditions-MIN_NUM_FORMS": 1,
        "conditions-MAX_NUM_FORMS": 1000,
    }
    for index, path in enumerate(paths):
        data |= {f"conditions-{index}-path": path, f"conditions-{index}-position": index}
    data |= {
        "filters-TOTAL_FORMS": len(filters),
        "filters-INITIAL_FORMS": 0,
        "filters-MIN_NUM_FORMS": 0,
        "filters-MAX_NUM_FORMS": 1000,
    }
    for index, route_filter in enumerate(filters):
        data |= {
            f"filters-{index}-key": "",
            f"filters-{index}-headers": "{}",
            f"filters-{index}-value_path": "",
            f"filters-{index}-value_equals": "",
            f"filters-{index}-position": index,
        }
        data |= {f"filters-{index}-{name}": value for name, value in route_filter.items()}
    data |= {
        "guards-TOTAL_FORMS": len(guards),
        "guards-INITIAL_FORMS": 0,
        "guards-MIN_NUM_FORMS": 0,
        "guards-MAX_NUM_FORMS": 1000,
    }
    for index, (guard, roles) in enumerate(guards.items()):
        data |= {f"guards-{index}-guard": guard, f"guards-{index}-roles": roles}
    return data


def test_it_puts_a_route_idempotently() -> None:
    first = do_put_route(name="items", path="/items", topic="items")
    again = do_put_route(name="items", paths=["/items/{id}", "/things/{id}"], topic="items-${params.id}")
    assert first.pk == again.pk
    route = Route.objects.get()
    assert route.topic == "items-${params.id}"
    assert [c.path for c in route.conditions.all()] == ["/items/{id}", "/things/{id}"]
    assert RouteCondition.objects.count() == 2


def test_it_refuses_a_topic_with_an_undeclared_param() -> None:
    with pytest.raises(ValidationError) as info:
        do_put_route(name="bad", path="/items", topic="items-${params.id}")
    assert info.value.message_dict == {"topic": ["${params.id} is not declared by the path pattern /items."]}
    assert not Route.objects.exists()


def test_the_admin_creates_a_route_with_its_paths_and_filters(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/route/add/",
        route_form(
            paths=["/items/{id}"],
            topic="items-${params.id}",
            filters=[{"key": "${params.id}", "headers": '{"tag": "x"}'}, {"value_path": "status"}],
        ),
    )
    assert response.status_code == 302, response.context and response.context["errors"]
    route = Route.objects.get()
    assert [c.path for c in route.conditions.all()] == ["/items/{id}"]
    assert [(f.key, f.headers, f.value_path, f.value_equals) for f in route.filters.all()] == [
        ("${params.id}", {"tag": "x"}, "", ""),
        (None, {}, "status", ""),
    ]
    assert route.endpoint.name == "default"


def test_the_admin_shows_a_bad_pattern_on_the_path_field(admin_client: Client) -> None:
    response = admin_client.post("/admin/bindings/route/add/", route_form(paths=["items"]))
    assert response.status_code == 200
    conditions = response.context["inline_admin_formsets"][0].formset
    assert conditions.forms[0].errors["path"] == ["A path pattern starts with '/'."]
    assert not Route.objects.exists()


def test_the_admin_shows_an_undeclared_topic_param_on_the_topic_field(admin_client: Client) -> None:
    response = admin_client.post("/admin/bindings/route/add/", route_form(topic="items-${params.id}"))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["topic"] == [
        "${params.id} is not declared by the path pattern /items."
    ]
    assert not Route.objects.exists()


def test_the_admin_shows_a_pattern_that_lacks_a_param_on_that_pattern(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/route/add/", route_form(paths=["/items/{id}", "/items"], topic="items-${params.id}")
    )
    assert response.status_code == 200
    assert "topic" not in response.context["adminform"].form.errors
    forms = response.context["inline_admin_formsets"][0].formset.forms
    assert forms[0].errors == {}
    assert forms[1].errors["path"] == [
        "/items does not declare {id}, which the topic uses: every path of the route must declare it."
    ]


def test_the_admin_shows_an_undeclared_filter_param_on_the_filter_field(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/route/add/",
        route_form(filters=[{"key": "${params.id}"}, {"headers": '{"tag": "${params.tag}"}'}]),
    )
    assert response.status_code == 200
    forms = response.context["inline_admin_formsets"][1].formset.forms
    assert forms[0].errors["key"] == ["${params.id} is not declared by the path pattern /items."]
    assert forms[1].errors["headers"] == ["${params.tag} is not declared by the path pattern /items."]
    assert not Route.objects.exists()


def test_the_admin_refuses_a_route_without_paths(admin_client: Client) -> None:
    route = do_put_route(name="items", path="/items", topic="items")
    condition = route.conditions.get()
    data = route_form(paths=[])
    data |= {
        "conditions-TOTAL_FORMS": 1,
        "conditions-INITIAL_FORMS": 1,
        "conditions-0-id": condition.pk,
        "conditions-0-route": route.pk,
        "conditions-0-path": "/items",
        "conditions-0-position": 0,
        "conditions-0-DELETE": "on",
    }
    response = admin_client.post(f"/admin/bindings/route/{route.pk}/change/", data)
    assert response.status_code == 200
    assert response.context["inline_admin_formsets"][0].formset.non_form_errors() == [
        "A route needs at least one path."
    ]
    assert route.conditions.count() == 1


def test_the_admin_lists_and_searches_routes_by_path(admin_client: Client) -> None:
    do_put_route(name="items", paths=["/items", "/things"], topic="items")
    do_put_route(name="other", path="/other", topic="other")
    response = admin_client.get("/admin/bindings/route/", {"q": "things"})
    assert response.status_code == 200
    assert [r.name for r in response.context["cl"].result_list] == ["items"]
    assert "/items, /things" in response.content.decode()


def test_the_api_creates_and_lists_routes(admin_client: Client) -> None:
    created = admin_client.post(
        "/api/v1/routes/", {"name": "items", "path": "/items", "topic": "items"}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    listed = admin_client.get("/api/v1/routes/").json()
    assert [r["name"] for r in listed["results"]] == ["items"]


def test_the_api_answers_400_naming_the_bad_field(admin_client: Client) -> None:
    response = admin_client.post(
        "/api/v1/routes/", {"name": "bad", "path": "/x/{", "topic": "t"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "paths[0]" in response.json()["errors"]


def test_the_api_needs_an_admin(client: Client) -> None:
    assert client.get("/api/v1/routes/").status_code in {401, 403}


def test_the_admin_pages_render(admin_client: Client) -> None:
    route = do_put_route(name="items", path="/items/{id}", topic="items", filters=[{"key": "${params.id}"}])
    assert admin_client.get("/admin/bindings/route/add/").status_code == 200
    assert admin_client.get(f"/admin/bindings/route/{route.pk}/change/").status_code == 200
    assert admin_client.get("/admin/bindings/endpoint/").status_code == 200
    assert admin_client.get("/admin/bindings/endpoint/add/").status_code == 200


def test_the_admin_shows_a_bad_origin_on_the_origins_field(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/endpoint/add/",
        {"name": "app", "retry_ms": 2000, "keepalive_s": 15, "cors_origins": "https://app.example.com/path"},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["cors_origins"] == [
        "'https://app.example.com/path' is not an origin: write scheme://host[:port] with no path, "
        "e.g. https://app.example.com."
    ]
