"""The delivery log: what this process delivered, to whom, and whom it refused, as rows on a Kafka topic for Spark.

Four tables (format: streams/telemetry/delivery_schema.py, docs/delivery-log.md):
- in the *sessions* table, a row when a stream opens and another when it closes, with its totals (`StreamRow`);
- per route, topic, partition and second, a *delivery* row: events, bytes, writes, the latency histogram of the
  live events, and the count and age histogram of the catch-up events (docs/delivery-log.md says which is which);
- per route, status, reason and second, a *refusal* row;
- every `report_s` seconds, a *report* row: the process is alive and holds this many streams open.

The event loop only adds to in-memory tallies, under a lock it holds for microseconds: a fan-out group's write
is counted once, multiplied by the group's size. A thread hands the tallies to a Kafka producer every `flush_s`
seconds (and at exit). Both buffers are bounded: past `max_rows` pending rows, new rows are dropped and counted
(`dropped`), and so are rows the producer cannot take or deliver (`LogTopic`); no stream ever waits for the log.
Losing the process loses at most the last flush interval of rows.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import io
import logging
import os
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import fastavro
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from config.kafka_settings import KafkaSettings
from streams.kafka.admin import ensure_topic
from streams.kafka.client import Record
from streams.telemetry.delivery_schema import (
    BATCH_ROWS,
    DELIVERIES,
    HEADER,
    REFUSALS,
    REPORTS,
    SCHEMA_VERSION,
    SESSIONS,
    TABLES,
    End,
    Event,
    Start,
    avro_batch_schema,
    bucket,
    header_value,
)

log = logging.getLogger(__name__)

# A write's events: each record with the bytes its event took on the wire.
Batch = Sequence[tuple[Record, int]]


class DeliverySink(Protocol):
    """What a stream's pump tells of each write: the delivery log, the metrics, or both (`DeliverySinks`)."""

    @property
    def enabled(self) -> bool: ...

    def delivered(self, route: str, topic: str, batch: Batch, clients: int = 1, *, live: bool) -> None:
        """A write of `batch` to `clients` clients at once (a fan-out group writes the same bytes to each);
        `live`: the stream stood at the live end (streams/stream/intake.py, `Standing`), else it was catching up."""


class DeliverySinks:
    """Several sinks as one: each write is told to every enabled sink."""

    def __init__(self, *sinks: DeliverySink) -> None:
        self.sinks = tuple(sink for sink in sinks if sink.enabled)

    @property
    def enabled(self) -> bool:
        return bool(self.sinks)

    def delivered(self, route: str, topic: str, batch: Batch, clients: int = 1, *, live: bool) -> None:
        for sink in self.sinks:
            sink.delivered(route, topic, batch, clients, live=live)


_BROWSERS = (  # checked in order: Edge and Opera say Chrome too, Chrome says Safari
    ("edge", re.compile(r"Edg(e|A|iOS)?/")),
    ("opera", re.compile(r"OPR/|Opera")),
    ("firefox", re.compile(r"Firefox/|FxiOS/")),
    ("chrome", re.compile(r"Chrome/|CriOS/|Chromium/")),
    ("safari", re.compile(r"Safari/")),
    ("curl", re.compile(r"^curl/")),
    ("python", re.compile(r"python|aiohttp|httpx", re.IGNORECASE)),
)


def user_agent_family(user_agent: str) -> str:
    """A browser's family from its User-Agent: a few values a dashboard can group by, never the string."""
    if not user_agent:
        return "none"
    return next((family for family, pattern in _BROWSERS if pattern.search(user_agent)), "other")


@dataclass
class StreamRow:
    """One stream, as its two rows of the `sessions` table describe it (opened, closed); the stream fills in the
    totals before it closes. `stream_id` is stored as the `session` column."""

    route: str
    endpoint: str
    topic: str
    path: str
    identity: str | None
    client: str
    user_agent: str
    start: Start
    opened_at: float = field(default_factory=time.time)
    stream_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: int = 0
    bytes: int = 0
    replayed: int = 0
    resets: int = 0


