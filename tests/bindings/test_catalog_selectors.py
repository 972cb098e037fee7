"""catalog_specs and topic_model_specs: the frozen specs the data plane decodes with, and which pattern wins."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bindings.selectors import (
    CatalogSpec,
    InlineSchemaSpec,
    ModelSpec,
    TopicModelsSpec,
    catalog_specs,
    topic_model_specs,
    topic_models_for,
)
from bindings.services import do_put_catalog, do_put_topic_model

pytestmark = pytest.mark.django_db

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "n", "type": "int"}]})


def test_it_gives_catalogs_with_every_inline_version_and_the_registry_header() -> None:
    do_put_catalog(name="schemas", subjects={"orders-value": {"format": "avro", "schema": ORDER}})
    do_put_catalog(name="schemas", subjects={"orders-value": {"format": "avro", "schema": ORDER_V2}})
    do_put_catalog(name="reg", kind="karapace", url="http://karapace:8081", auth="Basic eDp5", max_age_s=30)
    assert catalog_specs() == (
        CatalogSpec(name="reg", kind="karapace", url="http://karapace:8081", auth="Basic eDp5", max_age_s=30),
        CatalogSpec(
            name="schemas",
            kind="inline",
            url=None,
            auth=None,
            max_age_s=300,
            schemas=(
                InlineSchemaSpec(subject="orders-value", version=1, format="avro", text=ORDER),
                InlineSchemaSpec(subject="orders-value", version=2, format="avro", text=ORDER_V2),
            ),
        ),
    )


def test_it_gives_each_way_of_choosing_a_schema() -> None:
    do_put_catalog(name="schemas", subjects={"orders-value": {"format": "avro", "schema": ORDER}})
    do_put_catalog(name="reg", kind="schema-registry", url="http://registry:8081")
    do_put_topic_model(topic="orders", key={"model": "string"}, value={"model": "avro", "catalog": "schemas"})
    do_put_topic_model(topic="payments", value={"model": "avro", "catalog": "reg", "id": 42})
    do_put_topic_model(
        topic="shipments", value={"model": "protobuf", "catalog": "reg", "subject": "s", "version": 3, "record": "a.S"}
    )
    do_put_topic_model(topic="ticks", key={"model": "int64"}, value={"model": "json"})
    specs = {spec.topic_pattern: spec for spec in topic_model_specs()}
    assert specs["orders"] == TopicModelsSpec(
        topic_pattern="orders",
        key=ModelSpec(model="string", encoding="utf_8"),
        value=ModelSpec(model="avro", catalog="schemas", strategy="topic", version="latest"),
    )
    assert specs["payments"].value == ModelSpec(model="avro", catalog="reg", schema_id=42)
    assert specs["shipments"].value == ModelSpec(model="protobuf", catalog="reg", subject="s", version=3, record="a.S")
    assert specs["ticks"] == TopicModelsSpec(
        topic_pattern="ticks", key=ModelSpec(model="int64"), value=ModelSpec("json")
    )


def test_the_most_specific_pattern_wins() -> None:
    for topic in ("*", "orders-*", "orders-eu-*", "orders-eu-1", "*-1"):
        do_put_topic_model(topic=topic, value={"model": "json"})
    specs = topic_model_specs()
    assert [spec.topic_pattern for spec in specs] == ["orders-eu-1", "orders-eu-*", "orders-*", "*-1", "*"]

    def winner(topic: str) -> str | None:
        found = topic_models_for(specs, topic)
        return None if found is None else found.topic_pattern

    assert winner("orders-eu-1") == "orders-eu-1"
    assert winner("orders-eu-2") == "orders-eu-*"
    assert winner("orders-us-1") == "orders-*"  # seven literal characters beat two
    assert winner("payments-1") == "*-1"
    assert winner("payments") == "*"
    assert winner("orders-") == "orders-*"  # `*` matches no character too


def test_a_topic_no_pattern_covers_has_no_models() -> None:
    do_put_topic_model(topic="orders-*", value={"model": "json"})
    assert topic_models_for(topic_model_specs(), "payments") is None


def test_it_reads_any_number_of_topic_models_in_one_query() -> None:
    do_put_catalog(name="reg", kind="schema-registry", url="http://registry:8081")
    for index in range(5):
        do_put_topic_model(topic=f"t{index}", key={"model": "avro", "catalog": "reg"}, value={"model": "json"})
    with CaptureQueriesContext(connection) as queries:
        assert len(topic_model_specs()) == 5
    assert len(queries) == 1


def test_it_gives_each_catalog_the_limits_the_settings_set(settings: Any) -> None:
    settings.SSE_REGISTRY_CACHE_ENTRIES, settings.SSE_REGISTRY_CACHE_BYTES = 50, 9_000_000
    settings.SSE_REGISTRY_LOOKUPS_PER_S, settings.SSE_REGISTRY_GIVE_UP_S = 3, 7
    settings.SSE_PROTOC_TIMEOUT_S, settings.SSE_PROTOC_MAX_BYTES = 4, 100_000
    do_put_catalog(name="reg", kind="karapace", url="http://karapace:8081")

    (spec,) = catalog_specs()

    assert (spec.cache_entries, spec.cache_bytes, spec.lookups_per_s, spec.give_up_s) == (50, 9_000_000, 3, 7)
    assert (spec.protoc_timeout_s, spec.protoc_max_bytes) == (4, 100_000)
