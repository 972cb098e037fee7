"""What the schema codecs' tests share: Confluent's serializers against the tests' registry, records read back
from Kafka as the raw bytes the fetch processes see, and decoders of inline schemas with the reason they refuse a
record."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.serialization import MessageField, SerializationContext
from django.conf import settings

from streams.codecs.schemas import (
    Catalogs,
    CatalogSpec,
    DecodeError,
    InlineSchema,
    Limits,
    ModelSpec,
    Reason,
    decoder_for,
)
from streams.codecs.schemas.decoders import Decoder


def serialize(serializer: Callable[..., bytes | None], topic: str, value: Any, part: str = "value") -> bytes:
    field = MessageField.VALUE if part == "value" else MessageField.KEY
    framed = serializer(value, SerializationContext(topic, field))
    assert framed is not None
    return framed


def read_back(topic: str, count: int, timeout: float = 20.0) -> list[tuple[bytes | None, bytes | None]]:
    """The first `count` records of partition 0 of `topic`, as (key, value) bytes."""
    consumer = Consumer(settings.KAFKA.consumer_config())
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < count:
            assert time.monotonic() < deadline, f"read {len(records)} of {count} records"
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append((message.key(), message.value()))
    finally:
        consumer.close()
    return records


def registry_decoder(registry: str, model: str, topic: str, part: str = "value", **options: Any) -> Any:
    catalogs = Catalogs([CatalogSpec(name="registry", kind="apicurio", url=registry, max_age_s=60)])
    return decoder_for(ModelSpec(model=model, catalog="registry", **options), catalogs, topic, part)  # type: ignore[arg-type]


def decoder(schema: Any, model: str = "avro", limits: Limits | None = None) -> Decoder:
    """A decoder of `schema`, the one inline schema of its catalog."""
    catalog = CatalogSpec("c", "inline", schemas=(InlineSchema("s", 1, model, json.dumps(schema)),))  # type: ignore[arg-type]
    spec = ModelSpec(model=model, catalog="c", subject="s")  # type: ignore[arg-type]
    return decoder_for(spec, Catalogs((catalog,)), "t", "value", limits or Limits())


def varint(number: int) -> bytes:
    """`number` as Avro writes an int or a long (zig-zag, then 7 bits a byte)."""
    number = (number << 1) ^ (number >> 63)
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def reason(decode: Decoder, raw: bytes) -> Reason:
    """Why `decode` refuses `raw` (it must)."""
    with pytest.raises(DecodeError) as caught:
        decode.decode(raw)
    return caught.value.reason
