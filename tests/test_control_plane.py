"""Routes in the admin and the API: validation on save, field errors, idempotent provisioning."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from bindings.models import Route
from bindings.services import do_put_route

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "a-long-test-password")
    client.force_login(user)
    return client


def test_put_route_is_idempotent() -> None:
    first = do_put_route(name="items", path="/items", topic="items")
    again = do_put_route(name="items", path="/items/{id}", topic="items-${params.id}")
    assert first.pk == again.pk
    assert Route.objects.get().topic == "items-${params.id}"


def test_it_refuses_a_topic_with_an_undeclared_param() -> None:
    with pytest.raises(ValidationError) as info:
        do_put_route(name="bad", path="/items", topic="items-${params.id}")
    assert "topic" in info.value.message_dict
    assert not Route.objects.exists()


def test_the_admin_shows_the_error_on_the_wrong_field(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/route/add/", {"name": "x", "path": "items", "topic": "items", "position": 0}
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["path"] == ["A path pattern starts with '/'."]


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
    assert "path" in response.json()


def test_the_api_needs_an_admin(client: Client) -> None:
    assert client.get("/api/v1/routes/").status_code in {401, 403}
