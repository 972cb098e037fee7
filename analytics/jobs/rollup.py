"""The rollup: delivery-log rows in, additive per-minute aggregates out.

Every number it produces is a sum (events, bytes, streams opened and closed, starts by kind, ends by reason,
refusals, the live latency and catch-up age histograms' buckets), so aggregates of different ranges of the log add
up: a row that arrives late for a minute already rolled up is simply added to it, and the caller records the
offsets it has read, in the same transaction as the sums, so no row is ever added twice. Percentiles come later,
from the summed histograms (`analytics.percentiles`); concurrency comes from the streams opened and closed per
minute (a running sum), and from each process's reports, which say whether it is still alive.

Input: one DataFrame per table (streams/telemetry/delivery_schema.py; read by `analytics.jobs.source`). Output:
plain rows, small enough to collect: one per route, topic and minute (and per bucket, reason, identity, process).
Minutes are epoch seconds, multiples of 60.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streams.telemetry.delivery_schema import DELIVERIES, REFUSALS, REPORTS, SESSIONS, End, Event, Start

# Per route, topic and minute: the sums a RouteMinute row holds, from each table.
TRAFFIC = ("events", "bytes", "writes", "catchup_events")
# Per route, topic, minute and bucket: the histograms of the deliveries table (live latency, catch-up age), each
# summed from its column into the `Rollup` field of the same name.
HISTOGRAMS = ("latency", "catchup_age")
SESSION_COUNTS = (
    "streams_opened",
    "streams_closed",
    "fresh_starts",
    "resumes",
    "malformed_ids",
    "since_starts",
    "replayed",
    "slow_closes",
    "token_expiries",
    "route_changes",
)
# The deliveries' cells (`_deliveries`): a row's own, and each bucket of its histograms.
OWN = 0
HISTOGRAM = 1
BUCKET_SPAN = 1 << 16  # bucket indices are int16

# Streams of processes presumed gone, counted as closed (added by the caller, from what it knows of processes).
GONE = "streams_gone"


@dataclass
class Rollup:
    """What a set of files adds, keyed as the rollup tables are."""

    minutes: dict[tuple[str, str, int], dict[str, int]] = field(default_factory=dict)  # (route, topic, minute)
    latency: dict[tuple[str, str, int, int], int] = field(default_factory=dict)  # (route, topic, minute, bucket)
    catchup_age: dict[tuple[str, str, int, int], int] = field(default_factory=dict)  # keyed as `latency`
    refusals: dict[tuple[str, int, int, str], int] = field(default_factory=dict)  # (route, minute, status, reason)
    identities: dict[tuple[str, int, str], tuple[int, int]] = field(default_factory=dict)  # -> (events, sessions)
    # Per process: the last time it was heard of (ms: its newest report or stream row), its node and pid, and its
    # report interval (ms; None while no report was read).
    processes: dict[str, ProcessSeen] = field(default_factory=dict)
    # Per (process, route, topic): streams opened minus streams closed.
    process_streams: dict[tuple[str, str, str], int] = field(default_factory=dict)
    rows_in: int = 0

    def minute(self, route: str, topic: str, minute: int) -> dict[str, int]:
        return self.minutes.setdefault((route, topic, minute), dict.fromkeys((*TRAFFIC, *SESSION_COUNTS, GONE), 0))

    @property
    def rows_out(self) -> int:
        return len(self.minutes) + len(self.latency) + len(self.catchup_age) + len(self.refusals) + len(self.identities)


@dataclass
class ProcessSeen:
    node: str
    pid: int
    last_ms: int
    interval_ms: int | None

    def merge(self, other: ProcessSeen) -> None:
        self.last_ms = max(self.last_ms, other.last_ms)
        if other.interval_ms is not None:
            self.interval_ms = other.interval_ms


def rollup(tables: Mapping[str, DataFrame]) -> Rollup:
    """Aggregate the rows of each table (a table may be missing: no rows)."""
    result = Rollup()
    if DELIVERIES in tables:
        _deliveries(tables[DELIVERIES], result)
    if SESSIONS in tables:
        _sessions(tables[SESSIONS], result)
    if REFUSALS in tables:
        _refusals(tables[REFUSALS], result)
    if REPORTS in tables:
        _reports(tables[REPORTS], result)
    return result


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    """The frame's rows, moved as Arrow columns: millions of aggregate rows come back several times faster than
    as Row objects."""
    return frame.toArrow().to_pylist()  # type: ignore[no-any-return]


def _columns(frame: DataFrame, names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The frame's rows, as tuples of `names`, moved as Arrow columns: millions of rows come back several times
    faster than as Row objects, and than as dicts."""
    table = frame.select(*names).toArrow()
    return zip(*(table.column(name).to_pylist() for name in names), strict=True)


