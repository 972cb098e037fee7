"""The rollup: delivery-log files in, additive per-minute aggregates out.

Every number it produces is a sum (events, bytes, streams opened and closed, starts by kind, ends by reason,
refusals, the live latency and catch-up age histograms' buckets), so aggregates of different files add up: a file
that arrives late for a minute already rolled up is simply added to it, and the caller records which files it has
added, in the same transaction as the sums, so no file is ever added twice. Percentiles come later, from the summed
histograms (`analytics.percentiles`); concurrency comes from the streams opened and closed per minute (a running
sum).

Input: the files of each table (streams/telemetry/delivery_schema.py). Output: plain rows, small enough to collect: one
per route, topic and minute (and per bucket, reason, identity). Minutes are epoch seconds, multiples of 60.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streams.telemetry.delivery_schema import DELIVERIES, REFUSALS, SESSIONS, End, Event, Start

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


@dataclass
class Rollup:
    """What a set of files adds, keyed as the rollup tables are."""

    minutes: dict[tuple[str, str, int], dict[str, int]] = field(default_factory=dict)  # (route, topic, minute)
    latency: dict[tuple[str, str, int, int], int] = field(default_factory=dict)  # (route, topic, minute, bucket)
    catchup_age: dict[tuple[str, str, int, int], int] = field(default_factory=dict)  # keyed as `latency`
    refusals: dict[tuple[str, int, int, str], int] = field(default_factory=dict)  # (route, minute, status, reason)
    identities: dict[tuple[str, int, str], tuple[int, int]] = field(default_factory=dict)  # -> (events, sessions)
    rows_in: int = 0

    def minute(self, route: str, topic: str, minute: int) -> dict[str, int]:
        return self.minutes.setdefault((route, topic, minute), dict.fromkeys((*TRAFFIC, *SESSION_COUNTS), 0))

    @property
    def rows_out(self) -> int:
        return len(self.minutes) + len(self.latency) + len(self.catchup_age) + len(self.refusals) + len(self.identities)


def rollup(spark: SparkSession, files: Mapping[str, Sequence[str]]) -> Rollup:
    """Aggregate the given files of each table (paths or URLs Spark can read)."""
    result = Rollup()
    deliveries = _read(spark, files.get(DELIVERIES, ()))
    if deliveries is not None:
        _deliveries(deliveries, result)
    sessions = _read(spark, files.get(SESSIONS, ()))
    if sessions is not None:
        _sessions(sessions, result)
    refusals = _read(spark, files.get(REFUSALS, ()))
    if refusals is not None:
        _refusals(refusals, result)
    return result


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    """The frame's rows, moved as Arrow columns: millions of aggregate rows come back several times faster than
    as Row objects."""
    return frame.toArrow().to_pylist()  # type: ignore[no-any-return]


def _read(spark: SparkSession, paths: Sequence[str]) -> DataFrame | None:
    return spark.read.parquet(*paths) if paths else None


def _minute(column: str) -> Any:
    """The minute of a timestamp column, as epoch seconds."""
    return (F.col(column).cast("long") / 60).cast("long") * 60


def _add_minutes(result: Rollup, sums: DataFrame, names: Sequence[str]) -> None:
    """Add per (route, topic, minute) sums, each row with the count of input rows it came from."""
    for row in _rows(sums):
        result.rows_in += row["rows"]
        target = result.minute(row["route"], row["topic"], row["minute"])
        for name in names:
            target[name] += row[name] or 0


def _deliveries(frame: DataFrame, result: Rollup) -> None:
    frame = _with_catchup(frame).withColumn("minute", _minute("second"))
    keys = ("route", "topic", "minute")
    sums = frame.groupBy(*keys).agg(F.count(F.lit(1)).alias("rows"), *(F.sum(name).alias(name) for name in TRAFFIC))
    _add_minutes(result, sums, TRAFFIC)
    for column in HISTOGRAMS:
        histogram: dict[tuple[str, str, int, int], int] = getattr(result, column)
        buckets = (
            frame.select(*keys, F.explode(column).alias("bucket", "count"))
            .groupBy(*keys, "bucket")
            .agg(F.sum("count").alias("count"))
        )
        for row in _rows(buckets):
            key = (row["route"], row["topic"], row["minute"], row["bucket"])
            histogram[key] = histogram.get(key, 0) + row["count"]


def _with_catchup(frame: DataFrame) -> DataFrame:
    """Rows written before the catch-up columns existed have none: they told no catch-up apart (every event of
    theirs is in `latency`), so they count none."""
    if "catchup_events" not in frame.columns:
        frame = frame.withColumn("catchup_events", F.lit(0).cast("long"))
    if "catchup_age" not in frame.columns:
        frame = frame.withColumn("catchup_age", F.create_map().cast("map<smallint,bigint>"))
    return frame


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
    _add_minutes(result, sums, SESSION_COUNTS)
    by_identity = (
        frame.where(closed & F.col("identity").isNotNull())
        .groupBy("route", "minute", "identity")
        .agg(F.sum("events").alias("events"), F.count(F.lit(1)).alias("sessions"))
    )
    for row in _rows(by_identity):
        key = (row["route"], row["minute"], row["identity"])
        events, sessions = result.identities.get(key, (0, 0))
        result.identities[key] = (events + row["events"], sessions + row["sessions"])


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
