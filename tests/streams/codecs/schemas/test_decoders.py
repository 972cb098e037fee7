"""Bad records through Kafka each give their reason, and models that cannot work are refused when built."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroSerializer
from django.conf import settings

from streams.codecs.schemas import (
    Catalogs,
    CatalogSpec,
    DecodeError,
    ModelSpec,
    Reason,
    SchemaError,
    TopicModels,
    decoder_for,
)
from streams.codecs.schemas.framing import frame
from streams.kafka.decoding import Decoding, Models, Waiting
from tests.conftest import unique
from tests.support.schemas import read_back, registry_decoder, serialize

ITEM: dict[str, Any] = {
    "type": "record",
    "name": "Item",
    "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}],
}
OPTIONAL = {"name": "note", "type": ["null", "string"], "default": None}


@contextlib.contextmanager
def capture_logs() -> Iterator[list[str]]:
    """The lines the data plane logs meanwhile, formatted with their arguments."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler, logger = Keep(level=logging.DEBUG), logging.getLogger("streams")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


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


def register(confluent_registry, subject: str, schema: dict[str, Any]) -> int:
    schema_id: int = confluent_registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    return schema_id


def test_it_skips_a_record_whose_schema_the_model_does_not_allow(confluent_registry, schema_registry) -> None:
    topic = unique("t")
    own = register(confluent_registry, f"{topic}-value", ITEM)
    evolved = register(confluent_registry, f"{topic}-value", {**ITEM, "fields": [*ITEM["fields"], OPTIONAL]})
    elsewhere = f"{unique('other')}-value"  # another team's subject, or one a producer registered to get in
    other = register(confluent_registry, elsewhere, {**ITEM, "name": "Other"})
    payload = serialize(AvroSerializer(confluent_registry, json.dumps(ITEM)), topic, {"id": "abc", "n": 1})[5:]
    own_record, other_record = frame(own, payload), frame(other, payload)
    evolved_record = frame(evolved, payload + b"\x00")  # the note: the union's null branch

    def reasons(**model: Any) -> list[Reason | bytes | None]:
        decoder = registry_decoder(schema_registry, "avro", topic, **model)
        found: list[Reason | bytes | None] = []
        for record in (own_record, evolved_record, other_record):
            try:
                found.append(decoder.decode(record))
            except DecodeError as error:
                found.append(error.reason)
        return found

    ok, evolved_ok, mismatch = b'{"id":"abc","n":1}', b'{"id":"abc","n":1,"note":null}', Reason.SCHEMA_MISMATCH
    assert reasons(strategy="topic") == [ok, evolved_ok, mismatch]
    assert reasons() == [ok, evolved_ok, mismatch]  # nothing named: the topic's subject
    assert reasons(strategy="topic", version=1) == [ok, mismatch, mismatch]
    assert reasons(subject=f"{topic}-*") == [ok, evolved_ok, mismatch]
    assert reasons(subject=elsewhere) == [mismatch, mismatch, ok]
    assert reasons(schema_id=own) == [ok, mismatch, mismatch]


def test_its_registry_messages_carry_no_record_value_nor_credential(confluent_registry, schema_registry) -> None:
    topic = unique("t")
    register(confluent_registry, f"{topic}-value", ITEM)
    other = register(confluent_registry, f"{unique('other')}-value", {**ITEM, "name": "Other"})
    value = serialize(AvroSerializer(confluent_registry, json.dumps(ITEM)), topic, {"id": "s3cret-value", "n": 1})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://ada:s3cret@127.0.0.1:{probe.getsockname()[1]}"
    decoding = Decoding()
    decoding.use(
        Models(
            catalogs=(
                CatalogSpec("reg", "apicurio", url=schema_registry.replace("http://", "http://ada:s3cret@")),
                CatalogSpec("down", "apicurio", url=closed),
            ),
            topics=(
                TopicModels(topic, value=ModelSpec("avro", catalog="reg", strategy="topic")),
                TopicModels(f"{topic}-2", value=ModelSpec("avro", catalog="down", strategy="topic")),
            ),
        )
    )

    with capture_logs() as lines:
        assert decoding.record(topic, (0, 0, None, value, (), 0, False)) is not None
        assert decoding.record(topic, (0, 1, None, frame(other, value[5:]), (), 0, False)) is None
        with pytest.raises(Waiting) as waiting:
            decoding.record(f"{topic}-2", (0, 0, None, value, (), 0, False))

    assert decoding.tally.skipped == {(topic, "schema-mismatch"): 1}
    said = " ".join([*lines, str(waiting.value), repr(decoding.models.catalogs)])
    assert "schema-mismatch" in said
    assert "***@127.0.0.1" in str(waiting.value)
    assert "s3cret" not in said
