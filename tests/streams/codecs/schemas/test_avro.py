"""Avro records written by confluent-kafka's AvroSerializer, through the real registry and Kafka, as JSON."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer

from streams.codecs.schemas import Catalogs, CatalogSpec, DecodeError, InlineSchema, ModelSpec, Reason, decoder_for
from tests.support.schemas import read_back, registry_decoder, serialize

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "test.codecs",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": ["null", "long", "string"], "default": None},
        {"name": "blob", "type": "bytes"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "time", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
        {"name": "labels", "type": {"type": "map", "values": "int"}},
        {"name": "ratio", "type": "float"},
        {"name": "scores", "type": {"type": "array", "items": "double"}},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "vip", "type": "boolean"},
                    {"name": "since", "type": ["null", {"type": "int", "logicalType": "date"}]},
                ],
            },
        },
    ],
}

VALUE = {
    "id": "o-1",
    "note": "fragile",
    "count": 3,
    "blob": b"\x00\xffhi",
    "digest": b"abcd",
    "price": decimal.Decimal("1234.50"),
    "at": datetime.datetime(2024, 5, 1, 12, 30, 15, 250000, tzinfo=datetime.UTC),
    "at_us": datetime.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=datetime.UTC),
    "day": datetime.date(2024, 5, 1),
    "time": datetime.time(9, 15, 0, 500000),
    "ref": str(uuid.UUID("12345678-1234-5678-1234-567812345678")),
    "state": "PAID",
    "labels": {"a": 1, "b": 2},
    "ratio": 0.1,
    "scores": [1.5, float("nan"), float("inf")],
    "customer": {"name": "Ada", "vip": True, "since": datetime.date(2020, 1, 31)},
}

EXPECTED = {
    "id": "o-1",
    "note": "fragile",
    "count": 3,
    "blob": "AP9oaQ==",
    "digest": "YWJjZA==",
    "price": "1234.50",
    "at": "2024-05-01T12:30:15.250Z",
    "at_us": "2024-05-01T12:30:15.123456Z",
    "day": "2024-05-01",
    "time": "09:15:00.500",
    "ref": "12345678-1234-5678-1234-567812345678",
    "state": "PAID",
    "labels": {"a": 1, "b": 2},
    "ratio": 0.1,
    "scores": [1.5, "NaN", "Infinity"],
    "customer": {"name": "Ada", "vip": True, "since": "2020-01-31"},
}


def test_it_decodes_every_avro_type_written_by_the_avro_serializer(
    schema_registry, confluent_registry, new_topic, produce
) -> None:
    topic = new_topic()
    serializer = AvroSerializer(confluent_registry, json.dumps(ORDER))
    produce(topic, serialize(serializer, topic, VALUE))
    produce(topic, serialize(serializer, topic, {**VALUE, "note": None, "count": "many"}))
    (_, first), (_, second) = read_back(topic, 2)

    decoder = registry_decoder(schema_registry, "avro", topic, strategy="topic")

    assert first is not None
    assert second is not None
    assert decoder.decode(first) == json.dumps(EXPECTED, separators=(",", ":")).encode()
    assert json.loads(decoder.decode(second)) == {**EXPECTED, "note": None, "count": "many"}


def test_it_decodes_each_version_of_an_evolved_schema_with_its_own(
    schema_registry, confluent_registry, new_topic, produce
) -> None:
    topic = new_topic()
    v1 = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "price", "type": ["null", "double"], "default": None}]}
    client = confluent_registry
    produce(topic, serialize(AvroSerializer(client, json.dumps(v1)), topic, {"id": "a"}))
    produce(topic, serialize(AvroSerializer(client, json.dumps(v2)), topic, {"id": "b", "price": 2.5}))
    produce(topic, serialize(AvroSerializer(client, json.dumps(v1)), topic, {"id": "c"}))
    decoder = registry_decoder(schema_registry, "avro", topic, strategy="topic")

    decoded = [decoder.decode(value) for _, value in read_back(topic, 3)]

    assert decoded == [b'{"id":"a"}', b'{"id":"b","price":2.5}', b'{"id":"c"}']


def test_it_decodes_a_key_with_the_key_subject(schema_registry, confluent_registry, new_topic, produce) -> None:
    topic = new_topic()
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "tenant", "type": "int"}]}
    key = serialize(AvroSerializer(confluent_registry, json.dumps(key_schema)), topic, {"tenant": 7}, "key")
    produce(topic, b"{}", key=key)
    [(raw_key, _)] = read_back(topic, 1)

    assert registry_decoder(schema_registry, "avro", topic, "key", strategy="topic").decode(raw_key) == b'{"tenant":7}'


def test_it_reads_an_inline_catalogs_plain_avro_by_a_wildcard_subject() -> None:
    schema = {"type": "record", "name": "P", "fields": [{"name": "n", "type": ["null", "int"]}]}
    catalogs = Catalogs(
        [CatalogSpec("local", "inline", schemas=(InlineSchema("orders-*-value", 1, "avro", json.dumps(schema)),))]
    )
    decoder = decoder_for(ModelSpec("avro", catalog="local", strategy="topic"), catalogs, "orders-eu-value"[:-6])

    assert decoder.decode(b"\x02\x54") == b'{"n":42}'
    with pytest.raises(DecodeError) as cut:
        decoder.decode(b"\x02")
    assert cut.value.reason is Reason.TRUNCATED
    with pytest.raises(DecodeError) as longer:
        decoder.decode(b"\x02\x54\x00")
    assert longer.value.reason is Reason.INVALID
