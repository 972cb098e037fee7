"""The delivery log's writing side, off the event loop: a thread (`LogWriter`) that every `flush_s` seconds, and at
exit, takes what the loop tallied (`DeliveryLog.take`, streams/telemetry/delivery_log.py) and sends it as rows to
the log's Kafka topic (`LogTopic`), with a *report* row every `report_s` seconds.

Bounded: the producer holds at most `buffer_kbytes` of messages Kafka has not acknowledged; rows it cannot take
(`LogWriter.lost`) or deliver (`LogTopic.rows_lost`) are dropped and counted. Nothing here waits for Kafka except
`close()`, and no stream ever waits for anything here.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import fastavro
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from config.kafka_settings import KafkaSettings
from streams.kafka.admin import ensure_topic
from streams.telemetry.avro_rows import RowEncoder
from streams.telemetry.delivery_schema import (
    BATCH_ROWS,
    DELIVERIES,
    HEADER,
    REFUSALS,
    REPORTS,
    SCHEMA_VERSION,
    SCHEMAS,
    SESSIONS,
    TABLES,
    avro_batch_schema,
    header_value,
)

log = logging.getLogger(__name__)


@dataclass
class Tallies:
    """What the event loop tallied since the last flush (`DeliveryLog` says what each holds)."""

    sessions: list[dict[str, Any]]
    deliveries: dict[tuple[int, str, str, int], list[Any]]
    refusals: dict[tuple[int, str, int, str], int]
    open_streams: int


class LogWriter:
    """The thread that sends one delivery log's rows, started with its first row; `take` hands it what the loop
    tallied, and leaves the loop's tallies empty."""

    def __init__(self, topic: LogTopic, take: Callable[[], Tallies], *, flush_s: float, report_s: float) -> None:
        self.topic, self.take, self.flush_s, self.report_s = topic, take, flush_s, report_s
        self.last_report = 0.0
        self.lost = 0  # rows the producer could not take
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="delivery-log", daemon=True)
            self.thread.start()
            atexit.register(self.close)

    def _run(self) -> None:
        while not self.stopping.wait(min(self.flush_s, self.report_s)):
            self.flush()

    def close(self) -> None:
        """Stop the thread, send what is left and wait (a few seconds at most) for Kafka to take it. Once."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self.flush(final=True)
        self.topic.close()

    def flush(self, *, final: bool = False) -> int:
        """Send every pending row (and the report, when one is due); returns the rows handed to the producer."""
        tallies = self.take()
        now = time.time()
        reports = []
        if final or now - self.last_report >= self.report_s:
            self.last_report = now
            reports = [{"at": int(now * 1000), "interval_ms": int(self.report_s * 1000), "open": tallies.open_streams}]
        tables = {
            SESSIONS: tallies.sessions,
            DELIVERIES: [
                {
                    "second": second * 1000,
                    "route": route,
                    "topic": topic,
                    "partition": partition,
                    "events": events,
                    "bytes": size,
                    "writes": writes,
                    "latency": {str(index): n for index, n in sorted(live.items())},
                    "catchup_events": sum(catchup.values()),
                    "catchup_age": {str(index): n for index, n in sorted(catchup.items())},
                }
                for (second, route, topic, partition), (
                    events,
                    size,
                    writes,
                    live,
                    catchup,
                ) in tallies.deliveries.items()
            ],
            REFUSALS: [
                {"second": second * 1000, "route": route, "status": status, "reason": reason, "count": n}
                for (second, route, status, reason), n in tallies.refusals.items()
            ],
            # Last, so a report follows the rows it speaks for on the process's partition.
            REPORTS: reports,
        }
        sent, lost = self.topic.send(tables)
        self.lost += lost
        return sent


def batch_writer(table: str, common: dict[str, Any]) -> Callable[[list[dict[str, Any]]], bytes]:
    """What writes a message of `table`'s rows, each with the process's `common` columns: `RowEncoder` for a table
    of plain columns (sessions, refusals, reports), fastavro for one with maps (deliveries)."""
    schema = SCHEMAS[table]
    if RowEncoder.supports(schema):
        return RowEncoder(schema, common).encode
    return fastavro_writer(table, common)


def fastavro_writer(table: str, common: dict[str, Any]) -> Callable[[list[dict[str, Any]]], bytes]:
    """fastavro's writing of a message of `table`'s rows, each with the process's `common` columns."""
    parsed = fastavro.parse_schema(avro_batch_schema(table))

    def write(rows: list[dict[str, Any]]) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, [{**common, **row} for row in rows])
        return buffer.getvalue()

    return write


