"""Reading the delivery log: one range of offsets of its Kafka topic, with Spark's own Kafka source, decoded into
one DataFrame per table (the encoding: streams/telemetry/delivery_schema.py).

The caller says where each partition's range starts and ends (the offsets the last successful run recorded, and
the ends it found), so the same call reads the same rows, however often it is retried. The rollup
(`analytics.jobs.rollup`) aggregates the frames; nothing here knows what the rows mean.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from streams.telemetry.delivery_schema import DELIVERIES, HEADER, TABLES, avro_batch_schema, header_value

# Messages per Spark task, at most. A task sums its share of the log before the shuffle, and a partition's rows lie
# in the order they were written: a task over a few hours of one partition holds those hours' groups in memory and
# sums them well, one over a whole day's partition spills them (bench/analytics.py, 10 M delivery rows in 5 568
# messages on local[2]: the deliveries' aggregation took 51-63 s in 4 tasks, one per partition, 41-42 s in 32).
MESSAGES_PER_TASK = 160


@dataclass(frozen=True)
class LogRange:
    """Offsets [start, end) of each partition of the topic; `kafka` holds the Kafka client's settings, as
    `kafka.`-prefixed options of Spark's source (bootstrap servers, security)."""

    topic: str
    start: Mapping[int, int]
    end: Mapping[int, int]
    kafka: Mapping[str, str]

    @property
    def messages(self) -> int:
        return sum(self.end[partition] - self.start.get(partition, 0) for partition in self.end)


class LogFrames:
    """The range's rows, one DataFrame per table; all but the deliveries are read from Kafka once and kept until
    `release()`."""

    def __init__(self, spark: SparkSession, log_range: LogRange) -> None:
        partitions = sorted(partition for partition in log_range.end if log_range.messages)
        ranges = {p: (log_range.start.get(p, 0), log_range.end[p]) for p in partitions}
        ranges = {p: bounds for p, bounds in ranges.items() if bounds[1] > bounds[0]}
        self.raw: DataFrame | None = None
        self.tables: dict[str, DataFrame] = {}
        self.skipped = 0
        if not ranges:
            return
        topic = log_range.topic
        options = {f"kafka.{name}": value for name, value in log_range.kafka.items()}
        raw = (
            spark.read.format("kafka")
            .options(**options)
            .option("kafka.allow.auto.create.topics", "false")  # the platform creates its topics itself
            .option("assign", json.dumps({topic: list(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): start for p, (start, _) in ranges.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): end for p, (_, end) in ranges.items()}}))
            .option("minPartitions", str(max(1, log_range.messages // MESSAGES_PER_TASK)))
            # Offsets retention removed before a run read them are gone: read from the first one kept.
            .option("failOnDataLoss", "false")
            .option("includeHeaders", "true")
            .load()
            .select(F.expr(f"filter(headers, h -> h.key = '{HEADER}')[0].value").alias("kind"), "value")
        )
        # Deliveries are most of the log and are aggregated in one pass: read from Kafka as they are needed. The
        # other tables, a few rows per stream and second, are kept for the several passes their sums take.
        deliveries = F.col("kind") == F.lit(bytearray(header_value(DELIVERIES)))
        self.raw = raw.where(~deliveries | F.col("kind").isNull()).persist(StorageLevel.MEMORY_AND_DISK)
        known = [F.lit(bytearray(header_value(table))) for table in TABLES]
        # Messages of another schema (a process of another version during an upgrade) are not decoded.
        self.skipped = self.raw.where(~F.col("kind").isin(*known) | F.col("kind").isNull()).count()
        for table in TABLES:
            source = raw.where(deliveries) if table == DELIVERIES else self.raw
            schema = json.dumps(avro_batch_schema(table))
            self.tables[table] = (
                source.where(F.col("kind") == F.lit(bytearray(header_value(table))))
                .select(F.explode(from_avro(F.col("value"), schema)).alias("row"))
                .select("row.*")
            )

    def release(self) -> None:
        if self.raw is not None:
            self.raw.unpersist()
