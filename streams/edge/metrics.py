"""Prometheus metrics of the web processes, served at `/metrics` (docs/operations.md lists them).

Every worker of `platform/web.py` is a process of its own; `/metrics` must answer for all of them whichever one
takes the scrape. prometheus-client's multiprocess mode does that: with `PROMETHEUS_MULTIPROC_DIR` set (web.py
sets it), each process keeps its values in memory-mapped files there, and a scrape merges the files. Without the
variable (a lone daphne, the tests' in-process endpoint) the values live in this process and a scrape reads them.

Two kinds of update, so the data plane stays fast:
- what happens once per stream or request (a stream opens or closes, a refusal) goes to prometheus at once;
- what happens once per write (events, bytes, live latency, catch-up age) is added up in dictionaries on the
  event loop and handed to prometheus by `sync()` every second, with the process's gauges (cache, Kafka lag)
  and the counters other parts already keep (renewals, route reloads, delivery-log drops). A scrape syncs its
  own process first; another worker's figures are at most a second old.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess

from streams.kafka.client import ReaderStats
from streams.kafka.decoding import DecodeStats

if TYPE_CHECKING:
    from streams.hub.hub import Hub
    from streams.telemetry.delivery_log import Batch

log = logging.getLogger(__name__)

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
SYNC_INTERVAL_S = 1.0
# Live delivery latency (Kafka record timestamp to the write, for a stream at the live end), in seconds: 1 ms to
# 1 min. A catch-up event's age at its write spans much more (a replay from a topic's start): 10 ms to a week.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CATCHUP_AGE_BUCKETS = (0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0, 604800.0)
_BOUNDS_MS = tuple(bound * 1000 for bound in LATENCY_BUCKETS)
_CATCHUP_BOUNDS_MS = tuple(bound * 1000 for bound in CATCHUP_AGE_BUCKETS)

STREAMS_OPEN = Gauge("sse_streams_open", "Streams open now, by route.", ["route"], multiprocess_mode="livesum")
STREAMS_OPENED = Counter("sse_streams_opened", "Streams opened, by route and how they started.", ["route", "start"])
STREAMS_CLOSED = Counter("sse_streams_closed", "Streams closed, by route and reason.", ["route", "reason"])
EVENTS = Counter("sse_events_delivered", "Events written to clients, by route.", ["route"])
BYTES = Counter("sse_delivered_bytes", "Event bytes written to clients, by route.", ["route"])
LATENCY = Histogram(
    "sse_delivery_latency_seconds",
    "Live events only: from a record's Kafka timestamp to its write to a client whose stream stood at the live "
    "end, per event, by route. Catch-up events are in sse_catchup_age_seconds.",
    ["route"],
    buckets=LATENCY_BUCKETS,
)
CATCHUP_AGE = Histogram(
    "sse_catchup_age_seconds",
    "Catch-up events only (history, resumes, shared catch-up reads: written before their stream reached the live "
    "end): a record's age at its write to a client, per event, by route; its _count counts them.",
    ["route"],
    buckets=CATCHUP_AGE_BUCKETS,
)
REFUSALS = Counter(
    "sse_refusals", "Stream requests refused, by route, status and reason.", ["route", "status", "reason"]
)
STARTS = Counter(
    "sse_cache_starts",
    "Streams started, by whether the cache held every partition's start (hit) or Kafka had to be read (miss).",
    ["result"],
)
FETCH_LAG = Gauge(
    "sse_kafka_fetch_lag_records",
    "Records Kafka holds past what the fetcher brought into the cache, per topic-partition (the worst process).",
    ["topic", "partition"],
    multiprocess_mode="livemax",
)
CACHE_BYTES = Gauge("sse_cache_bytes", "Bytes of records the caches hold.", multiprocess_mode="livesum")
CACHED_TOPICS = Gauge("sse_cached_topics", "Topics the caches hold.", multiprocess_mode="livesum")
HISTORICAL_READERS = Gauge(
    "sse_historical_readers", "Kafka consumers reading history older than the cache.", multiprocess_mode="livesum"
)
RENEWALS = Counter("sse_renewals", "Guarded streams renewed by a challenge response.")
ROUTE_RELOADS = Counter("sse_route_reloads", "Route tables read from the database.")
LOG_DROPPED = Counter("sse_delivery_log_dropped_rows", "Delivery-log rows dropped (buffer full or write error).")
SLOW_CLOSED = Counter("sse_slow_clients_closed", "Streams closed because their client stopped reading.")
DECODE_ERRORS = Counter(
    "sse_decode_errors", "Records skipped because they do not decode, by topic and reason.", ["topic", "reason"]
)
FILTER_FAILURES = Counter(
    "sse_filter_expression_failures", "Records on which a route filter's expression failed (no match).", []
)
RECORDS_DECODED = Counter("sse_records_decoded", "Records decoded to JSON by the Kafka consumers, by topic.", ["topic"])
DECODE_WAITING = Gauge(
    "sse_decode_waiting_partitions",
    "Partitions whose records wait for their schema registry, by topic (the worst process).",
    ["topic"],
    multiprocess_mode="livemax",
)


class Metrics:
    """This process's side of the metrics: the per-write tallies, and what `sync()` hands to prometheus."""

    def __init__(self) -> None:
        # route -> [events, bytes, live latency sum in s, live events per latency bucket (the last: over the top
        # bound), catch-up age sum in s, catch-up events per age bucket]
        self.tallies: dict[str, list[Any]] = {}
        self.sources: list[tuple[Counter, Callable[[], int]]] = []  # counters another part keeps as an int
        self._seen: dict[Counter, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._lags: set[tuple[str, str]] = set()
        self._decoding: tuple[dict[tuple[str, str], int], dict[str, int]] = ({}, {})
        self._waiting: set[str] = set()
        self.hub: Callable[[], Hub | None] = lambda: None

    def count(self, counter: Counter, read: Callable[[], int]) -> None:
        """Report `read()`, a count another part of the process keeps, as `counter`."""
        self.sources.append((counter, read))

    def start(self) -> None:
        """Sync every second from now on, on the running loop (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="metrics-sync")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            try:
                self.sync()
            except Exception:
                log.exception("metrics: sync failed")

    # --- the event loop's side -------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return True

    def delivered(self, route: str, topic: str, batch: Batch, clients: int = 1, *, live: bool) -> None:
        """A write of `batch` to `clients` clients (a fan-out group writes the same bytes to each): to the live
        latency histogram when `live`, else to the catch-up age one."""
        if not batch:
            return
        tally = self.tallies.get(route)
        if tally is None:
            live_buckets, catchup_buckets = [0] * (len(_BOUNDS_MS) + 1), [0] * (len(_CATCHUP_BOUNDS_MS) + 1)
            tally = self.tallies[route] = [0, 0, 0.0, live_buckets, 0.0, catchup_buckets]
        now_ms = time.time() * 1000
        # Chosen once per write: an event costs what it did before the two were told apart.
        which, bounds = (2, _BOUNDS_MS) if live else (4, _CATCHUP_BOUNDS_MS)
        buckets = tally[which + 1]
        size_sum = 0
        latency_ms = 0.0
        for record, size in batch:
            size_sum += size
            late = max(now_ms - record.timestamp_ms, 0.0)
            latency_ms += late
            buckets[bisect_left(bounds, late)] += clients
        tally[0] += len(batch) * clients
        tally[1] += size_sum * clients
        tally[which] += latency_ms * clients / 1000

    # --- to prometheus ---------------------------------------------------------------------------------

    def sync(self) -> None:
        """Hand the tallies and the process's gauges to prometheus."""
        tallies, self.tallies = self.tallies, {}
        for route, (events, size, latency_s, buckets, catchup_s, catchup) in tallies.items():
            EVENTS.labels(route).inc(events)
            BYTES.labels(route).inc(size)
            if any(buckets):
                observe_many(LATENCY.labels(route), latency_s, buckets)
            if any(catchup):
                observe_many(CATCHUP_AGE.labels(route), catchup_s, catchup)
        for counter, read in self.sources:
            value = read()
            delta = value - self._seen.get(counter, 0)
            if delta > 0:
                counter.inc(delta)
            self._seen[counter] = value
        HISTORICAL_READERS.set(ReaderStats.historical_readers)
        self._sync_decoding()
        hub = self.hub()
        if hub is not None:
            CACHE_BYTES.set(hub.cache.bytes)
            CACHED_TOPICS.set(len(hub.topics))
            self._set_lags(fetch_lags(hub))
            self._set_waiting(hub.fetcher.consumers.waiting)

    def _sync_decoding(self) -> None:
        """What the consumer processes decoded and skipped since the last sync (streams/kafka/decoding.py)."""
        (skipped, decoded), (skipped_before, decoded_before) = DecodeStats.snapshot(), self._decoding
        for (topic, reason), count in skipped.items():
            if count > skipped_before.get((topic, reason), 0):
                DECODE_ERRORS.labels(topic, reason).inc(count - skipped_before.get((topic, reason), 0))
        for topic, count in decoded.items():
            if count > decoded_before.get(topic, 0):
                RECORDS_DECODED.labels(topic).inc(count - decoded_before.get(topic, 0))
        self._decoding = (skipped, decoded)

    def _set_waiting(self, waiting: dict[tuple[str, int], str]) -> None:
        topics: dict[str, int] = {}
        for topic, _ in waiting:
            topics[topic] = topics.get(topic, 0) + 1
        for gone in self._waiting - topics.keys():
            DECODE_WAITING.labels(gone).set(0)
        for topic, partitions in topics.items():
            DECODE_WAITING.labels(topic).set(partitions)
        self._waiting = set(topics)

    def _set_lags(self, lags: dict[tuple[str, int], int]) -> None:
        current = {(topic, str(partition)) for topic, partition in lags}
        # A partition dropped from the cache reads 0: in multiprocess mode a value cannot leave the shared files.
        for gone in self._lags - current:
            FETCH_LAG.labels(*gone).set(0)
        for (topic, partition), lag in lags.items():
            FETCH_LAG.labels(topic, str(partition)).set(lag)
        self._lags = current


def fetch_lags(hub: Hub) -> dict[tuple[str, int], int]:
    """Per fetched topic-partition: Kafka's end, as the fetcher last heard it, minus the cache's next offset."""
    lags = {}
    for key, high in hub.fetcher.consumers.highs.items():
        window = hub.cache.log(*key)
        if window is not None and key in hub.fetcher.partitions:
            lags[key] = max(0, high - window.next_offset)
    return lags


def observe_many(histogram: Any, total: float, buckets: Iterable[int]) -> None:
    """Add counted observations to a histogram child: `buckets[i]` events fell in bucket i, summing to `total`.
    prometheus-client observes one value at a time; this adds to the same values its `observe()` does."""
    for value, count in zip(histogram._buckets, buckets, strict=True):
        if count:
            value.inc(count)
    histogram._sum.inc(total)


def decode_errors(topic: str) -> dict[str, int]:
    """The records of `topic` skipped because they do not decode, by reason, counted by every worker of the node
    since it started (a scrape of each node's `/metrics` says the same)."""
    return decode_errors_matching(topic).get(topic, {})


def decode_errors_matching(pattern: str) -> dict[str, dict[str, int]]:
    """The records skipped because they do not decode, per topic that `pattern` covers (a topic name, or `*`
    matching any run of characters, as a route's topic template reads with its `${...}` as `*`) and per reason,
    counted by every worker of the node since it started. The control plane's route page shows them
    (bindings/insights.py; registered by streams/apps.py)."""
    directory = multiprocess_dir()
    registry: Any = REGISTRY
    if directory is not None:
        registry = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    counts: dict[str, dict[str, int]] = {}
    for metric in registry.collect():
        if metric.name != "sse_decode_errors":
            continue
        for sample in metric.samples:
            topic = sample.labels.get("topic", "")
            if sample.name != "sse_decode_errors_total" or not _covers(pattern, topic) or not sample.value:
                continue
            by_reason = counts.setdefault(topic, {})
            reason = sample.labels["reason"]
            by_reason[reason] = by_reason.get(reason, 0) + int(sample.value)
    return counts


def _covers(pattern: str, topic: str) -> bool:
    # Topic names hold only [A-Za-z0-9._-]: of fnmatch's special characters, only a pattern's `*` can occur.
    return pattern == topic or ("*" in pattern and fnmatch.fnmatchcase(topic, pattern))


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR) or None


def exposition() -> tuple[bytes, str]:
    """The text a scrape gets: every process's values when several share a directory, else this process's."""
    directory = multiprocess_dir()
    if directory is None:
        return generate_latest(REGISTRY), CONTENT_TYPE_PLAIN_0_0_4
    registry = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4
