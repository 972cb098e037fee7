"""Who may use the REST API: tokens for machines, sessions for people; staff write, api-readers read."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from bindings.models import Route
from bindings.permissions import API_READERS

pytestmark = pytest.mark.django_db

ROUTE = {"name": "items", "topic": "items", "paths": ["/items"]}


def api_token(username: str, *args: str) -> str:
    out = StringIO()
    call_command("api_token", username, *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def with_token(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_it_answers_anonymous_requests_401_with_a_token_challenge(client: Client) -> None:
    response = client.get("/api/v1/routes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 401


def test_it_refuses_an_unknown_token_with_401(client: Client) -> None:
    response = with_token("0" * 40).get("/api/v1/routes/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


def test_an_admin_token_writes(client: Client) -> None:
    admin = with_token(api_token("ci"))
    created = admin.post("/api/v1/routes/", ROUTE, content_type="application/json")
    assert created.status_code == 201, created.content
    assert admin.delete("/api/v1/routes/items/").status_code == 204


def test_a_read_only_token_reads_everything_and_writes_nothing() -> None:
    Route.objects.create(name="items", topic="items")
    reader = with_token(api_token("dashboard", "--read-only"))
    for collection in ("routes", "endpoints", "guards"):
        assert reader.get(f"/api/v1/{collection}/").status_code == 200, collection
    assert reader.get("/api/v1/routes/items/").status_code == 200
    assert reader.head("/api/v1/routes/").status_code == 200
    assert reader.options("/api/v1/routes/").status_code == 200
    for method, url in [
        ("post", "/api/v1/routes/"),
        ("put", "/api/v1/routes/items/"),
        ("patch", "/api/v1/routes/items/"),
        ("delete", "/api/v1/routes/items/"),
        ("post", "/api/v1/endpoints/"),
        ("post", "/api/v1/guards/"),
    ]:
        response = getattr(reader, method)(url, ROUTE, content_type="application/json")
        assert response.status_code == 403, (method, url)
        assert "may only read" in response.json()["detail"]
    assert Route.objects.get().topic == "items"


def test_a_user_neither_staff_nor_reader_is_refused_with_403() -> None:
    user = User.objects.create_user("nobody")
    response = with_token(Token.objects.create(user=user).key).get("/api/v1/routes/")
    assert response.status_code == 403
    assert "api-readers" in response.json()["detail"]


def test_people_sign_in_with_a_session(client: Client) -> None:
    client.force_login(User.objects.create_user("reader"))
    assert client.get("/api/v1/routes/").status_code == 403
    Group.objects.get(name=API_READERS).user_set.add(User.objects.get(username="reader"))
    assert client.get("/api/v1/routes/").status_code == 200


def test_the_migration_creates_the_readers_group() -> None:
    assert Group.objects.filter(name=API_READERS).exists()


def test_api_token_creates_a_machine_user_that_cannot_sign_in() -> None:
    key = api_token("ci")
    user = User.objects.get(username="ci")
    assert user.is_staff
    assert not user.has_usable_password()
    assert Token.objects.get(user=user).key == key
    assert api_token("ci") == key, "the same token until rotated"
    rotated = api_token("ci", "--rotate")
    assert rotated != key
    assert with_token(key).get("/api/v1/routes/").status_code == 401
    assert with_token(rotated).get("/api/v1/routes/").status_code == 200


def test_api_token_read_only_joins_the_readers_and_refuses_staff() -> None:
    api_token("dashboard", "--read-only")
    user = User.objects.get(username="dashboard")
    assert not user.is_staff
    assert user.groups.filter(name=API_READERS).exists()
    User.objects.create_superuser("root", "root@example.com", "a-long-test-password")
    with pytest.raises(CommandError, match="staff"):
        api_token("root", "--read-only")


def test_api_token_refuses_a_bad_username() -> None:
    with pytest.raises(CommandError, match="username"):
        api_token("not a name!")
    assert not User.objects.exists()
