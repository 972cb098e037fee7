"""JSON records: confluent-kafka's JSONSerializer through the real registry, checked against the JSON Schema."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer

from streams.codecs.schemas import Catalogs, DecodeError, ModelSpec, Reason, decoder_for
from streams.codecs.schemas.framing import frame
from tests.support.schemas import read_back, registry_decoder, serialize

PERSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Person",
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name"],
}


def test_it_decodes_a_json_serializer_record_and_checks_it(
    confluent_registry, new_topic, produce, schema_registry
) -> None:
    topic = new_topic()
    produce(topic, serialize(JSONSerializer(json.dumps(PERSON), confluent_registry), topic, {"name": "Zoë", "age": 3}))
    [(_, raw)] = read_back(topic, 1)
    decoder = registry_decoder(schema_registry, "json", topic, strategy="topic")
    assert raw is not None

    assert decoder.decode(raw) == '{"name":"Zoë","age":3}'.encode()

    with pytest.raises(DecodeError) as breaks:  # the same schema id framing a value its schema refuses
        decoder.decode(raw[:5] + b'{"age": -1}')
    assert breaks.value.reason is Reason.SCHEMA_MISMATCH
    with pytest.raises(DecodeError) as broken:
        decoder.decode(raw[:5] + b'{"name": ')
    assert broken.value.reason is Reason.NOT_JSON


def test_it_refuses_a_json_model_fed_an_avro_schema_id(confluent_registry, schema_registry, new_topic) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: PLC0415

    topic = new_topic()
    avro = serialize(AvroSerializer(confluent_registry, '{"type": "string"}'), topic, "x")

    with pytest.raises(DecodeError) as error:
        registry_decoder(schema_registry, "json", topic).decode(avro)

    assert error.value.reason is Reason.SCHEMA_MISMATCH


def test_it_parses_plain_json_without_a_catalog_and_writes_it_compact() -> None:
    decoder = decoder_for(ModelSpec("json"), Catalogs([]), "t")

    assert decoder.decode(b' { "a" : [1, 2.5, null, "\\u00e9"] } ') == '{"a":[1,2.5,null,"é"]}'.encode()
    assert decoder.decode(None) is None
    for garbage in (b"NaN", b"\xff", b"{", frame(1, b"{}")):
        with pytest.raises(DecodeError) as error:
            decoder.decode(garbage)
        assert error.value.reason is Reason.NOT_JSON
