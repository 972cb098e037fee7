"""The delivery log's format, version 2: four tables carried by one Kafka topic, and the histograms' buckets.

Written by the web processes (streams/telemetry/delivery_log.py) and read by the rollup job (analytics/jobs/), which
imports this module and nothing of Django: the format is defined here once. docs/delivery-log.md describes it
for people; a change that is not additive (a column removed or retyped, a bucket moved) bumps
`SCHEMA_VERSION`, and every row carries the version it was written with.

The tables are declared once, as Arrow schemas (`SCHEMAS`); their encoding on the topic is derived from them
(`avro_batch_schema`), so a column added here is written and read without a second edit. A Kafka message holds
up to `BATCH_ROWS` rows of one table as an Avro array of records, without framing (schemaless, as Spark's
`from_avro` reads it); its header `HEADER` says which table and schema (`header_value`), and its key is the
writing process (`process` column), so the rows of one process go to one partition, in order.
"""

from __future__ import annotations

import enum
import hashlib
from bisect import bisect_right
from typing import Any

import fastavro
import fastavro.schema
import pyarrow as pa

SCHEMA_VERSION = 2

SESSIONS = "sessions"
DELIVERIES = "deliveries"
REFUSALS = "refusals"
REPORTS = "reports"
TABLES = (SESSIONS, DELIVERIES, REFUSALS, REPORTS)

# The message header naming a message's table and schema (`header_value`).
HEADER = "delivery-log"
# Rows per message at most: a message stays far below Kafka's default limit of 1 MiB.
BATCH_ROWS = 2000


class Start(enum.StrEnum):
    """How a stream started."""

    FRESH = "fresh"  # no Last-Event-ID, no ?since=
    RESUMED = "resumed"  # a Last-Event-ID this platform wrote
    MALFORMED = "malformed"  # a Last-Event-ID it could not read: started fresh
    SINCE = "since"  # ?since=<time>


class End(enum.StrEnum):
    """How a stream ended."""

    CLIENT_GONE = "client_gone"  # the client disconnected
    SLOW_CLIENT = "slow_client"  # closed: its connection stayed full and it fell too far behind
    TOKEN_EXPIRED = "token_expired"  # noqa: S105  (a reason, not a secret)
    ROUTE_CHANGED = "route_changed"
    TOPIC_DELETED = "topic_deleted"  # its Kafka topic was deleted (the client reconnects and gets a 404)
    REVOKED = "revoked"  # an operator revoked its token or identity (the client gets `event:revoked`, then a 401)
    SERVER_STOPPING = "server_stopping"
    FAILED = "failed"  # the stream raised: a defect, logged with its traceback


class Event(enum.StrEnum):
    """A row of the `sessions` table marks a stream's opening or its closing; the closing row carries the totals."""

    OPENED = "opened"
    CLOSED = "closed"


# Latency (and catch-up age) buckets, in milliseconds: bucket 0 holds [0, 1), bucket i (1..80) holds
# [2**((i-1)/4), 2**(i/4)), bucket 81 everything from 2**20 ms (about 17 minutes). Each bucket is 19 % wider than
# the one before, so a percentile read from a merged histogram is exact to within 19 %. Negative latencies (clocks
# apart) count as 0.
BOUNDS: tuple[float, ...] = tuple(2 ** (i / 4) for i in range(81))
BUCKETS = len(BOUNDS) + 1
_FAST = [bisect_right(BOUNDS, ms) for ms in range(4096)]


def bucket(latency_ms: int) -> int:
    """The bucket of a latency in whole milliseconds."""
    if latency_ms < 0:
        return 0
    if latency_ms < len(_FAST):
        return _FAST[latency_ms]
    return bisect_right(BOUNDS, latency_ms)


def bucket_upper_ms(index: int) -> float:
    """The bucket's upper bound, the value a percentile falling in it is reported as (its lower bound for the
    last bucket, which has none)."""
    return BOUNDS[min(index, len(BOUNDS) - 1)]


_TIME = pa.timestamp("ms", tz="UTC")
_COMMON = [
    ("schema_version", pa.int16()),
    ("node", pa.string()),
    ("pid", pa.int32()),
    ("process", pa.string()),  # one id per process start: node and pid are reused, this never is
]

