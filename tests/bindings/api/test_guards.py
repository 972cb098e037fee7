"""Guards and guarded routes through the REST API, and the history of who changed what."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.models import Change, Guard
from bindings.services import do_put_guard, do_put_route
from tests.support.jwt_keys import AUDIENCE, ISSUER, guard_fields, public_jwk

pytestmark = pytest.mark.django_db

GUARD: dict[str, Any] = {
    "name": "jwt",
    "issuer": ISSUER,
    "audience": AUDIENCE,
    "keys": [public_jwk()],
    "jwks_url": "",
    "roles_claim": "scope",
    "identity_claim": "sub",
    "attributes": {"tenant": "org.id"},
    "challenge_s": 0,
    "cookie": "",
    "allow_tokens_without_exp": False,
}


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def test_it_creates_shows_replaces_and_deletes_a_guard(api: Client) -> None:
    created = api.post("/api/v1/guards/", GUARD, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json() == GUARD
    assert api.get("/api/v1/guards/jwt/").json() == GUARD
    assert api.get("/api/v1/guards/").json()["results"] == [GUARD]
    body = {**GUARD, "audience": "other"}
    del body["name"]
    assert api.put("/api/v1/guards/jwt/", body, content_type="application/json").status_code == 200
    assert api.put("/api/v1/guards/jwt/", body, content_type="application/json").json()["audience"] == "other"
    patched = api.patch("/api/v1/guards/jwt/", {"challenge_s": 30}, content_type="application/json")
    assert (patched.status_code, patched.json()["challenge_s"], patched.json()["audience"]) == (200, 30, "other")
    assert api.delete("/api/v1/guards/jwt/").status_code == 204
    assert not Guard.objects.exists()


def test_a_guard_refuses_tokens_without_exp_unless_told(api: Client) -> None:
    body = {key: value for key, value in GUARD.items() if key != "allow_tokens_without_exp"}
    created = api.post("/api/v1/guards/", body, content_type="application/json")
    assert created.json()["allow_tokens_without_exp"] is False
    patched = api.patch("/api/v1/guards/jwt/", {"allow_tokens_without_exp": True}, content_type="application/json")
    assert patched.json()["allow_tokens_without_exp"] is True
    assert Guard.objects.get().allow_tokens_without_exp
    refused = api.patch("/api/v1/guards/jwt/", {"allow_tokens_without_exp": "maybe"}, content_type="application/json")
    assert refused.status_code == 400
    assert list(refused.json()["errors"]) == ["allow_tokens_without_exp"]


def test_a_plain_http_jwks_url_is_a_400_on_the_field(api: Client, settings: Any) -> None:
    settings.SSE_JWKS_ALLOW_HTTP = False
    body = {**GUARD, "keys": [], "jwks_url": "http://auth.example.com/jwks.json"}
    response = api.post("/api/v1/guards/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == {
        "jwks_url": ["A JWKS URL starts with https://: keys read over plain http could be swapped on the way."]
    }
    assert (
        api.post(
            "/api/v1/guards/",
            {**body, "jwks_url": "https://auth.example.com/jwks.json"},
            content_type="application/json",
        ).status_code
        == 201
    )


def test_put_by_name_creates_a_guard_then_is_idempotent(api: Client) -> None:
    body = {key: value for key, value in GUARD.items() if key != "name"}
    first = api.put("/api/v1/guards/jwt/", body, content_type="application/json")
    second = api.put("/api/v1/guards/jwt/", body, content_type="application/json")
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert Change.objects.filter(kind="guard").count() == 1  # a write that changes nothing is no change


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"keys": []}, "keys"),
        ({"keys": [{**public_jwk(), "alg": "HS256"}]}, "keys"),
        ({"keys": [{**public_jwk(), "n": "%%%"}]}, "keys"),
        ({"keys": "not a list"}, "keys"),
        ({"jwks_url": "not a url"}, "jwks_url"),
        ({"attributes": {"tenant": ""}}, "attributes.tenant"),
        ({"roles_claim": "a..b"}, "roles_claim"),
        ({"challenge_s": -1}, "challenge_s"),
        ({"name": "not a slug"}, "name"),
    ],
)
def test_a_bad_guard_is_a_400_naming_the_field(api: Client, changes: dict[str, Any], field: str) -> None:
    response = api.post("/api/v1/guards/", {**GUARD, **changes}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert list(response.json()["errors"]) == [field]
    assert not Guard.objects.exists()


def test_a_guard_in_use_cannot_be_deleted(api: Client) -> None:
    do_put_guard(**guard_fields("jwt"))
    do_put_route(name="items", path="/items", topic="items", guarded={"jwt": ["read"]})
    response = api.delete("/api/v1/guards/jwt/")
    assert response.status_code == 409
    assert "items" in response.json()["detail"]
    assert Guard.objects.filter(name="jwt").exists()


def test_a_route_is_guarded_by_name_with_roles(api: Client) -> None:
    do_put_guard(**guard_fields("jwt", attributes={"tenant": "org.id"}))
    body = {
        "paths": ["/items"],
        "topic": "items-${guarded['jwt'].attributes.tenant}",
        "guarded": {"jwt": ["read", "items"]},
    }
    response = api.put("/api/v1/routes/items/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["guarded"] == {"jwt": ["read", "items"]}
    assert api.get("/api/v1/routes/?guard=jwt").json()["count"] == 1
    assert api.get("/api/v1/routes/?guard=other").json()["count"] == 0


@pytest.mark.parametrize(
    ("guarded", "topic", "field"),
    [
        ({"nobody": []}, "items", "guarded.nobody"),
        ({"jwt": "read"}, "items", "guarded.jwt"),
        ({"jwt": ["has space"]}, "items", "guarded.jwt"),
        ({}, "items-${guarded['jwt'].identity}", "topic"),
        ({"jwt": []}, "items-${guarded['other'].identity}", "topic"),
    ],
    ids=["unknown-guard", "roles-not-a-list", "role-with-space", "template-without-guard", "template-other-guard"],
)
def test_a_bad_guarded_route_is_a_400_naming_the_field(
    api: Client, guarded: dict[str, Any], topic: str, field: str
) -> None:
    do_put_guard(**guard_fields("jwt"))
    body = {"paths": ["/items"], "topic": topic, "guarded": guarded}
    response = api.put("/api/v1/routes/items/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]


def test_the_history_says_who_changed_what_through_the_api(api: Client) -> None:
    api.put("/api/v1/routes/items/", {"paths": ["/items"], "topic": "items"}, content_type="application/json")
    api.patch("/api/v1/routes/items/", {"topic": "things"}, content_type="application/json")
    api.delete("/api/v1/routes/items/")
    history = api.get("/api/v1/changes/?kind=route&name=items").json()["results"]
    assert [(c["action"], c["actor"], c["source"]) for c in history] == [
        ("delete", "root", "api"), ("update", "root", "api"), ("create", "root", "api")
    ]  # fmt: skip
    assert history[1]["changed_fields"] == ["topic"]
    assert (history[1]["before"]["topic"], history[1]["after"]["topic"]) == ("items", "things")
    assert api.get("/api/v1/changes/?source=admin").json()["count"] == 0
    assert api.delete(f"/api/v1/changes/{history[0]['id']}/").status_code == 405


def test_a_template_may_read_only_attributes_its_guard_defines(api: Client) -> None:
    do_put_guard(**guard_fields("jwt", attributes={"tenant": "org.id"}))
    body = {"paths": ["/items"], "topic": "items-${guarded['jwt'].attributes.tennant}", "guarded": {"jwt": []}}
    response = api.put("/api/v1/routes/items/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "topic": ["${guarded['jwt'].attributes.tennant}: guard 'jwt' has no attribute 'tennant'."]
    }
    body["topic"] = "items-${guarded['jwt'].attributes.tenant}"
    assert api.put("/api/v1/routes/items/", body, content_type="application/json").status_code == 201
