"""The delivery log's format, version 1: three tables of Parquet files, and the latency histograms' buckets.

Written by the web processes (streams/telemetry/delivery_log.py) and read by the rollup job (analytics/jobs/), which
imports this module and nothing of Django: the format is defined here once. docs/delivery-log.md describes it
for people; a change that is not additive (a column removed or retyped, a bucket moved) bumps
`SCHEMA_VERSION`, and every row carries the version it was written with.

Files live under `DELIVERY_LOG_DIR/<table>/date=YYYY-MM-DD/hour=HH/`, one file per process per flush, named
`<node>-<pid>-<first row's ms>-<sequence>.parquet`; each is written under a name starting with `.` (which
Spark skips) and renamed when complete, so a reader never sees half a file.
"""

from __future__ import annotations

import enum
from bisect import bisect_right

import pyarrow as pa

SCHEMA_VERSION = 1

SESSIONS = "sessions"
DELIVERIES = "deliveries"
REFUSALS = "refusals"
TABLES = (SESSIONS, DELIVERIES, REFUSALS)


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
_COMMON = [("schema_version", pa.int16()), ("node", pa.string()), ("pid", pa.int32())]

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
}