class LogTopic:
    """The log's Kafka topic, as one process writes it: a producer keyed by the process, so the process's rows
    stay in order on one partition, created with the topic's settings on first use.

    Bounded: librdkafka holds at most `buffer_kbytes` of messages not yet acknowledged, and gives up on a message
    after `timeout_s`; the rows of a message it cannot take are handed back (`send`), those of one it cannot
    deliver counted in `rows_lost`. Nothing here waits for Kafka except `close()`.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        name: str,
        *,
        partitions: int = 4,
        retention_ms: int = 7 * 24 * 3600 * 1000,
        node: str = "",
        buffer_kbytes: int = 16 * 1024,
        timeout_s: float = 300.0,
    ) -> None:
        self.kafka, self.name, self.partitions, self.retention_ms = kafka, name, partitions, retention_ms
        self.node, self.pid = node or os.uname().nodename, os.getpid()
        self.process = f"{self.node}-{self.pid}-{uuid.uuid4().hex[:12]}"
        self.buffer_kbytes, self.timeout_s = buffer_kbytes, timeout_s
        common = {"schema_version": SCHEMA_VERSION, "node": self.node, "pid": self.pid, "process": self.process}
        self.writers = {table: batch_writer(table, common) for table in TABLES}
        self.producer: Producer | None = None
        self.created = False
        self.rows_sent = self.messages_sent = self.rows_lost = self.send_errors = 0

    def _producer(self) -> Producer:
        if self.producer is None:
            self.producer = Producer(
                {
                    **self.kafka.producer_config(),
                    "client.id": f"{self.kafka.client_id}-delivery-log",
                    "enable.idempotence": True,  # retries keep the order of the process's rows
                    "linger.ms": 100,
                    # Rows repeat their route, topic and process: lz4 shrinks what the rollup reads from Kafka.
                    "compression.type": "lz4",
                    "queue.buffering.max.kbytes": self.buffer_kbytes,
                    "message.timeout.ms": int(self.timeout_s * 1000),
                }
            )
        if not self.created:
            try:
                ensure_topic(
                    self.kafka,
                    self.name,
                    partitions=self.partitions,
                    config={"retention.ms": str(self.retention_ms), "cleanup.policy": "delete"},
                )
                self.created = True
            except Exception:
                log.warning("delivery log: could not create topic %s; will retry", self.name, exc_info=True)
        return self.producer

    def send(self, tables: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
        """Hand each table's rows to the producer; returns (rows handed over, rows lost at once)."""
        producer = self._producer()
        sent = lost = 0
        for table, rows in tables.items():
            write = self.writers[table]
            for start in range(0, len(rows), BATCH_ROWS):
                chunk = rows[start : start + BATCH_ROWS]
                try:
                    producer.produce(
                        self.name,
                        write(chunk),
                        key=self.process,
                        headers={HEADER: header_value(table)},
                        on_delivery=partial(self._delivered, len(chunk)),
                    )
                except (BufferError, KafkaException):
                    lost += len(chunk)
                    continue
                sent += len(chunk)
        producer.poll(0)
        return sent, lost

    def _delivered(self, rows: int, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.rows_sent += rows
            self.messages_sent += 1
        else:
            self.rows_lost += rows
            self.send_errors += 1
            log.warning("delivery log: %d rows lost: %s", rows, error)

    def close(self, timeout_s: float = 5.0) -> None:
        if self.producer is not None:
            self.producer.flush(timeout_s)