SCHEMAS: dict[str, pa.Schema] = {
    SESSIONS: pa.schema(
        [
            *_COMMON,
            ("session", pa.string()),  # one id per stream, shared by its opened and closed rows
            ("event", pa.string()),  # Event
            ("at", _TIME),  # when it opened or closed
            ("opened_at", _TIME),
            ("route", pa.string()),
            ("endpoint", pa.string()),
            ("topic", pa.string()),
            ("path", pa.string()),
            ("identity", pa.string()),  # keyed hash of the guard's identity claim; null for an open route
            ("client", pa.string()),  # keyed hash of the client's address
            ("user_agent", pa.string()),  # the browser's family: chrome, firefox, safari, edge, curl, other...
            ("start", pa.string()),  # Start
            ("end", pa.string()),  # End; null on the opened row
            ("events", pa.int64()),  # totals, on the closed row (0 on the opened row)
            ("bytes", pa.int64()),
            ("replayed", pa.int64()),  # events read from before the cache window (history)
            ("resets", pa.int32()),  # partitions whose requested position was no longer retained
        ]
    ),
    DELIVERIES: pa.schema(
        [
            *_COMMON,
            ("second", _TIME),
            ("route", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("events", pa.int64()),
            ("bytes", pa.int64()),
            ("writes", pa.int64()),
            # Kafka timestamp -> write, per bucket index (see BOUNDS); only non-empty buckets. Live events only:
            # those written while their stream stood at the live end (docs/delivery-log.md).
            ("latency", pa.map_(pa.int16(), pa.int64())),
            # Events written while their stream was catching up (history, a resume, a shared catch-up read),
            # also counted in `events`; and their age at the write, as `latency` is bucketed.
            ("catchup_events", pa.int64()),
            ("catchup_age", pa.map_(pa.int16(), pa.int64())),
        ]
    ),
    REFUSALS: pa.schema(
        [
            *_COMMON,
            ("second", _TIME),
            ("route", pa.string()),  # "" when no route matched
            ("status", pa.int16()),
            ("reason", pa.string()),  # e.g. no_route, unknown_topic, unauthorized, forbidden, kafka_unavailable
            ("count", pa.int64()),
        ]
    ),
    # Every DELIVERY_LOG_REPORT_S seconds, each process says it is alive and how many streams it holds open; the
    # rollup stops counting the streams of a process whose reports stopped (docs/analytics.md, "Streams open").
    REPORTS: pa.schema(
        [
            *_COMMON,
            ("at", _TIME),
            ("interval_ms", pa.int64()),  # the process's report interval
            ("open", pa.int64()),  # streams open in the process
        ]
    ),
}

# The column by whose time a row counts: its minute, and (for the process's liveness) when it was written.
TIME_COLUMN = {SESSIONS: "at", DELIVERIES: "second", REFUSALS: "second", REPORTS: "at"}


def header_value(table: str) -> bytes:
    """`<table>/<version>/<fingerprint>`: Avro without framing is read only with the schema it was written with,
    so the header names that schema exactly (the fingerprint of its canonical form), and a message written by a
    process with other columns is never decoded with the wrong one."""
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(avro_batch_schema(table)))
    return f"{table}/{SCHEMA_VERSION}/{hashlib.sha256(canonical.encode()).hexdigest()[:12]}".encode()


def _avro_type(kind: pa.DataType, name: str) -> Any:
    """The Avro type of an Arrow column; every column may be null, as every Arrow column may."""
    if pa.types.is_timestamp(kind):
        base: Any = {"type": "long", "logicalType": "timestamp-millis"}
    elif pa.types.is_int64(kind):
        base = "long"
    elif pa.types.is_integer(kind):
        base = "int"
    elif pa.types.is_string(kind):
        base = "string"
    elif pa.types.is_map(kind):
        # Avro's map keys are strings: a bucket index is written as its digits and read back as a number.
        return {"type": "map", "values": _avro_type(kind.item_type, name)}
    else:
        raise TypeError(f"column {name}: no Avro type for {kind}")
    return ["null", base]


def avro_batch_schema(table: str) -> dict[str, Any]:
    """The Avro schema of one message of `table`: an array of its rows."""
    fields = [{"name": column.name, "type": _avro_type(column.type, column.name)} for column in SCHEMAS[table]]
    record = {"type": "record", "name": table.capitalize(), "namespace": f"sse.delivery_log.v{SCHEMA_VERSION}"}
    return {"type": "array", "items": {**record, "fields": fields}}
