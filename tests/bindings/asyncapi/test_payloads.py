"""The AsyncAPI export carries each route's value payload schema, with its schemaFormat, from the topic model
that covers the route's topic; a registry's schema is described, not carried."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bindings.asyncapi.document import export_asyncapi, import_asyncapi
from bindings.history import Actor
from bindings.models import Route
from bindings.models.catalogs import covers, topic_glob
from bindings.services import do_put_catalog, do_put_route, do_put_topic_model
from tests.bindings.asyncapi.test_asyncapi import validate

pytestmark = pytest.mark.django_db

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
PROTO = 'syntax = "proto3";\npackage shop;\nmessage Payment { string id = 1; }\n'
ITEM = {"type": "object", "properties": {"id": {"type": "string"}}}
SERVER = "https://sse.example.com"


def event_message(document: dict[str, Any], channel: str) -> dict[str, Any]:
    message: dict[str, Any] = document["channels"][channel]["messages"]["event"]
    return message


@pytest.fixture
def routes() -> None:
    do_put_catalog(
        name="schemas",
        subjects={
            "orders-value": {"format": "avro", "schema": json.dumps(ORDER)},
            "payments": {"format": "protobuf", "schema": PROTO},
            "*-value": {"format": "json", "schema": json.dumps(ITEM)},
        },
    )
    do_put_catalog(name="reg", kind="apicurio", url="http://apicurio:8080/apis/ccompat/v7", auth="Bearer s3cr3t")
    do_put_topic_model(topic="orders", value={"model": "avro", "catalog": "schemas"})
    do_put_topic_model(topic="payments", value={"model": "protobuf", "catalog": "schemas", "subject": "payments"})
    do_put_topic_model(topic="items-*", value={"model": "json", "catalog": "schemas"})
    do_put_topic_model(topic="ticks", value={"model": "double"})
    do_put_topic_model(topic="audit", value={"model": "avro", "catalog": "reg"})
    for position, (name, topic) in enumerate(
        [("orders", "orders"), ("payments", "payments"), ("items", "items-${params.region}"), ("ticks", "ticks"),
         ("audit", "audit"), ("raw", "raw")]
    ):  # fmt: skip
        path = "/items/{region}" if "params" in topic else f"/{name}"
        do_put_route(name=name, path=path, topic=topic, position=position)


@pytest.mark.usefixtures("routes")
def test_each_inline_schema_is_the_payload_with_its_schema_format() -> None:
    document = export_asyncapi(SERVER)
    validate(document)
    assert event_message(document, "orders")["payload"] == {
        "schemaFormat": "application/vnd.apache.avro+json;version=1.9.0",
        "schema": ORDER,
    }
    assert event_message(document, "orders")["contentType"] == "application/json"
    assert event_message(document, "payments")["payload"] == {
        "schemaFormat": "application/vnd.google.protobuf;version=3",
        "schema": PROTO,
    }
    # items-${params.region} reads items-*: the wildcard subject *-value holds its schema
    assert event_message(document, "items")["payload"] == {
        "schemaFormat": "application/schema+json;version=draft-07",
        "schema": ITEM,
    }


@pytest.mark.usefixtures("routes")
def test_a_registry_schema_is_described_and_other_models_get_their_json_type() -> None:
    document = export_asyncapi(SERVER)
    audit = event_message(document, "audit")["payload"]
    assert "registry of catalog `reg`" in audit["description"]
    assert "cannot carry it" in audit["description"]
    assert "s3cr3t" not in json.dumps(document)
    assert event_message(document, "ticks")["payload"]["type"] == "number"
    raw = event_message(document, "raw")
    assert (raw["payload"]["type"], raw["contentType"]) == ("string", "text/event-stream")


@pytest.mark.usefixtures("routes")
def test_a_document_with_payload_schemas_imports_back_to_the_same_routes() -> None:
    before = list(Route.objects.order_by("name").values_list("name", "topic"))
    document = export_asyncapi(SERVER)
    import_asyncapi(document, actor=Actor(name="t", source="import"))
    assert list(Route.objects.order_by("name").values_list("name", "topic")) == before


def test_a_pattern_covers_a_route_topic_only_if_it_covers_every_topic_it_renders() -> None:
    assert topic_glob("orders-${params.region}-${params.kind}") == "orders-*-*"
    assert covers("orders-*", "orders-*")
    assert covers("*", "orders-*")
    assert covers("orders-*", "orders-eu")
    assert not covers("orders-eu-*", "orders-*")  # only some of the route's topics
    assert not covers("orders", "orders-*")
