"""Bad records through Kafka each give their reason, and models that cannot work are refused when built."""

from __future__ import annotations

import json
import socket

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from django.conf import settings

from streams.codecs.schemas import Catalogs, CatalogSpec, DecodeError, ModelSpec, Reason, SchemaError, decoder_for
from tests.support.schemas import read_back, registry_decoder, serialize

ITEM = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]}


def reason(decoder, raw: bytes | None) -> Reason:
    with pytest.raises(DecodeError) as error:
        decoder.decode(raw)
    return error.value.reason


def test_it_gives_each_bad_record_its_reason(confluent_registry, schema_registry, new_topic, produce) -> None:
    topic = new_topic()
    good = serialize(AvroSerializer(confluent_registry, json.dumps(ITEM)), topic, {"id": "abc", "n": 1})
    unknown_id = b"\x00" + (2**31 - 7).to_bytes(4, "big") + good[5:]
    for value in (good, b"\x01" + good[1:], unknown_id, good[:-2], good[:3], b'{"id": "abc"}'):
        produce(topic, value)
    records = [value for _, value in read_back(topic, 6)]
    decoder = registry_decoder(schema_registry, "avro", topic, strategy="topic")

    assert decoder.decode(records[0]) == b'{"id":"abc","n":1}'
    assert [reason(decoder, raw) for raw in records[1:]] == [
        Reason.MAGIC_BYTE,
        Reason.UNKNOWN_SCHEMA,
        Reason.TRUNCATED,
        Reason.TRUNCATED,
        Reason.MAGIC_BYTE,
    ]


def test_it_finds_the_registry_unavailable_when_it_is_down_or_another_service(confluent_registry, new_topic) -> None:
    topic = new_topic()
    good = serialize(AvroSerializer(confluent_registry, json.dumps(ITEM)), topic, {"id": "abc", "n": 1})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    kafka = f"http://{settings.KAFKA.bootstrap_servers.split(',')[0]}"

    for url in (closed, kafka):
        assert reason(registry_decoder(url, "avro", topic), good) is Reason.REGISTRY_UNAVAILABLE


def test_it_passes_a_null_through_as_none(schema_registry) -> None:
    assert registry_decoder(schema_registry, "avro", "t").decode(None) is None


def test_it_refuses_models_that_cannot_work() -> None:
    catalogs = Catalogs([CatalogSpec("local", "inline"), CatalogSpec("remote", "schema-registry")])
    for spec in (
        ModelSpec("avro"),
        ModelSpec("avro", catalog="missing"),
        ModelSpec("avro", catalog="local"),
        ModelSpec("avro", catalog="local", schema_id=3),
        ModelSpec("string", encoding="klingon"),
        ModelSpec("avro", catalog="remote"),
    ):
        with pytest.raises(SchemaError):
            decoder_for(spec, catalogs, "t")
