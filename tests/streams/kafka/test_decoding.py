"""Records decoded where they are fetched (streams/kafka/decoding.py), in-process against Apache Kafka and the real
schema registry: the real hub, fetcher process and streams (tests/support/inprocess.py), records written by
confluent-kafka's own serializers.

Each record is decoded once, in the fetch process, however many streams read it; a record that does not decode is
skipped and counted while the stream goes on; a registry that cannot be reached, with nothing cached, makes the
partition wait and not skip.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from django.conf import settings

from bindings.selectors import START_LIVE
from streams.codecs.schemas import CatalogSpec, ModelSpec, TopicModels
from streams.edge.metrics import Metrics, decode_errors
from streams.edge.readiness import waits
from streams.hub.hub import Hub
from streams.kafka.client import HistoricalReader
from streams.kafka.consumer_host import ConsumerHost
from streams.kafka.decoding import DecodeStats, Models
from streams.routes.filters import CompiledFilter
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.codecs.schemas.test_protobuf import SHOP, classes
from tests.support.inprocess import LoopThread, OpenStream, close_stream, new_hub, open_stream
from tests.support.schemas import serialize
from tests.support.servers import TcpProxy

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "test.decoding",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "token", "type": "bytes"},
    ],
}


def order(number: int, status: str = "NEW", note: str | None = None) -> dict[str, Any]:
    return {"id": f"o-{number}", "status": status, "note": note, "token": b"\x00\xff"}


def documented(number: int, status: str = "NEW", note: str | None = None) -> dict[str, Any]:
    """The JSON docs/schemas.md promises for `order(...)`: union without its wrapper, bytes in base64."""
    return {"id": f"o-{number}", "status": status, "note": note, "token": "AP8="}


def models(topic: str, registry: str, model: str = "avro", **value: Any) -> Models:
    catalog = CatalogSpec(name="registry", kind="apicurio", url=registry, max_age_s=300)
    rule = TopicModels(
        topic,
        key=ModelSpec(model="string"),
        value=ModelSpec(model=model, catalog="registry", strategy="topic", **value),  # type: ignore[arg-type]
    )
    return Models((catalog,), (rule,))


@pytest.fixture
def avro(confluent_registry: Any) -> Callable[[str, dict[str, Any]], bytes]:
    serializer = AvroSerializer(confluent_registry, json.dumps(ORDER))
    return lambda topic, value: serialize(serializer, topic, value)


@dataclass
class Setup:
    """What every test here uses: the loop and its hub, a fresh topic, a producer, the registry and its Avro."""

    loop_thread: LoopThread
    hub: Hub
    topic: str
    produce: Produce
    registry: str
    avro: Callable[[str, dict[str, Any]], bytes]


@pytest.fixture
def setup(
    loop_thread: LoopThread,
    new_topic: Callable[..., str],
    produce: Produce,
    schema_registry: str,
    avro: Callable[[str, dict[str, Any]], bytes],
) -> Iterator[Setup]:
    async def start() -> Hub:
        started = new_hub(loop_thread.loop)
        started.start()
        return started

    hub = loop_thread.run(start())
    yield Setup(loop_thread, hub, new_topic(), produce, schema_registry, avro)
    loop_thread.run(hub.stop())


def values(stream: OpenStream) -> list[Any]:
    return [json.loads(text) for text in stream.values]


def received(stream: OpenStream, count: int, timeout: float = 20.0) -> list[Any]:
    wait_until(lambda: len(stream.events) >= count, timeout=timeout)
    return values(stream)


def test_avro_records_reach_every_stream_as_their_json_decoded_once_each(setup: Setup) -> None:
    loop_thread, hub, topic, produce, schema_registry, avro = (
        setup.loop_thread,
        setup.hub,
        setup.topic,
        setup.produce,
        setup.registry,
        setup.avro,
    )
    hub.decode_with(models(topic, schema_registry))
    for number in range(3):
        produce(topic, avro(topic, order(number, note="x" if number else None)), key=f"k{number}".encode())
    streams = [loop_thread.run(open_stream(hub, topic)) for _ in range(5)]
    expected = [documented(number, note="x" if number else None) for number in range(3)]
    for stream in streams:
        assert received(stream, 3) == expected
    # Once per record, in the fetch process, whatever the number of streams; the key through its `string` model.
    wait_until(lambda: DecodeStats.snapshot()[1].get(topic) == 3)
    assert hub.cache.log(topic, 0).records[0].key == b'"k0"'  # type: ignore[union-attr]
    for stream in streams:
        loop_thread.run(close_stream(stream))


def test_protobuf_records_reach_a_stream_in_the_canonical_json_mapping(setup: Setup, confluent_registry: Any) -> None:
    loop_thread, hub, topic, produce = setup.loop_thread, setup.hub, setup.topic, setup.produce
    schema_registry = setup.registry
    hub.decode_with(models(topic, schema_registry, model="protobuf"))
    shop = classes(SHOP)
    serializer = ProtobufSerializer(shop["Order"], confluent_registry, {"use.deprecated.format": False})
    record = shop["Order"](id=2**60, tags=["a"], first_line={"sku": "s", "quantity": 2}, status=1, total=1.5)
    produce(topic, serialize(serializer, topic, record))
    stream = loop_thread.run(open_stream(hub, topic))
    assert received(stream, 1) == [
        {
            "id": "1152921504606846976",
            "tags": ["a"],
            "firstLine": {"sku": "s", "quantity": "2"},
            "status": "STATUS_PAID",
            "total": 1.5,
        }
    ]
    loop_thread.run(close_stream(stream))


def test_bad_records_are_skipped_and_counted_while_the_stream_goes_on_and_resumes_without_repeat_or_loss(
    setup: Setup,
) -> None:
    loop_thread, hub, topic, produce, schema_registry, avro = (
        setup.loop_thread,
        setup.hub,
        setup.topic,
        setup.produce,
        setup.registry,
        setup.avro,
    )
    hub.decode_with(models(topic, schema_registry))
    good = avro(topic, order(0))
    stream = loop_thread.run(open_stream(hub, topic))
    produce(topic, good)
    assert received(stream, 1) == [documented(0)]
    first_id = stream.last_id
    bad = {
        "magic-byte": b"\x01" + good[1:],
        "unknown-schema": b"\x00" + struct.pack(">I", 987_654_321) + good[5:],
        "truncated": good[:3],
        "invalid": good[:5] + b"\xff\xff\xff\xff\xff\xff\xff\xff",
    }
    for number, payload in enumerate(bad.values(), start=1):
        produce(topic, payload)
        produce(topic, avro(topic, order(number)))
        # The next good record arrives: the bad one stalled nothing.
        assert received(stream, number + 1)[-1] == documented(number)
    assert values(stream) == [documented(number) for number in range(5)]
    wait_until(lambda: all(DecodeStats.snapshot()[0].get((topic, reason)) == 1 for reason in bad))

    # /metrics, and what the control plane's route page reads, count them per topic and reason.
    Metrics().sync()
    assert decode_errors(topic) == dict.fromkeys(bad, 1)

    # Resumed after the first record: every good record after it, once; resumed at the end: nothing again.
    resumed = loop_thread.run(open_stream(hub, topic, last_event_id=first_id))
    assert received(resumed, 4) == [documented(number) for number in range(1, 5)]
    at_end = loop_thread.run(open_stream(hub, topic, last_event_id=stream.last_id))
    produce(topic, b"\x01 a last bad one")
    produce(topic, avro(topic, order(5)))
    assert received(at_end, 1) == [documented(5)]
    assert received(resumed, 5)[-1] == documented(5)
    for opened in (stream, resumed, at_end):
        loop_thread.run(close_stream(opened))


def test_a_value_filter_matches_the_decoded_json_and_a_key_filter_the_decoded_key(setup: Setup) -> None:
    loop_thread, hub, topic, produce, schema_registry, avro = (
        setup.loop_thread,
        setup.hub,
        setup.topic,
        setup.produce,
        setup.registry,
        setup.avro,
    )
    hub.decode_with(models(topic, schema_registry))
    paid = CompiledFilter(key=None, headers=(), value_path=("status",), value_equals="PAID")
    keyed = CompiledFilter(key=b"k2", headers=(), value_path=None, value_equals=None)
    by_value = loop_thread.run(open_stream(hub, topic, filters=(paid,)))
    by_key = loop_thread.run(open_stream(hub, topic, filters=(keyed,)))
    for number, status in enumerate(["NEW", "PAID", "NEW", "PAID"]):
        produce(topic, avro(topic, order(number, status)), key=f"k{number}".encode())
    assert received(by_value, 2) == [documented(1, "PAID"), documented(3, "PAID")]
    assert received(by_key, 1) == [documented(2, "NEW")]
    loop_thread.run(close_stream(by_value))
    loop_thread.run(close_stream(by_key))


def test_without_a_cached_schema_a_registry_outage_makes_the_stream_wait_and_it_goes_on_once_back(setup: Setup) -> None:
    loop_thread, hub, topic, produce, schema_registry, avro = (
        setup.loop_thread,
        setup.hub,
        setup.topic,
        setup.produce,
        setup.registry,
        setup.avro,
    )
    registry_port = int(schema_registry.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    line = TcpProxy(registry_port)
    path = schema_registry.split(f":{registry_port}", 1)[1]
    try:
        hub.decode_with(models(topic, f"http://127.0.0.1:{line.port}{path}"))
        stream = loop_thread.run(open_stream(hub, topic, start=START_LIVE))
        line.cut()
        produce(topic, avro(topic, order(0)))  # the producer reaches the registry; the platform does not
        produce(topic, avro(topic, order(1)))
        wait_until(lambda: (topic, 0) in hub.fetcher.consumers.waiting, timeout=20)
        assert stream.values == []  # waiting, not skipping
        assert "wait for their schema registry" in waits(hub)["schema-registry"]
        assert topic in waits(hub)["schema-registry"]
        assert DecodeStats.snapshot()[0].get((topic, "registry-unavailable")) is None

        line.restore()
        assert received(stream, 2, timeout=60) == [documented(0), documented(1)]
        wait_until(lambda: not hub.fetcher.consumers.waiting, timeout=10)
        assert waits(hub) == {}
        produce(topic, avro(topic, order(2)))
        assert received(stream, 3)[-1] == documented(2)
        loop_thread.run(close_stream(stream))
    finally:
        line.close()


def test_history_older_than_the_cache_is_decoded_in_the_readers_host_with_bad_records_skipped(
    loop_thread: LoopThread,
    new_topic: Callable[..., str],
    produce: Produce,
    schema_registry: str,
    avro: Callable[[str, dict[str, Any]], bytes],
) -> None:
    topic = new_topic()
    ConsumerHost.decode_with(models(topic, schema_registry))
    produce(topic, avro(topic, order(0)))
    produce(topic, b"\x01 not framed")
    produce(topic, avro(topic, order(1)))

    async def read() -> list[Any]:
        reader = HistoricalReader(settings.KAFKA, topic)
        await reader.start({0: 0})
        found: list[Any] = []
        try:
            for _ in range(200):
                batch = await reader.poll(0.1)
                found += [(record.offset, json.loads(record.value or b"")) for record in batch.records]
                if batch.eof:
                    break
        finally:
            await reader.close()
        return found

    assert loop_thread.run(read()) == [(0, documented(0)), (2, documented(1))]
    wait_until(lambda: DecodeStats.snapshot()[0].get((topic, "magic-byte")) == 1)
