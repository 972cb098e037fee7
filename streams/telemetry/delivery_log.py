"""The delivery log: what this process delivered, to whom, and whom it refused, as Parquet files for Spark.

Three tables (format: streams/telemetry/delivery_schema.py, docs/delivery-log.md):
- in the *sessions* table, a row when a stream opens and another when it closes, with its totals (`StreamRow`);
- per route, topic, partition and second, a *delivery* row: events, bytes, writes, the latency histogram of the
  live events, and the count and age histogram of the catch-up events (docs/delivery-log.md says which is which);
- per route, status, reason and second, a *refusal* row.

The event loop only adds to in-memory tallies, under a lock it holds for microseconds: a fan-out group's write
is counted once, multiplied by the group's size. A thread writes the tallies every `flush_s` seconds (and at
exit). The buffer is bounded: past `max_rows` pending rows, new rows are dropped and counted (`dropped`), and no
stream ever waits for the log. Losing the process loses at most the last flush interval of rows.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import logging
import os
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from streams.kafka.client import Record
from streams.telemetry.delivery_schema import (
    DELIVERIES,
    REFUSALS,
    SCHEMA_VERSION,
    SCHEMAS,
    SESSIONS,
    End,
    Event,
    Start,
    bucket,
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
        `live`: the stream stood at the live end (streams/stream/pump.py, `Standing`), else it was catching up."""


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
        self, directory: Path | None, *, salt: bytes, node: str = "", flush_s: float = 5.0, max_rows: int = 100_000
    ) -> None:
        """`directory` None: logging is off, and every method returns at once."""
        self.directory = directory
        self.files = (
            None if directory is None else LogFiles(directory, node=node or os.uname().nodename, pid=os.getpid())
        )
        self.salt, self.flush_s, self.max_rows = salt, flush_s, max_rows
        self.lock = threading.Lock()
        self.sessions: list[dict[str, Any]] = []
        # (second, route, topic, partition) -> [events, bytes, writes, {bucket: live events}, {bucket: catch-up
        # events}]; the catch-up count is the second histogram's sum, taken at the flush.
        self.deliveries: dict[tuple[int, str, str, int], list[Any]] = {}
        self.refusals: dict[tuple[int, str, int, str], int] = defaultdict(int)
        self.dropped = 0
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    @property
    def enabled(self) -> bool:
        return self.directory is not None

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
        if not batch or self.directory is None:
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
        if self.directory is None:
            return
        key = (int(time.time()), route, status, reason)
        with self.lock:
            if key not in self.refusals and self._full():
                self.dropped += 1
                return
            self.refusals[key] += 1
        self._start()

    def _session_row(self, stream: StreamRow, event: Event, end: End | None, at: float) -> None:
        if self.directory is None:
            return
        row = session_row(stream, event, end, at)
        with self.lock:
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
        while not self.stopping.wait(self.flush_s):
            self.flush()

    def close(self) -> None:
        """Stop the thread and write what is left."""
        self.stopping.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self.flush()

    def flush(self) -> int:
        """Write every pending row, one file per table and hour; returns the rows written."""
        if self.files is None:
            return 0
        with self.lock:
            sessions, self.sessions = self.sessions, []
            deliveries, self.deliveries = self.deliveries, {}
            refusals, self.refusals = self.refusals, defaultdict(int)
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
                    "latency": sorted(live.items()),
                    "catchup_events": sum(catchup.values()),
                    "catchup_age": sorted(catchup.items()),
                }
                for (second, route, topic, partition), (events, size, writes, live, catchup) in deliveries.items()
            ],
            REFUSALS: [
                {"second": second * 1000, "route": route, "status": status, "reason": reason, "count": n}
                for (second, route, status, reason), n in refusals.items()
            ],
        }
        written, lost = self.files.write(tables)
        self.dropped += lost
        return written

    def stats(self) -> dict[str, int]:
        files = self.files or LogFiles(Path(), node="", pid=0)
        return {
            "delivery_log_rows": files.rows_written,
            "delivery_log_files": files.files_written,
            "delivery_log_dropped": self.dropped,
            "delivery_log_write_errors": files.write_errors,
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


class LogFiles:
    """The log's files: one per table, hour and flush, written under a dot-name and renamed when complete."""

    def __init__(self, directory: Path, *, node: str, pid: int) -> None:
        self.directory, self.node, self.pid = directory, node, pid
        self.sequence = self.rows_written = self.files_written = self.write_errors = 0

    def write(self, tables: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
        """Write each table's rows; returns (rows written, rows lost to write errors)."""
        common = {"schema_version": SCHEMA_VERSION, "node": self.node, "pid": self.pid}
        written = lost = 0
        for table, rows in tables.items():
            for hour, hourly in _by_hour(rows, "at" if table == SESSIONS else "second").items():
                if self._write(table, hour, [{**common, **row} for row in hourly]):
                    written += len(hourly)
                else:
                    lost += len(hourly)
        return written, lost

    def _write(self, table: str, hour: datetime, rows: list[dict[str, Any]]) -> bool:
        folder = self.directory / table / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        self.sequence += 1
        name = f"{self.node}-{self.pid}-{int(hour.timestamp() * 1000)}-{self.sequence}.parquet"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".{name}"
            pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), partial)
            os.replace(partial, folder / name)
        except (OSError, pa.ArrowException):
            log.exception("delivery log: could not write %d %s rows under %s", len(rows), table, folder)
            self.write_errors += 1
            return False
        self.files_written += 1
        self.rows_written += len(rows)
        return True


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _by_hour(rows: list[dict[str, Any]], column: str) -> dict[datetime, list[dict[str, Any]]]:
    hours: dict[datetime, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        at = datetime.fromtimestamp(row[column] / 1000, tz=UTC)
        hours[at.replace(minute=0, second=0, microsecond=0)].append(row)
    return hours
