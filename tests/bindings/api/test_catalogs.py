"""Catalogs and topic models through the REST API: create, list, get, replace, merge, delete, problems keyed by
field, and a registry's Authorization header never shown back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.api.permissions import api_readers
from bindings.models import Catalog, Change, InlineSchema, TopicModel
from bindings.selectors import catalog_specs

pytestmark = pytest.mark.django_db

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "n", "type": "long"}]})
SECRET = "Basic c2VjcmV0OnBhc3N3b3Jk"


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def send(api: Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return getattr(api, method)(path, body, content_type="application/json")


def test_it_creates_shows_versions_and_deletes_an_inline_catalog(api: Client) -> None:
    body = {"name": "schemas", "subjects": {"orders-value": {"format": "avro", "schema": ORDER}}}
    created = send(api, "post", "/api/v1/catalogs/", body)
    assert created.status_code == 201, created.content
    assert created.json() == {
        "name": "schemas",
        "kind": "inline",
        "url": None,
        "auth_set": False,
        "auth_updated": None,
        "max_age_s": 300,
        "subjects": {"orders-value": {"format": "avro", "schema": ORDER, "version": 1}},
        "schemas": [{"subject": "orders-value", "version": 1, "format": "avro", "schema": ORDER}],
    }
    replaced = send(
        api, "put", "/api/v1/catalogs/schemas/", {"subjects": {"orders-value": {"format": "avro", "schema": ORDER_V2}}}
    )
    assert replaced.status_code == 200
    assert replaced.json()["subjects"]["orders-value"]["version"] == 2
    assert [s["version"] for s in api.get("/api/v1/catalogs/schemas/").json()["schemas"]] == [1, 2]
    assert [c["name"] for c in api.get("/api/v1/catalogs/").json()["results"]] == ["schemas"]
    assert send(api, "post", "/api/v1/catalogs/", body).status_code == 400  # the name is taken
    assert api.delete("/api/v1/catalogs/schemas/").status_code == 204
    assert not InlineSchema.objects.exists()


def test_it_never_shows_the_auth_header_and_keeps_it_across_merges(api: Client) -> None:
    body = {"kind": "schema-registry", "url": "http://registry:8081", "auth": SECRET, "max_age_s": 60}
    created = send(api, "put", "/api/v1/catalogs/reg/", body)
    assert created.status_code == 201
    patched = send(api, "patch", "/api/v1/catalogs/reg/", {"max_age_s": 30})
    assert patched.json()["auth_set"] is True
    assert Catalog.objects.get().auth == SECRET
    listed = api.get("/api/v1/catalogs/")
    changes = api.get("/api/v1/changes/?kind=catalog")
    for response in (created, patched, listed, changes, api.get("/api/v1/catalogs/reg/")):
        assert "c2VjcmV0" not in response.content.decode()
    cleared = send(api, "patch", "/api/v1/catalogs/reg/", {"auth": None})
    assert (cleared.json()["auth_set"], Catalog.objects.get().auth) == (False, "")


def test_bad_catalogs_are_problems_keyed_by_field(api: Client) -> None:
    body = {
        "name": "schemas",
        "subjects": {
            "a": {"format": "avro", "schema": '{"type": "record"}'},
            "b": {"format": "protobuf", "schema": "message {"},
            "c": {"format": "yaml", "schema": "{}"},
            "d": {"format": "json", "schema": "{}", "colour": "red"},
        },
    }
    response = send(api, "post", "/api/v1/catalogs/", body)
    assert response.status_code == 400
    assert response["content-type"] == "application/problem+json"
    errors = response.json()["errors"]
    assert set(errors) == {"subjects.c.format", "subjects.d.colour"}  # the shape first: nothing else is looked at
    subjects = body["subjects"]
    assert isinstance(subjects, dict)
    del subjects["c"], subjects["d"]
    errors = send(api, "post", "/api/v1/catalogs/", body).json()["errors"]
    assert set(errors) == {"subjects.a.schema", "subjects.b.schema"}
    errors = send(api, "put", "/api/v1/catalogs/reg/", {"kind": "karapace", "url": "ftp://x"}).json()["errors"]
    assert set(errors) == {"url"}


def test_it_creates_replaces_merges_and_deletes_a_topic_model(api: Client) -> None:
    send(api, "put", "/api/v1/catalogs/schemas/", {"subjects": {"orders-value": {"format": "avro", "schema": ORDER}}})
    body = {"topic": "orders-*", "key": {"model": "string"}, "value": {"model": "avro", "catalog": "schemas"}}
    created = send(api, "post", "/api/v1/topic-models/", body)
    assert created.status_code == 201, created.content
    assert created.json() == {
        "topic": "orders-*",
        "key": {"model": "string", "catalog": None, "strategy": None, "id": None, "subject": None, "version": None,
                "record": None, "encoding": "utf_8"},
        "value": {"model": "avro", "catalog": "schemas", "strategy": "topic", "id": None, "subject": None,
                  "version": "latest", "record": None, "encoding": None},
    }  # fmt: skip
    assert api.get("/api/v1/topic-models/orders-*/").json() == created.json()
    assert api.get("/api/v1/topic-models/?catalog=schemas").json()["count"] == 1
    resent = send(api, "put", "/api/v1/topic-models/orders-*/", created.json())
    assert resent.status_code == 200
    assert Change.objects.filter(kind="topic-model").count() == 1  # the same body changes nothing
    patched = send(api, "patch", "/api/v1/topic-models/orders-*/", {"key": None})
    assert (patched.json()["key"], patched.json()["value"]["model"]) == (None, "avro")
    pinned = {"model": "avro", "catalog": "schemas", "subject": "orders-value", "version": 1}
    replaced = send(api, "put", "/api/v1/topic-models/orders-*/", {"value": pinned})
    assert (replaced.json()["value"]["strategy"], replaced.json()["value"]["version"]) == ("subject", 1)
    assert api.delete("/api/v1/catalogs/schemas/").status_code == 409
    assert api.delete("/api/v1/topic-models/orders-*/").status_code == 204
    assert not TopicModel.objects.exists()


def test_bad_topic_models_are_problems_keyed_by_side_and_field(api: Client) -> None:
    send(api, "put", "/api/v1/catalogs/reg/", {"kind": "apicurio", "url": "http://apicurio:8080/apis/ccompat/v7"})
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"topic": "orders", "value": {"model": "avro"}}, {"value.catalog"}),
        ({"topic": "orders", "value": {"model": "xml"}}, {"value.model"}),
        ({"topic": "orders", "value": {"model": "avro", "catalog": "reg", "version": "first"}}, {"value.version"}),
        ({"topic": "orders", "key": {"model": "avro", "catalog": "reg", "id": 3, "subject": "s"}}, {"key.subject"}),
        ({"topic": "orders", "value": {"model": "json", "colour": "red"}}, {"value.colour"}),
        ({"topic": "orders/1", "value": {"model": "json"}}, {"topic"}),
        ({"value": {"model": "json"}}, {"topic"}),
    ]
    for body, fields in cases:
        response = send(api, "post", "/api/v1/topic-models/", body)
        assert response.status_code == 400, body
        assert set(response.json()["errors"]) == fields, (body, response.json())


def test_readers_read_catalogs_and_topic_models_but_write_neither(client: Client) -> None:
    reader = User.objects.create_user("reader", password="a-long-test-password")
    reader.groups.add(api_readers())
    client.force_login(reader)
    assert client.get("/api/v1/catalogs/").status_code == 200
    assert client.get("/api/v1/topic-models/").status_code == 200
    refused = send(client, "put", "/api/v1/topic-models/x/", {"value": {"model": "json"}})
    assert refused.status_code == 403
    assert "bindings.change_topicmodel" in refused.json()["detail"]


def test_the_openapi_schema_documents_both_resources_and_keeps_auth_write_only(api: Client) -> None:
    schema = api.get("/api/v1/schema/?format=json").json()
    assert "/api/v1/catalogs/{name}/" in schema["paths"]
    assert "/api/v1/topic-models/{topic}/" in schema["paths"]
    components = schema["components"]["schemas"]
    assert "auth" not in components["Catalog"]["properties"]
    assert "auth" in components["CatalogRequest"]["properties"]
    assert "409" in schema["paths"]["/api/v1/catalogs/{name}/"]["delete"]["responses"]


def test_a_url_with_credentials_in_it_is_refused(api: Client) -> None:
    for url in ("http://ada:s3cret@registry:8081", "https://token@registry"):
        response = send(api, "put", "/api/v1/catalogs/reg/", {"kind": "karapace", "url": url})
        assert response.status_code == 400
        assert response["content-type"] == "application/problem+json"
        assert "carries no credentials" in " ".join(response.json()["errors"]["url"])
    assert not Catalog.objects.exists()


def test_moving_the_url_to_another_host_removes_the_auth_unless_given_again(api: Client) -> None:
    body = {"kind": "schema-registry", "url": "http://registry:8081/v1", "auth": SECRET}
    assert send(api, "put", "/api/v1/catalogs/reg/", body).status_code == 201
    same_place = send(api, "patch", "/api/v1/catalogs/reg/", {"url": "HTTP://Registry:8081/v2"})
    assert same_place.json()["auth_set"] is True  # another path of the same scheme, host and port
    moved = send(api, "patch", "/api/v1/catalogs/reg/", {"url": "http://elsewhere:8081/v2"})
    assert (moved.status_code, moved.json()["auth_set"], Catalog.objects.get().auth) == (200, False, "")
    change = Change.objects.filter(kind="catalog").first()
    assert change is not None
    before, after = change.before or {}, change.after or {}
    assert (before.get("auth_set"), after.get("auth_set")) == (True, False)
    assert after.get("url") == "http://elsewhere:8081/v2"
    assert catalog_specs()[0].auth is None  # nothing goes to the new registry
    given = send(api, "put", "/api/v1/catalogs/reg/", {**body, "url": "https://third:443", "auth": "Bearer t"})
    assert (given.json()["auth_set"], Catalog.objects.get().auth) == (True, "Bearer t")
    for port in ("https://third", "https://third:8443"):  # the default port is the same port; another is not
        send(api, "patch", "/api/v1/catalogs/reg/", {"url": port})
    assert Catalog.objects.get().auth == ""


def test_a_url_saved_with_credentials_before_they_were_refused_is_shown_without_them(api: Client) -> None:
    assert send(api, "put", "/api/v1/catalogs/reg/", {"kind": "karapace", "url": "http://registry"}).status_code == 201
    Catalog.objects.update(url="http://ada:s3cret@registry:8081")  # as an older version could save it

    shown = api.get("/api/v1/catalogs/reg/")
    patched = send(api, "patch", "/api/v1/catalogs/reg/", {"max_age_s": 5})

    assert shown.json()["url"] == "http://***@registry:8081"
    assert patched.status_code == 400  # the URL as stored, refused: the operator moves the credentials to auth
    assert "s3cret" not in shown.content.decode() + patched.content.decode()
    fixed = send(api, "patch", "/api/v1/catalogs/reg/", {"url": "http://registry:8081", "auth": "Basic YWRhOnM="})
    assert (fixed.status_code, fixed.json()["url"]) == (200, "http://registry:8081")
