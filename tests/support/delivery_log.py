"""The delivery log in tests: a log on a test's topic, its rows read back row by row as the rollup would (without
Spark), and a delivery sink that only counts."""

from __future__ import annotations

import io
import time
import uuid
from typing import Any

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from django.conf import settings

from streams.kafka.client import Record
from streams.telemetry.delivery_log import Batch, DeliveryLog, StreamRow
from streams.telemetry.delivery_schema import HEADER, Start, avro_batch_schema, header_value
from streams.telemetry.log_writer import LogTopic

Message = tuple[int, bytes, dict[str, bytes], bytes]


def topic_log(topic: str, **options: Any) -> DeliveryLog:
    return DeliveryLog(LogTopic(settings.KAFKA, topic, partitions=2, node="n1"), salt=b"s", **options)


def record(partition: int, offset: int, age_ms: int = 5) -> Record:
    return Record(partition, offset, None, b"{}", (), timestamp_ms=int(time.time() * 1000) - age_ms)


def stream_row(**fields: Any) -> StreamRow:
    defaults: dict[str, Any] = {
        "route": "items", "endpoint": "default", "topic": "items", "path": "/items", "identity": None,
        "client": "c", "user_agent": "chrome", "start": Start.FRESH,
    }  # fmt: skip
    return StreamRow(**{**defaults, **fields})


def log_messages(topic: str, timeout: float = 10.0) -> list[Message]:
    """Every message of `topic`: (partition, key, headers, value), in each partition's order."""
    consumer = Consumer(
        {
            **settings.KAFKA.consumer_config(),
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending, found = set(partitions), list[Message]()
        while pending:
            message = consumer.poll(timeout)
            assert message is not None, f"{topic}: no end of partitions {pending} within {timeout} s"
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
                continue
            assert error is None, error
            headers = {str(pair[0]): pair[1] for pair in message.headers() or [] if isinstance(pair[1], bytes)}
            found.append((message.partition() or 0, message.key() or b"", headers, message.value() or b""))
        return found
    finally:
        consumer.close()


def log_rows(topic: str, table: str) -> list[dict[str, Any]]:
    """The rows of one table, decoded with the table's schema."""
    schema = fastavro.parse_schema(avro_batch_schema(table))
    rows: list[dict[str, Any]] = []
    for _, _, headers, value in log_messages(topic):
        if headers.get(HEADER) == header_value(table):
            rows.extend(fastavro.schemaless_reader(io.BytesIO(value), schema, None))  # type: ignore[arg-type]
    return rows


class CountingLog:
    """A delivery sink that counts the events it is told of, times the clients they went to: all, and those of
    catching-up streams."""

    enabled = True

    def __init__(self) -> None:
        self.events = self.catchup = 0

    def delivered(self, route: str, topic: str, batch: Batch, clients: int = 1, *, live: bool) -> None:
        self.events += len(batch) * clients
        if not live:
            self.catchup += len(batch) * clients

    @property
    def live(self) -> int:
        return self.events - self.catchup
