"""Benchmark of the analytics rollup: a busy day of delivery logs, rolled up by Spark.

    .venv/bin/python bench/analytics.py                 # 1M and 10M delivery rows, local[2]
    .venv/bin/python bench/analytics.py --rows 1000000  # one size

For each size it writes a day of delivery logs as 4 web processes would (100 routes, 4 partitions each,
per-second delivery rows with latency histograms, a session opening and closing per stream, refusals), one file
per process, table and hour, then times the rollup job on `--master` (default local[2]) with a warm session.
It then times the minute-by-minute case: one minute of logs from the 4 processes, rolled up by the same warm
session. Files go under var/bench/analytics-<rows>/ and are removed afterwards (--keep keeps them).
The table is printed on stdout.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analytics.jobs.rollup import rollup  # noqa: E402
from analytics.jobs.spark import spark_session  # noqa: E402
from streams.telemetry.delivery_schema import DELIVERIES, REFUSALS, SCHEMAS, SESSIONS, bucket  # noqa: E402

DAY = datetime(2026, 11, 21, tzinfo=UTC)
NODES = 4
ROUTES = 100
PARTITIONS = 4
HOURS = 24


def delivery_template(rows: int, seconds: int, rng: random.Random) -> pa.Table:
    """`rows` delivery rows spread over `seconds` seconds from 0 (shifted per file later)."""
    second, route, partition, events, size, writes, latency = [], [], [], [], [], [], []
    for index in range(rows):
        second.append((index * seconds // rows) * 1000)
        route.append(f"route-{rng.randrange(ROUTES)}")
        partition.append(rng.randrange(PARTITIONS))
        count = rng.randrange(1, 400)
        events.append(count)
        size.append(count * 1100)
        writes.append(max(1, count // 20))
        histogram: dict[int, int] = {}
        for _ in range(3):
            index_ = bucket(int(rng.lognormvariate(3, 1)))
            histogram[index_] = histogram.get(index_, 0) + count // 3
        histogram[bucket(5)] = histogram.get(bucket(5), 0) + count - 3 * (count // 3)
        latency.append(sorted(histogram.items()))
    return pa.Table.from_pydict(
        {
            "schema_version": [1] * rows,
            "node": ["node-0"] * rows,
            "pid": [1] * rows,
            "second": second,
            "route": route,
            "topic": [name.replace("route", "topic") for name in route],
            "partition": partition,
            "events": events,
            "bytes": size,
            "writes": writes,
            "latency": latency,
        },
        schema=SCHEMAS[DELIVERIES],
    )


def session_template(streams: int, seconds: int, rng: random.Random) -> pa.Table:
    rows: list[dict[str, object]] = []
    for index in range(streams):
        opened = rng.randrange(seconds) * 1000
        closed = min(opened + rng.randrange(1, 600) * 1000, (seconds - 1) * 1000)
        base = {
            "schema_version": 1, "node": "node-0", "pid": 1, "session": f"s{index}", "opened_at": opened,
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


def refusal_template(rows: int, seconds: int, rng: random.Random) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"schema_version": 1, "node": "node-0", "pid": 1, "second": rng.randrange(seconds) * 1000,
             "route": f"route-{rng.randrange(ROUTES)}", "status": 401, "reason": "unauthorized", "count": 1}
            for _ in range(rows)
        ],
        schema=SCHEMAS[REFUSALS],
    )  # fmt: skip


def shifted(table: pa.Table, column: str, start: datetime, node: int) -> pa.Table:
    """`table` moved to `start` and written by `node-<node>`."""
    offset = pa.scalar(int(start.timestamp() * 1000), pa.int64())
    moved = pc.add(table.column(column).cast(pa.int64()), offset).cast(pa.timestamp("ms", tz="UTC"))
    table = table.set_column(table.schema.get_field_index(column), column, moved)
    if column == "at":
        opened = pc.add(table.column("opened_at").cast(pa.int64()), offset).cast(pa.timestamp("ms", tz="UTC"))
        table = table.set_column(table.schema.get_field_index("opened_at"), "opened_at", opened)
    return table.set_column(1, "node", pa.array([f"node-{node}"] * len(table)))


def write_logs(directory: Path, delivery_rows: int, seconds: int, hours: int) -> dict[str, list[str]]:
    """Delivery logs of `hours` files per process and table, `delivery_rows` delivery rows in all."""
    rng = random.Random(1)
    per_file = delivery_rows // (hours * NODES)
    templates = {
        DELIVERIES: (delivery_template(per_file, seconds, rng), "second"),
        SESSIONS: (session_template(max(10, per_file // 50), seconds, rng), "at"),
        REFUSALS: (refusal_template(max(10, per_file // 100), seconds, rng), "second"),
    }
    files: dict[str, list[str]] = {table: [] for table in templates}
    for hour in range(hours):
        start = DAY + timedelta(hours=hour)
        for node in range(NODES):
            for table, (template, column) in templates.items():
                folder = directory / table / f"date={start:%Y-%m-%d}" / f"hour={start:%H}"
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"node-{node}-1-{hour}.parquet"
                pq.write_table(shifted(template, column, start, node), path)
                files[table].append(str(path))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000", help="delivery rows per run, comma-separated")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    options = parser.parse_args()
    sizes = [int(value) for value in options.rows.split(",")]

    print(f"starting Spark on {options.master}...", file=sys.stderr)
    started = time.monotonic()
    spark = spark_session(options.master)
    spark.range(1).collect()
    cold = time.monotonic() - started

    table = [
        "| case | delivery rows | all rows in | files | rows out | seconds | rows/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        directory = ROOT / "var" / "bench" / f"analytics-{size}"
        shutil.rmtree(directory, ignore_errors=True)
        print(f"writing a day of logs with {size:,} delivery rows...", file=sys.stderr)
        files = write_logs(directory, size, 3600, HOURS)
        started = time.monotonic()
        result = rollup(spark, files)
        took = time.monotonic() - started
        count = sum(len(paths) for paths in files.values())
        table.append(
            f"| a day, {options.master} | {size:,} | {result.rows_in:,} | {count} | {result.rows_out:,} | "
            f"{took:.1f} | {result.rows_in / took:,.0f} |"
        )
        print(table[-1], file=sys.stderr)
        if not options.keep:
            shutil.rmtree(directory, ignore_errors=True)

    directory = ROOT / "var" / "bench" / "analytics-minute"
    shutil.rmtree(directory, ignore_errors=True)
    minute_rows = ROUTES * PARTITIONS * 60  # every route's partitions, every second, on one process in all
    files = write_logs(directory, minute_rows, 60, 1)
    timings = []
    result = rollup(spark, files)  # the first run on these files compiles the plan; it is not timed
    for _ in range(3):
        started = time.monotonic()
        result = rollup(spark, files)
        timings.append(time.monotonic() - started)
    count = sum(len(paths) for paths in files.values())
    table.append(
        f"| one minute, warm session (3 runs) | {minute_rows:,} | {result.rows_in:,} | {count} | {result.rows_out:,} | "
        f"{' / '.join(f'{t:.1f}' for t in timings)} | {result.rows_in / min(timings):,.0f} |"
    )
    if not options.keep:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\nSpark start (cold, {options.master}): {cold:.1f} s\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