class DeliveryLog:
    def __init__(
        self,
        topic: LogTopic | None,
        *,
        salt: bytes,
        flush_s: float = 5.0,
        report_s: float = 15.0,
        max_rows: int = 100_000,
    ) -> None:
        """`topic` None: logging is off, and every method returns at once."""
        self.topic = topic
        self.salt, self.flush_s, self.report_s, self.max_rows = salt, flush_s, report_s, max_rows
        self.lock = threading.Lock()
        self.sessions: list[dict[str, Any]] = []
        # (second, route, topic, partition) -> [events, bytes, writes, {bucket: live events}, {bucket: catch-up
        # events}]; the catch-up count is the second histogram's sum, taken at the flush.
        self.deliveries: dict[tuple[int, str, str, int], list[Any]] = {}
        self.refusals: dict[tuple[int, str, int, str], int] = defaultdict(int)
        self.open_streams = 0  # reported every `report_s` seconds, so the rollup knows the process is alive
        self.last_report = 0.0
        self.dropped = 0
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    @property
    def enabled(self) -> bool:
        return self.topic is not None

    def keyed_hash(self, value: str) -> str:
        """`value` (an identity, an address) as a keyed hash: comparable across rows, not reversible."""
        return hmac.new(self.salt, value.encode(), hashlib.sha256).hexdigest()[:24]

    # --- the event loop's side -------------------------------------------------------------------------

    def opened(self, stream: StreamRow) -> None:
        self._session_row(stream, Event.OPENED, None, stream.opened_at)

    def closed(self, stream: StreamRow, end: End) -> None:
        self._session_row(stream, Event.CLOSED, end, time.time())

    def delivered(self, route: str, topic: str, batch: Batch, clients: int = 1, *, live: bool) -> None:
        """A write of `batch` to `clients` clients at once (a fan-out group writes the same bytes to each): its
        events' latencies go to the live histogram when `live`, else their ages to the catch-up one."""
        if not batch or self.topic is None:
            return
        now_ms = int(time.time() * 1000)
        second = now_ms // 1000
        which = 3 if live else 4  # the tally's histogram: chosen once per write, so no event costs more
        written: set[int] = set()
        with self.lock:
            deliveries = self.deliveries
            for record, size in batch:
                key = (second, route, topic, record.partition)
                tally = deliveries.get(key)
                if tally is None:
                    if self._full():
                        self.dropped += 1
                        continue
                    tally = deliveries[key] = [0, 0, 0, {}, {}]
                tally[0] += clients
                tally[1] += size * clients
                histogram = tally[which]
                index = bucket(now_ms - record.timestamp_ms)
                histogram[index] = histogram.get(index, 0) + clients
                if record.partition not in written:
                    written.add(record.partition)
                    tally[2] += clients

    def refused(self, route: str, status: int, reason: str) -> None:
        if self.topic is None:
            return
        key = (int(time.time()), route, status, reason)
        with self.lock:
            if key not in self.refusals and self._full():
                self.dropped += 1
                return
            self.refusals[key] += 1
        self._start()

    def _session_row(self, stream: StreamRow, event: Event, end: End | None, at: float) -> None:
        if self.topic is None:
            return
        row = session_row(stream, event, end, at)
        with self.lock:
            self.open_streams += 1 if end is None else -1
            if self._full():
                self.dropped += 1
                return
            self.sessions.append(row)
        self._start()

    def _full(self) -> bool:
        return len(self.sessions) + len(self.deliveries) + len(self.refusals) >= self.max_rows

    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="delivery-log", daemon=True)
            self.thread.start()
            atexit.register(self.close)

    # --- the writer thread's side ------------------------------------------------------------------------

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
        if self.topic is not None:
            self.topic.close()

    def flush(self, *, final: bool = False) -> int:
        """Send every pending row (and the report, when one is due); returns the rows handed to the producer."""
        if self.topic is None:
            return 0
        with self.lock:
            sessions, self.sessions = self.sessions, []
            deliveries, self.deliveries = self.deliveries, {}
            refusals, self.refusals = self.refusals, defaultdict(int)
            open_streams = self.open_streams
        now = time.time()
        reports = []
        if final or now - self.last_report >= self.report_s:
            self.last_report = now
            reports = [{"at": _ms(now), "interval_ms": int(self.report_s * 1000), "open": open_streams}]
        tables = {
            SESSIONS: sessions,
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
                for (second, route, topic, partition), (events, size, writes, live, catchup) in deliveries.items()
            ],
            REFUSALS: [
                {"second": second * 1000, "route": route, "status": status, "reason": reason, "count": n}
                for (second, route, status, reason), n in refusals.items()
            ],
            # Last, so a report follows the rows it speaks for on the process's partition.
            REPORTS: reports,
        }
        sent, lost = self.topic.send(tables)
        self.dropped += lost
        return sent

    def stats(self) -> dict[str, int]:
        topic = self.topic
        return {
            "delivery_log_rows": topic.rows_sent if topic else 0,
            "delivery_log_messages": topic.messages_sent if topic else 0,
            "delivery_log_dropped": self.dropped + (topic.rows_lost if topic else 0),
            "delivery_log_write_errors": topic.send_errors if topic else 0,
        }


def session_row(stream: StreamRow, event: Event, end: End | None, at: float) -> dict[str, Any]:
    """A sessions-table row (without the columns every row has); the totals only on the closing row."""
    closing = end is not None
    return {
        "session": stream.stream_id,
        "event": event.value,
        "at": _ms(at),
        "opened_at": _ms(stream.opened_at),
        "route": stream.route,
        "endpoint": stream.endpoint,
        "topic": stream.topic,
        "path": stream.path,
        "identity": stream.identity,
        "client": stream.client,
        "user_agent": stream.user_agent,
        "start": stream.start.value,
        "end": None if end is None else end.value,
        "events": stream.events if closing else 0,
        "bytes": stream.bytes if closing else 0,
        "replayed": stream.replayed if closing else 0,
        "resets": stream.resets,
    }


class LogTopic:
    """The log's Kafka topic, as one process writes it: a producer keyed by the process, so the process's rows
    stay in order on one partition, created with the topic's settings on first use.

    Bounded: librdkafka holds at most `buffer_kbytes` of messages not yet acknowledged, and gives up on a message
    after `timeout_s`; a message it cannot take or deliver is counted in `rows_lost`. Nothing here waits for Kafka
    except `close()`.
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
        self.encoders = {table: fastavro.parse_schema(avro_batch_schema(table)) for table in TABLES}
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
        common = {"schema_version": SCHEMA_VERSION, "node": self.node, "pid": self.pid, "process": self.process}
        producer = self._producer()
        sent = lost = 0
        for table, rows in tables.items():
            for start in range(0, len(rows), BATCH_ROWS):
                chunk = [{**common, **row} for row in rows[start : start + BATCH_ROWS]]
                buffer = io.BytesIO()
                fastavro.schemaless_writer(buffer, self.encoders[table], chunk)
                try:
                    producer.produce(
                        self.name,
                        buffer.getvalue(),
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


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
