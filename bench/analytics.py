"""Benchmark of the analytics rollup: a busy day of delivery logs on the log's Kafka topic, rolled up by Spark.

    platform/with-services.sh --only kafka -- .venv/bin/python bench/analytics.py   # 1M and 10M rows, local[2]
    .venv/bin/python bench/analytics.py --rows 1000000    # one size, on KAFKA_BOOTSTRAP_SERVERS

For each size it sends a day of delivery logs to a topic of its own (4 partitions) as 4 web processes would
(100 routes, 4 partitions each, per-second delivery rows with latency histograms, a session opening and closing
per stream, refusals, a report every 15 s), in the log's encoding (streams/telemetry/delivery_schema.py: Avro
arrays of up to BATCH_ROWS rows, keyed by process). Spark itself writes them (to_avro and its Kafka sink: a
Python producer would take minutes for 10 M rows); one message is decoded back with fastavro, as a check that
they are what a web process sends. It then times the rollup job, reading the whole topic with Spark's Kafka
source on `--master` (default local[2]) with a warm session, and the minute-by-minute case: one minute of logs
from the 4 processes, read and rolled up by the same warm session. The topics are deleted afterwards (--keep
keeps them). The table is printed on stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fastavro
import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analytics.jobs.rollup import Rollup, rollup  # noqa: E402
from analytics.jobs.source import LogFrames, LogRange  # noqa: E402
from analytics.jobs.spark import spark_session  # noqa: E402
from config.kafka_settings import KafkaSettings  # noqa: E402
from streams.kafka.admin import ensure_topic  # noqa: E402
from streams.telemetry.delivery_schema import (  # noqa: E402
    BATCH_ROWS,
    DELIVERIES,
    HEADER,
    REFUSALS,
    REPORTS,
    SCHEMA_VERSION,
    SCHEMAS,
    SESSIONS,
    TIME_COLUMN,
    avro_batch_schema,
    bucket,
    header_value,
)

DAY = datetime(2026, 11, 21, tzinfo=UTC)
NODES = 4
ROUTES = 100
PARTITIONS = 4
HOURS = 24
COMPRESSION = os.environ.get("BENCH_COMPRESSION", "lz4")


def delivery_template(rows: int, seconds: int, rng: random.Random) -> pa.Table:
    """`rows` delivery rows spread over `seconds` seconds from 0 (shifted per file later)."""
    second, route, partition, events, size, writes, latency = [], [], [], [], [], [], []
    catchup_events: list[int] = []
    catchup_age: list[list[tuple[str, int]]] = []
    for index in range(rows):
        second.append((index * seconds // rows) * 1000)
        route.append(f"route-{rng.randrange(ROUTES)}")
        partition.append(rng.randrange(PARTITIONS))
        count = rng.randrange(1, 400)
        events.append(count)
        size.append(count * 1100)
        writes.append(max(1, count // 20))
        # One row in ten is half catch-up (streams resuming): those events are in its age histogram, not latency.
        catchup = count // 2 if index % 10 == 0 else 0
        catchup_events.append(catchup)
        catchup_age.append([(str(bucket(600_000)), catchup)] if catchup else [])
        live = count - catchup
        histogram: dict[int, int] = {}
        for _ in range(3):
            index_ = bucket(int(rng.lognormvariate(3, 1)))
            histogram[index_] = histogram.get(index_, 0) + live // 3
        histogram[bucket(5)] = histogram.get(bucket(5), 0) + live - 3 * (live // 3)
        latency.append([(str(key), value) for key, value in sorted(histogram.items())])
    return pa.Table.from_pydict(
        {
            "schema_version": [SCHEMA_VERSION] * rows,
            "node": ["node-0"] * rows,
            "pid": [1] * rows,
            "process": ["p"] * rows,
            "second": second,
            "route": route,
            "topic": [name.replace("route", "topic") for name in route],
            "partition": partition,
            "events": events,
            "bytes": size,
            "writes": writes,
            "latency": latency,
            "catchup_events": catchup_events,
            "catchup_age": catchup_age,
        },
        schema=_on_the_topic(DELIVERIES),
    )


def session_template(streams: int, seconds: int, rng: random.Random) -> pa.Table:
    rows: list[dict[str, object]] = []
    for index in range(streams):
        opened = rng.randrange(seconds) * 1000
        closed = min(opened + rng.randrange(1, 600) * 1000, (seconds - 1) * 1000)
        base = {
            "schema_version": SCHEMA_VERSION, "node": "node-0", "pid": 1, "process": "p", "session": f"s{index}",
            "opened_at": opened,
            "route": f"route-{rng.randrange(ROUTES)}", "endpoint": "default", "topic": "topic", "path": "/x",
            "identity": f"id{rng.randrange(500)}", "client": "c", "user_agent": "chrome",
            "start": rng.choice(["fresh", "resumed", "resumed", "since"]), "resets": 0,
        }  # fmt: skip
        rows.append({**base, "event": "opened", "at": opened, "end": None, "events": 0, "bytes": 0, "replayed": 0})
        rows.append(
            {**base, "event": "closed", "at": closed, "end": rng.choice(["client_gone", "slow_client"]),
             "events": rng.randrange(1000), "bytes": rng.randrange(10**6), "replayed": rng.randrange(10)}
        )  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SCHEMAS[SESSIONS])


def report_template(seconds: int) -> pa.Table:
    rows = [
        {"schema_version": SCHEMA_VERSION, "node": "node-0", "pid": 1, "process": "p", "at": at * 1000,
         "interval_ms": 15_000, "open": 100}
        for at in range(0, seconds, 15)
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SCHEMAS[REPORTS])


def _on_the_topic(table: str) -> pa.Schema:
    """The table's schema as the topic carries it: a map's keys are strings (Avro's map keys are)."""
    fields = [
        pa.field(f.name, pa.map_(pa.string(), f.type.item_type)) if pa.types.is_map(f.type) else f
        for f in SCHEMAS[table]
    ]
    return pa.schema(fields)


def refusal_template(rows: int, seconds: int, rng: random.Random) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"schema_version": SCHEMA_VERSION, "node": "node-0", "pid": 1, "process": "p",
             "second": rng.randrange(seconds) * 1000,
             "route": f"route-{rng.randrange(ROUTES)}", "status": 401, "reason": "unauthorized", "count": 1}
            for _ in range(rows)
        ],
        schema=SCHEMAS[REFUSALS],
    )  # fmt: skip


