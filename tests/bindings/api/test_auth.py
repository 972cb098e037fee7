"""Who may use the REST API: tokens for machines, sessions for people; Django's model permissions decide what
each may do (view to read, add/change/delete to write), api-readers read, api_token writers write."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from bindings.api.permissions import API_READERS, READ_PERMISSIONS, api_readers
from bindings.models import Endpoint, Route

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


def test_a_user_without_permissions_is_refused_with_403_naming_the_permission() -> None:
    for staff in (False, True):  # being staff grants nothing by itself
        user = User.objects.create_user(f"nobody-{staff}", is_staff=staff)
        response = with_token(Token.objects.create(user=user).key).get("/api/v1/routes/")
        assert response.status_code == 403
        assert response["Content-Type"] == "application/problem+json"
        assert "lacks the permission bindings.view_route" in response.json()["detail"]


def test_people_sign_in_with_a_session(client: Client) -> None:
    client.force_login(User.objects.create_user("reader"))
    assert client.get("/api/v1/routes/").status_code == 403
    Group.objects.get(name=API_READERS).user_set.add(User.objects.get(username="reader"))
    assert client.get("/api/v1/routes/").status_code == 200


def test_the_migrations_create_the_readers_group_with_the_view_permissions() -> None:
    group = Group.objects.get(name=API_READERS)
    assert set(group.permissions.values_list("codename", flat=True)) == set(READ_PERMISSIONS)
    assert api_readers() == group


def view_only_staff(*codenames: str) -> Client:
    """A staff member the admin shows routes to but lets change nothing (plus `codenames`)."""
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_route", *codenames]))
    client = Client()
    client.force_login(user)
    return client


def test_a_staff_user_who_may_only_view_routes_writes_nothing_through_the_api() -> None:
    Route.objects.create(name="items", topic="items")
    viewer = view_only_staff()
    assert viewer.get("/api/v1/routes/").status_code == 200
    assert viewer.get("/api/v1/routes/items/").status_code == 200
    for method, url, permission in [
        ("post", "/api/v1/routes/", "bindings.add_route"),
        ("put", "/api/v1/routes/items/", "bindings.change_route"),
        ("patch", "/api/v1/routes/items/", "bindings.change_route"),
        ("delete", "/api/v1/routes/items/", "bindings.delete_route"),
        ("get", "/api/v1/endpoints/", "bindings.view_endpoint"),
        ("get", "/api/v1/changes/", "bindings.view_change"),
    ]:
        response = getattr(viewer, method)(url, ROUTE, content_type="application/json")
        assert response.status_code == 403, (method, url)
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["status"] == 403
        assert f"lacks the permission {permission}." in response.json()["detail"], (method, url)
    assert Route.objects.get().topic == "items"


def test_put_replaces_with_change_and_creates_only_with_add() -> None:
    Route.objects.create(name="items", topic="items")
    editor = view_only_staff("change_route")
    replaced = editor.put("/api/v1/routes/items/", {**ROUTE, "topic": "items-v2"}, content_type="application/json")
    assert replaced.status_code == 200, replaced.content
    created = editor.put("/api/v1/routes/other/", {**ROUTE, "name": "other"}, content_type="application/json")
    assert created.status_code == 403
    assert "lacks the permission bindings.add_route." in created.json()["detail"]
    assert list(Route.objects.values_list("name", "topic")) == [("items", "items-v2")]


def test_a_superuser_needs_no_permission_given(admin_client: Client) -> None:
    assert admin_client.post("/api/v1/endpoints/", {"name": "edge"}, content_type="application/json").status_code == 201
    assert admin_client.delete("/api/v1/endpoints/edge/").status_code == 204
    assert not Endpoint.objects.filter(name="edge").exists()


def test_imports_need_the_write_permissions_and_prune_needs_delete() -> None:
    viewer = view_only_staff("view_endpoint", "view_guard", "view_catalog", "view_topicmodel")
    assert viewer.get("/api/v1/export/zilla").status_code == 200
    assert viewer.get("/api/v1/asyncapi.yaml").status_code == 200
    for url in ("/api/v1/import/zilla", "/api/v1/import/asyncapi?dry_run=1"):
        response = viewer.post(url, "name: x", content_type="application/yaml")
        assert response.status_code == 403, url
        assert "bindings.add_endpoint, bindings.add_route, bindings.add_guard" in response.json()["detail"], url
    writer = User.objects.create_user("importer", is_staff=True)
    writer.user_permissions.add(
        *Permission.objects.filter(codename__regex=r"^(view|add|change)_(endpoint|route|guard|catalog|topicmodel)$")
    )
    client = Client()
    client.force_login(writer)
    pruned = client.post("/api/v1/import/zilla?prune=true", "name: x", content_type="application/yaml")
    assert pruned.status_code == 403
    assert "lacks the permission bindings.delete_route." in pruned.json()["detail"]


def test_a_method_a_view_does_not_handle_is_still_a_405() -> None:
    viewer = view_only_staff("view_endpoint", "view_guard")
    assert viewer.post("/api/v1/export/zilla", {}, content_type="application/json").status_code == 405
    assert viewer.delete("/api/v1/routes/").status_code == 405


def test_the_analytics_api_needs_view_route() -> None:
    client = Client()
    client.force_login(User.objects.create_user("analyst", is_staff=True))
    refused = client.get("/api/v1/analytics/routes/")
    assert refused.status_code == 403
    assert "bindings.view_route" in refused.json()["detail"]
    assert view_only_staff().get("/api/v1/analytics/routes/").status_code == 200


def test_api_token_creates_a_machine_user_that_cannot_sign_in() -> None:
    key = api_token("ci")
    user = User.objects.get(username="ci")
    assert user.is_staff
    assert user.has_perms(["bindings.add_route", "bindings.change_guard", "bindings.delete_endpoint"])
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