def _minute(column: str) -> Any:
    """The minute of a timestamp column, as epoch seconds."""
    return (F.col(column).cast("long") / 60).cast("long") * 60


def _add_minutes(result: Rollup, rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Add per (route, topic, minute) sums, each row with the count of input rows it came from."""
    for row in rows:
        result.rows_in += row["rows"]
        target = result.minute(row["route"], row["topic"], row["minute"])
        for name in names:
            target[name] += row[name] or 0


def _pair_key(route: Any, topic: Any) -> Any:
    """A 64-bit number naming a route and topic, grouped on instead of the two strings."""
    return F.xxhash64(route, topic)


def _deliveries(frame: DataFrame, result: Rollup, *, by_key: bool = True) -> None:
    """One pass over the rows (they are most of the log, read from Kafka for this pass): each row becomes cells,
    its own (the row and its traffic, `OWN`) and one per bucket of each of its histograms (`HISTOGRAM` + the
    histogram's index * `BUCKET_SPAN` + the bucket), and one aggregation per route, topic, minute and cell sums
    them. The cells are as narrow as they can be: numbers only, the traffic on the row's own cell only, so what
    is hashed and shuffled is small. A histogram's cell names its route and topic by their `_pair_key`, and the
    row's own cell, grouped by the names as well, says which names a key stands for. Two pairs with one key (a
    64-bit hash: not expected in a lifetime, but possible) are found there, before anything is added, and the
    pass is made again grouped by the names themselves (`by_key=False`)."""
    own = F.col("cell") == OWN
    names_of = ("route", "topic")
    if by_key:  # the key column, and the names kept on the row's own cell only
        pair, named = _pair_key(F.col("route"), F.col("topic")), [F.when(own, F.col(name)) for name in names_of]
    else:
        pair, named = F.lit(0).cast("long"), [F.col(name) for name in names_of]
    first = F.array(F.struct(F.lit(OWN).alias("cell"), F.lit(1).cast("long").alias("count")))
    cells = F.concat(first, *(_buckets(column, index) for index, column in enumerate(HISTOGRAMS)))
    keys = ("route", "topic", "key", "minute", "cell")
    sums = (
        frame.select("route", "topic", pair.alias("key"), _minute("second").alias("minute"), *TRAFFIC, F.inline(cells))
        .groupBy(*(column.alias(name) for column, name in zip(named, names_of, strict=True)), "key", "minute", "cell")
        .agg(F.sum("count").alias("count"), *(F.sum(F.when(own, F.col(name))).alias(name) for name in TRAFFIC))
    )
    sums = sums.persist(StorageLevel.MEMORY_AND_DISK)  # collected in two parts, so each fits the driver's memory
    rows = _rows(sums.where(own).select(*keys[:4], F.col("count").alias("rows"), *TRAFFIC))
    names: dict[int, tuple[str, str]] = {}
    for row in rows:
        both = (row["route"], row["topic"])
        if by_key and names.setdefault(row["key"], both) != both:
            sums.unpersist()
            _deliveries(frame, result, by_key=False)
            return
    _add_minutes(result, rows, TRAFFIC)
    histograms: list[dict[tuple[str, str, int, int], int]] = [getattr(result, column) for column in HISTOGRAMS]
    for route, topic, key, minute, cell, count in _columns(sums.where(~own), (*keys, "count")):
        index, bucket = divmod(cell - HISTOGRAM, BUCKET_SPAN)
        histogram, at = histograms[index], (*(names[key] if by_key else (route, topic)), minute, bucket)
        histogram[at] = histogram.get(at, 0) + count
    sums.unpersist()


def _buckets(column: str, index: int) -> Any:
    """A histogram column's cells, one per bucket; map keys are strings on the topic (Avro's)."""
    entries = F.map_entries(F.coalesce(F.col(column), F.create_map().cast("map<string,bigint>")))
    first = HISTOGRAM + index * BUCKET_SPAN
    return F.transform(
        entries,
        lambda entry: F.struct((F.lit(first) + entry["key"].cast("int")).alias("cell"), entry["value"].alias("count")),
    )


def _count(condition: Any) -> Any:
    return F.sum(F.when(condition, 1).otherwise(0))


def _sessions(frame: DataFrame, result: Rollup) -> None:
    frame = frame.withColumn("minute", _minute("at"))
    opened, closed = F.col("event") == Event.OPENED.value, F.col("event") == Event.CLOSED.value
    start, end = F.col("start"), F.col("end")
    sums = frame.groupBy("route", "topic", "minute").agg(
        F.count(F.lit(1)).alias("rows"),
        _count(opened).alias("streams_opened"),
        _count(closed).alias("streams_closed"),
        _count(opened & (start == Start.FRESH.value)).alias("fresh_starts"),
        _count(opened & (start == Start.RESUMED.value)).alias("resumes"),
        _count(opened & (start == Start.MALFORMED.value)).alias("malformed_ids"),
        _count(opened & (start == Start.SINCE.value)).alias("since_starts"),
        F.sum(F.when(closed, F.col("replayed")).otherwise(0)).alias("replayed"),
        _count(closed & (end == End.SLOW_CLIENT.value)).alias("slow_closes"),
        _count(closed & (end == End.TOKEN_EXPIRED.value)).alias("token_expiries"),
        _count(closed & (end == End.ROUTE_CHANGED.value)).alias("route_changes"),
    )
    _add_minutes(result, _rows(sums), SESSION_COUNTS)
    by_identity = (
        frame.where(closed & F.col("identity").isNotNull())
        .groupBy("route", "minute", "identity")
        .agg(F.sum("events").alias("events"), F.count(F.lit(1)).alias("sessions"))
    )
    for row in _rows(by_identity):
        key = (row["route"], row["minute"], row["identity"])
        events, sessions = result.identities.get(key, (0, 0))
        result.identities[key] = (events + row["events"], sessions + row["sessions"])
    by_process = frame.groupBy("process", "node", "pid", "route", "topic").agg(
        (_count(opened) - _count(closed)).alias("open"), F.max(F.col("at").cast("double") * 1000).alias("last_ms")
    )
    for row in _rows(by_process):
        _seen(result, ProcessSeen(row["node"], row["pid"], int(row["last_ms"]), None), row["process"])
        key = (row["process"], row["route"], row["topic"])
        result.process_streams[key] = result.process_streams.get(key, 0) + row["open"]


def _seen(result: Rollup, seen: ProcessSeen, process: str) -> None:
    known = result.processes.get(process)
    if known is None:
        result.processes[process] = seen
    else:
        known.merge(seen)


def _reports(frame: DataFrame, result: Rollup) -> None:
    by_process = frame.groupBy("process", "node", "pid").agg(
        F.count(F.lit(1)).alias("rows"),
        F.max(F.col("at").cast("double") * 1000).alias("last_ms"),
        F.max("interval_ms").alias("interval_ms"),
    )
    for row in _rows(by_process):
        result.rows_in += row["rows"]
        _seen(result, ProcessSeen(row["node"], row["pid"], int(row["last_ms"]), row["interval_ms"]), row["process"])


def _refusals(frame: DataFrame, result: Rollup) -> None:
    sums = (
        frame.withColumn("minute", _minute("second"))
        .groupBy("route", "minute", "status", "reason")
        .agg(F.count(F.lit(1)).alias("rows"), F.sum("count").alias("count"))
    )
    for row in _rows(sums):
        result.rows_in += row["rows"]
        key = (row["route"], row["minute"], row["status"], row["reason"])
        result.refusals[key] = result.refusals.get(key, 0) + row["count"]
