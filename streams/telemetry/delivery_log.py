"""The delivery log: what this process delivered, to whom, and whom it refused, as rows on a Kafka topic for Spark.

Four tables (format: streams/telemetry/delivery_schema.py, docs/delivery-log.md):
- in the *sessions* table, a row when a stream opens and another when it closes, with its totals (`StreamRow`);
- per route, topic, partition and second, a *delivery* row: events, bytes, writes, the latency histogram of the
  live events, and the count and age histogram of the catch-up events (docs/delivery-log.md says which is which);
- per route, status, reason and second, a *refusal* row;
- every `report_s` seconds, a *report* row: the process is alive and holds this many streams open.

The event loop only adds to in-memory tallies (`DeliveryLog`, here), under a lock it holds for microseconds: a
fan-out group's write is counted once, multiplied by the group's size. A thread hands the tallies to a Kafka
producer every `flush_s` seconds (and at exit): `LogWriter` and `LogTopic`, streams/telemetry/log_writer.py.
Both buffers are bounded: past `max_rows` pending rows, new rows are dropped and counted (`dropped`), and so are
rows the producer cannot take or deliver; no stream ever waits for the log. Losing the process loses at most the
last flush interval of rows.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.kafka.client import Record
from streams.telemetry.delivery_schema import End, Event, Start, bucket
from streams.telemetry.log_writer import LogTopic, LogWriter, Tallies

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
    """The event loop's side of the log: it adds each stream's rows and each write to tallies, under a lock held
    for microseconds, and never waits; its `writer` thread takes the tallies and sends them
    (streams/telemetry/log_writer.py)."""

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
        self.salt, self.max_rows = salt, max_rows
        self.lock = threading.Lock()
        self.sessions: list[dict[str, Any]] = []
        # (second, route, topic, partition) -> [events, bytes, writes, {bucket: live events}, {bucket: catch-up
        # events}]; the catch-up count is the second histogram's sum, taken at the flush.
        self.deliveries: dict[tuple[int, str, str, int], list[Any]] = {}
        self.refusals: dict[tuple[int, str, int, str], int] = defaultdict(int)
        self.open_streams = 0  # reported every `report_s` seconds, so the rollup knows the process is alive
        self.dropped = 0
        self.writer = None if topic is None else LogWriter(topic, self.take, flush_s=flush_s, report_s=report_s)

    @property
    def enabled(self) -> bool:
        return self.topic is not None

    def keyed_hash(self, value: str) -> str:
        """`value` (an identity, an address) as a keyed hash: comparable across rows, not reversible."""
        return hmac.new(self.salt, value.encode(), hashlib.sha256).hexdigest()[:24]

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
        if (writer := self.writer) is None:
            return
        key = (int(time.time()), route, status, reason)
        with self.lock:
            if key not in self.refusals and self._full():
                self.dropped += 1
                return
            self.refusals[key] += 1
        writer.start()

    def _session_row(self, stream: StreamRow, event: Event, end: End | None, at: float) -> None:
        if (writer := self.writer) is None:
            return
        row = session_row(stream, event, end, at)
        with self.lock:
            self.open_streams += 1 if end is None else -1
            if self._full():
                self.dropped += 1
                return
            self.sessions.append(row)
        writer.start()

    def _full(self) -> bool:
        return len(self.sessions) + len(self.deliveries) + len(self.refusals) >= self.max_rows

    def take(self) -> Tallies:
        """What was tallied since the last call (the writer's), leaving the tallies empty."""
        with self.lock:
            taken = Tallies(self.sessions, self.deliveries, self.refusals, self.open_streams)
            self.sessions, self.deliveries, self.refusals = [], {}, defaultdict(int)
        return taken

    def flush(self, *, final: bool = False) -> int:
        """Send every pending row now (and the report, when one is due); returns the rows handed to Kafka."""
        return 0 if self.writer is None else self.writer.flush(final=final)

    def close(self) -> None:
        """Stop the writer, send what is left and wait (a few seconds at most) for Kafka to take it. Once."""
        if self.writer is not None:
            self.writer.close()

    def stats(self) -> dict[str, int]:
        topic, writer = self.topic, self.writer
        return {
            "delivery_log_rows": topic.rows_sent if topic else 0,
            "delivery_log_messages": topic.messages_sent if topic else 0,
            "delivery_log_dropped": self.dropped + (writer.lost if writer else 0) + (topic.rows_lost if topic else 0),
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


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