def send_logs(
    spark: SparkSession, kafka: KafkaSettings, topic: str, delivery_rows: int, *, seconds: int, hours: int
) -> int:
    """Send `hours` hours of logs of NODES processes to `topic`, `delivery_rows` delivery rows in all; returns
    the messages sent."""
    rng = random.Random(1)
    per_hour = delivery_rows // (hours * NODES)
    templates = {
        DELIVERIES: delivery_template(per_hour, seconds, rng),
        SESSIONS: session_template(max(10, per_hour // 50), seconds, rng),
        REFUSALS: refusal_template(max(10, per_hour // 100), seconds, rng),
        REPORTS: report_template(seconds),
    }
    messages = 0
    for hour in range(hours):  # an hour at a time: a day of 10 M rows at once needs more than the driver's memory
        grid = spark.createDataFrame(
            [(hour, node, int((DAY + timedelta(hours=hour)).timestamp() * 1000)) for node in range(NODES)],
            "hour int, node_index int, start_ms long",
        )
        for table, template in templates.items():
            rows = spark.createDataFrame(template).crossJoin(F.broadcast(grid))
            for column in {TIME_COLUMN[table], "opened_at"} & set(template.column_names):
                moved = (F.col(column).cast("double") * 1000).cast("long") + F.col("start_ms")
                rows = rows.withColumn(column, F.timestamp_millis(moved))
            rows = rows.withColumn("node", F.concat(F.lit("node-"), F.col("node_index").cast("string")))
            rows = rows.withColumn("process", F.concat(F.col("node"), F.lit("-1")))
            chunks = -(-len(template) // BATCH_ROWS)
            # A message holds up to BATCH_ROWS rows of one process, as a web process sends them.
            rows = rows.withColumn("chunk", F.pmod(F.monotonically_increasing_id(), F.lit(chunks)))
            columns = list(SCHEMAS[table].names)
            batches = rows.groupBy("process", "chunk").agg(F.collect_list(F.struct(*columns)).alias("rows"))
            header = F.struct(F.lit(HEADER).alias("key"), F.lit(bytearray(header_value(table))).alias("value"))
            batches.select(
                F.col("process").alias("key"),
                to_avro(F.col("rows"), json.dumps(avro_batch_schema(table))).alias("value"),
                F.array(header).alias("headers"),
            ).write.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers).option(
                "kafka.compression.type", COMPRESSION
            ).option("topic", topic).save()
            messages += NODES * chunks
    return messages


def ends(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    consumer = Consumer(kafka.consumer_config())
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def check_one_message(kafka: KafkaSettings, topic: str) -> None:
    """The first deliveries message decodes with fastavro as the web processes' own would."""
    consumer = Consumer({**kafka.consumer_config(), "auto.offset.reset": "earliest", "group.id": uuid.uuid4().hex})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            if dict(message.headers() or [])[HEADER] == header_value(DELIVERIES):
                schema = fastavro.parse_schema(avro_batch_schema(DELIVERIES))
                rows = fastavro.schemaless_reader(io.BytesIO(message.value() or b""), schema, None)
                if not (isinstance(rows, list) and rows and "latency" in rows[0]):
                    raise SystemExit(f"a deliveries message did not decode as the log's encoding: {rows!r:.200}")
                return
        raise SystemExit("no deliveries message read back")
    finally:
        consumer.close()


def timed_rollup(spark: SparkSession, kafka: KafkaSettings, topic: str) -> tuple[Rollup, float]:
    started = time.monotonic()
    end = ends(kafka, topic)
    frames = LogFrames(
        spark, LogRange(topic, dict.fromkeys(end, 0), end, {"bootstrap.servers": kafka.bootstrap_servers})
    )
    result = rollup(frames.tables)
    frames.release()
    return result, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000", help="delivery rows per run, comma-separated")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the topics")
    options = parser.parse_args()
    sizes = [int(value) for value in options.rows.split(",")]
    kafka = KafkaSettings(bootstrap_servers=os.environ["KAFKA_BOOTSTRAP_SERVERS"])
    topics: list[str] = []

    def new_topic(name: str) -> str:
        topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        ensure_topic(kafka, topic, partitions=4)
        topics.append(topic)
        return topic

    print(f"starting Spark on {options.master}...", file=sys.stderr)
    started = time.monotonic()
    spark = spark_session(options.master)
    spark.range(1).collect()
    cold = time.monotonic() - started

    table = [
        "| case | delivery rows | all rows in | messages | rows out | seconds | rows/s |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        for size in sizes:
            topic = new_topic(f"analytics-{size}")
            print(f"sending a day of logs with {size:,} delivery rows...", file=sys.stderr)
            messages = send_logs(spark, kafka, topic, size, seconds=3600, hours=HOURS)
            check_one_message(kafka, topic)
            result, took = timed_rollup(spark, kafka, topic)
            table.append(
                f"| a day, {options.master} | {size:,} | {result.rows_in:,} | {messages:,} | {result.rows_out:,} | "
                f"{took:.1f} | {result.rows_in / took:,.0f} |"
            )
            print(table[-1], file=sys.stderr)

        topic = new_topic("analytics-minute")
        minute_rows = ROUTES * PARTITIONS * 60  # every route's partitions, every second, on one process in all
        messages = send_logs(spark, kafka, topic, minute_rows, seconds=60, hours=1)
        result, _ = timed_rollup(spark, kafka, topic)  # the first run on this topic compiles the plan; not timed
        timings = []
        for _ in range(3):
            result, took = timed_rollup(spark, kafka, topic)
            timings.append(took)
        table.append(
            f"| one minute, warm session (3 runs) | {minute_rows:,} | {result.rows_in:,} | {messages} | "
            f"{result.rows_out:,} | {' / '.join(f'{t:.1f}' for t in timings)} | {result.rows_in / min(timings):,.0f} |"
        )
    finally:
        if not options.keep and topics:
            admin = AdminClient(kafka.admin_config())  # kept while its futures are awaited
            for future in admin.delete_topics(topics).values():
                future.result(timeout=30)
    print(f"\nSpark start (cold, {options.master}): {cold:.1f} s\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
