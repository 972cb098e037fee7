"""Every write of the API refuses a field it does not know, at every nesting level, with its path and the field
meant; a GET's body written back (read-only fields and all) is still accepted and changes nothing.

`MISSPELT` holds one misspelling per shape of `bindings.shapes` (`tests.support.shapes`, the list the importers'
tests check too); a shape added without one fails `test_it_covers_every_shape`.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from bindings import shapes
from bindings.models import Change
from bindings.services import do_put_catalog, do_put_guard, do_put_route, do_put_topic_model, do_revoke
from tests.support.jwt_keys import guard_fields, public_jwk
from tests.support.shapes import MEANT, writable_shapes

pytestmark = pytest.mark.django_db

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
COLLECTIONS = ("routes", "endpoints", "guards", "revocations", "catalogs", "topic-models")
ROUTE = {"topic": "secrets", "paths": ["/typo"]}
GUARD = {"issuer": guard_fields()["issuer"], "audience": guard_fields()["audience"], "keys": [public_jwk()]}


def until() -> str:
    return (timezone.now() + timedelta(hours=1)).isoformat()


# shape -> (method, url, body with one misspelt field, where the error is, the field meant)
MISSPELT: dict[type[shapes.Shape], tuple[str, str, dict[str, Any], str, str]] = {
    shapes.RouteShape: ("put", "/api/v1/routes/typo/", {**ROUTE, "gaurded": {"jwt": []}}, "gaurded", "guarded"),
    shapes.FilterShape: (
        "put", "/api/v1/routes/typo/", {**ROUTE, "filters": [{"kee": "secret-only"}]}, "filters[0].kee", "key"
    ),
    shapes.FilterValueShape: (
        "put",
        "/api/v1/routes/typo/",
        {**ROUTE, "filters": [{"key": "k"}, {"value": {"path": "s", "equal": "x"}}]},
        "filters[1].value.equal",
        "equals",
    ),
    shapes.EndpointShape: ("patch", "/api/v1/endpoints/default/", {"keepalive": 5}, "keepalive", "keepalive_s"),
    shapes.GuardShape: ("put", "/api/v1/guards/jwt/", {**GUARD, "cookei": "token"}, "cookei", "cookie"),
    shapes.RevocationShape: (
        "post", "/api/v1/revocations/", {"guard": "jwt", "identity": "alice", "reasons": "x"}, "reasons", "reason"
    ),
    shapes.CatalogShape: ("put", "/api/v1/catalogs/schemas/", {"max_age": 60}, "max_age", "max_age_s"),
    shapes.InlineSubjectShape: (
        "put",
        "/api/v1/catalogs/schemas/",
        {"subjects": {"orders-value": {"format": "avro", "schema": ORDER, "verison": 2}}},
        "subjects.orders-value.verison",
        "version",
    ),
    shapes.TopicModelShape: (
        "put", "/api/v1/topic-models/orders/", {"vaule": {"model": "string"}}, "vaule", "value"
    ),
    shapes.ModelShape: (
        "put",
        "/api/v1/topic-models/orders/",
        {"value": {"model": "string", "encodign": "latin_1"}},
        "value.encodign",
        "encoding",
    ),
}  # fmt: skip


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


@pytest.fixture
def configured() -> None:
    """One object of every kind, each with every nested object: the round trip has something in each field."""
    do_put_guard(**guard_fields("jwt", attributes={"tenant": "org.tenant"}, cookie="token"))
    do_put_route(
        name="items",
        paths=["/items/{id}"],
        topic="items",
        filters=[{"key": "${params.id}", "headers": {"tag": "x"}}, {"value": {"path": "status", "equals": "open"}}],
        guarded={"jwt": ["read"]},
    )
    do_put_catalog(name="schemas", subjects={"orders-value": {"format": "avro", "schema": ORDER}})
    do_put_catalog(name="registry", kind="schema-registry", url="https://registry.example.com", auth="Basic eDp5")
    do_put_topic_model(
        topic="orders", key={"model": "string"}, value={"model": "avro", "catalog": "schemas", "version": 1}
    )
    do_revoke(guard="jwt", identity="alice", until=timezone.now() + timedelta(hours=1), reason="left")


def everything(api: Client) -> dict[str, Any]:
    return {name: api.get(f"/api/v1/{name}/").json()["results"] for name in COLLECTIONS}


def test_it_covers_every_shape() -> None:
    assert set(MISSPELT) == writable_shapes()


@pytest.mark.parametrize("shape", MISSPELT, ids=lambda shape: shape.__name__)
def test_it_refuses_a_misspelt_field_with_its_path_and_writes_nothing(
    api: Client, configured: None, shape: type[shapes.Shape]
) -> None:
    method, url, body, where, meant = MISSPELT[shape]
    if "revocations" in url:
        body = {**body, "until": until()}
    before, changes = everything(api), Change.objects.count()
    response = getattr(api, method)(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["errors"] == {where: [MEANT.format(meant)]}
    assert where in problem["detail"]
    assert f"did you mean `{meant}`?" in problem["detail"]
    assert everything(api) == before
    assert Change.objects.count() == changes


def test_the_route_typo_is_refused_and_nothing_is_served(api: Client) -> None:
    do_put_guard(**guard_fields("jwt"))
    body = {**ROUTE, "gaurded": {"jwt": ["admin"]}, "filter": [{"key": "secret-only"}]}
    response = api.put("/api/v1/routes/typo/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == {
        "gaurded": [MEANT.format("guarded")],
        "filter": [MEANT.format("filters")],
    }
    assert api.get("/api/v1/routes/typo/").status_code == 404


def test_a_field_like_no_other_is_refused_naming_every_field(api: Client) -> None:
    response = api.patch("/api/v1/endpoints/default/", {"colour": "red"}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == {
        "colour": [
            "Unknown field; known: name, retry_ms, keepalive_s, cors_origins, cors_credentials, "
            "max_streams_per_client, max_streams_per_identity."
        ]
    }


def test_an_unknown_field_is_named_with_the_other_problems_of_its_object(api: Client) -> None:
    response = api.put("/api/v1/endpoints/edge/", {"retry_ms": -1, "keepalive": 5}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert set(response.json()["errors"]) == {"retry_ms", "keepalive"}


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_a_get_body_written_back_round_trips_and_changes_nothing(
    api: Client, configured: None, collection: str
) -> None:
    before, changes = everything(api), Change.objects.count()
    for shown in before[collection]:
        key = shown.get("name", shown.get("topic", shown.get("id")))
        url = f"/api/v1/{collection}/{key}/"
        method = "patch" if collection == "revocations" else "put"  # a revocation has no PUT
        response = getattr(api, method)(url, shown, content_type="application/json")
        assert response.status_code == 200, response.content
        assert response.json() == shown
    assert everything(api) == before
    assert Change.objects.count() == changes
