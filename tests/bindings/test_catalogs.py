"""Catalogs and topic models written through bindings.services: validation keyed by field, inline schema
versions, write-only credentials, the history and the change events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.core.exceptions import ValidationError

from bindings.history import Actor
from bindings.models import Catalog, Change, InlineSchema, TopicModel
from bindings.services import (
    do_delete_catalog,
    do_delete_topic_model,
    do_put_catalog,
    do_put_topic_model,
)

pytestmark = pytest.mark.django_db(transaction=True)

ORDER_V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
ORDER_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int", "default": 0}],
    }
)
PROTO = 'syntax = "proto3"; package shop; message Order { string id = 1; }'
ACTOR = Actor(name="tester", source="shell")


def errors_of(call: Any, **kwargs: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call(**kwargs)
    return caught.value.message_dict


@pytest.fixture
def announced() -> Iterator[list[tuple[str, str]]]:
    """The change events sent (kind, name), once their transaction committed."""
    sent: list[tuple[str, str]] = []
    with mock.patch("bindings.changes.announce", side_effect=lambda kind, name: sent.append((kind, name))):
        yield sent


def inline(**subjects: tuple[str, str]) -> Catalog:
    given = {name.replace("_", "-"): {"format": f, "schema": text} for name, (f, text) in subjects.items()}
    return do_put_catalog(name="schemas", subjects=given, actor=ACTOR)


def test_it_keeps_every_version_of_a_subject_and_adds_one_per_new_text() -> None:
    inline(orders_value=("avro", ORDER_V1))
    inline(orders_value=("avro", ORDER_V1))  # the same text: no new version
    inline(orders_value=("avro", ORDER_V2))
    versions = list(InlineSchema.objects.filter(subject="orders-value").values_list("version", "text"))
    assert versions == [(1, ORDER_V1), (2, ORDER_V2)]


def test_it_refuses_a_version_that_holds_another_text() -> None:
    inline(orders_value=("avro", ORDER_V1))
    errors = errors_of(
        do_put_catalog,
        name="schemas",
        subjects={"orders-value": {"format": "avro", "schema": ORDER_V2, "version": 1}},
    )
    assert "Version 1 holds another schema" in errors["subjects.orders-value.version"][0]


def test_it_puts_each_bad_schema_on_its_subject() -> None:
    errors = errors_of(
        do_put_catalog,
        name="schemas",
        subjects={
            "a": {"format": "avro", "schema": '{"type": "record"}'},
            "b": {"format": "protobuf", "schema": "message {"},
            "c": {"format": "json", "schema": '{"type": 7}'},
            "bad subject": {"format": "json", "schema": "{}"},
        },
    )
    assert set(errors) == {"subjects.a.schema", "subjects.b.schema", "subjects.c.schema", "subjects.bad subject"}
    assert not Catalog.objects.exists()


def test_it_refuses_a_registry_without_url_and_an_inline_catalog_with_one() -> None:
    assert "url" in errors_of(do_put_catalog, name="reg", kind="schema-registry")
    errors = errors_of(do_put_catalog, name="inl", url="http://registry:8081", auth="Basic x")
    assert set(errors) == {"url", "auth"}


def test_it_keeps_the_auth_header_unless_given_and_records_only_that_it_changed(
    announced: list[tuple[str, str]],
) -> None:
    do_put_catalog(name="reg", kind="karapace", url="http://registry:8081", auth="Basic c2VjcmV0", actor=ACTOR)
    do_put_catalog(name="reg", kind="karapace", url="http://registry:8081", max_age_s=60, actor=ACTOR)
    assert Catalog.objects.get(name="reg").auth == "Basic c2VjcmV0"
    do_put_catalog(name="reg", kind="karapace", url="http://registry:8081", max_age_s=60, auth="Bearer t2")
    changes = list(Change.objects.filter(kind="catalog").order_by("id"))
    assert [change.action for change in changes] == ["create", "update", "update"]
    assert "auth_updated" in changes[2].changed_fields()
    assert "c2VjcmV0" not in json.dumps([c.after for c in changes])
    assert "t2" not in json.dumps(changes[2].after)
    assert announced == [("catalog", "reg")] * 3


def test_it_keys_topic_model_errors_by_side_and_field() -> None:
    inline(orders_value=("avro", ORDER_V1))
    do_put_catalog(name="reg", kind="apicurio", url="http://registry:8080/apis/ccompat/v7")
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"value": {"model": "avro"}}, "value.catalog", "needs the catalog"),
        ({"value": {"model": "string", "catalog": "schemas"}}, "value.catalog", "needs no schema"),
        ({"value": {"model": "avro", "catalog": "nope"}}, "value.catalog", "no catalog named"),
        ({"value": {"model": "avro", "catalog": "schemas", "id": 4}}, "value.strategy", "inline catalog"),
        ({"value": {"model": "avro", "catalog": "schemas", "subject": "x"}}, "value.subject", "no subject 'x'"),
        ({"value": {"model": "avro", "catalog": "schemas", "subject": "orders-value", "version": 3}}, "value.version",
         "no version 3"),
        ({"key": {"model": "avro", "catalog": "schemas"}}, "key.strategy", "no subject 'orders-key'"),
        ({"value": {"model": "protobuf", "catalog": "schemas"}}, "value.strategy", "holds a avro schema"),
        ({"value": {"model": "string", "encoding": "klingon"}}, "value.encoding", "Unknown encoding"),
        ({"value": {"model": "avro", "catalog": "reg", "record": "X"}}, "value.record", "Only a protobuf"),
        ({"value": {"model": "json", "strategy": "topic"}}, "value.strategy", "Without a catalog"),
        ({}, "value.model", "Give the key's model"),
    ]  # fmt: skip
    for sides, field, says in cases:
        errors = errors_of(do_put_topic_model, topic="orders", **sides)
        assert field in errors, (sides, errors)
        assert says in " ".join(errors[field]), (sides, errors)
    assert "topic" in errors_of(do_put_topic_model, topic="orders/x", value={"model": "string"})
    assert not TopicModel.objects.exists()


def test_it_stores_a_model_the_same_however_it_is_written() -> None:
    inline(orders_value=("avro", ORDER_V1))
    first = do_put_topic_model(topic="orders", value={"model": "avro", "catalog": "schemas"})
    assert (first.value_strategy, first.value_version) == ("topic", "latest")
    do_put_topic_model(topic="orders", value={"model": "avro", "catalog": "schemas", "strategy": "topic"})
    do_put_topic_model(topic="orders", value={"model": "avro", "catalog": "schemas", "version": "latest"})
    assert Change.objects.filter(kind="topic-model").count() == 1


def test_it_accepts_json_without_a_catalog_numbers_and_wildcard_patterns() -> None:
    do_put_topic_model(topic="events-*", key={"model": "int64"}, value={"model": "json"})
    string = do_put_topic_model(topic="names", value={"model": "string"})
    assert string.value_encoding == "utf_8"


def test_it_finds_a_subject_under_a_wildcard_and_a_protobuf_record() -> None:
    do_put_catalog(
        name="schemas",
        subjects={"*-value": {"format": "protobuf", "schema": PROTO}, "x": {"format": "json", "schema": "{}"}},
    )
    do_put_topic_model(topic="orders", value={"model": "protobuf", "catalog": "schemas", "record": "shop.Order"})
    errors = errors_of(
        do_put_topic_model, topic="orders", value={"model": "protobuf", "catalog": "schemas", "record": "Order"}
    )
    assert "declares no message 'Order'" in errors["value.record"][0]


def test_it_refuses_to_drop_a_subject_or_a_catalog_a_topic_model_names() -> None:
    inline(orders_value=("avro", ORDER_V1))
    do_put_topic_model(topic="orders", value={"model": "avro", "catalog": "schemas", "subject": "orders-value"})
    errors = errors_of(do_put_catalog, name="schemas", subjects={})
    assert "Topic model orders" in errors["subjects"][0]
    assert InlineSchema.objects.filter(subject="orders-value").exists()
    assert "Topic models name this catalog: orders" in errors_of(do_delete_catalog, name="schemas")["name"][0]
    do_put_catalog(name="reg", kind="schema-registry", url="http://r:8081")
    do_put_topic_model(topic="payments", value={"model": "avro", "catalog": "reg", "id": 7})
    assert "Topic model payments" in errors_of(do_put_catalog, name="reg", kind="inline")["kind"][0]


def test_it_records_topic_models_in_the_history_and_announces_them(announced: list[tuple[str, str]]) -> None:
    do_put_topic_model(topic="orders-*", value={"model": "json"}, actor=ACTOR)
    assert do_delete_topic_model("orders-*", actor=ACTOR)
    assert not do_delete_topic_model("orders-*", actor=ACTOR)
    rows = list(Change.objects.filter(kind="topic-model").order_by("id").values_list("action", "name", "actor"))
    assert rows == [("create", "orders-*", "tester"), ("delete", "orders-*", "tester")]
    assert announced == [("topic-model", "orders-*")] * 2
