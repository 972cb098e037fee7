"""The reading half of a stream: where it stands in each partition, and the records to send next.

Reads come from the process's cache window of each partition; what the window no longer holds (the stream
starts before it, or eviction overtook a slow client) comes from a short-lived `HistoricalReader`, which hands
over to the window offset by offset, with no gap and no duplicate. Records become bytes through the stream's
`Subscription`. Nothing here writes to a client: that is the pump's half (streams/stream/pump.py).
"""

from __future__ import annotations

import asyncio
import enum

from config.kafka_settings import KafkaSettings
from streams.events.subscription import Subscription
from streams.hub.cache import Cache
from streams.hub.shared_reads import Read, SharedReads
from streams.hub.topic_state import TopicState
from streams.kafka.client import HistoricalReader, Record
from streams.kafka.consumer_host import ConsumerLost
from streams.telemetry.delivery_log import DeliverySink

HISTORY_POLL_S = 0.05
CHUNK_BYTES = 256 * 1024  # at most this much per write, so no connection's buffer holds more


class StreamReader:
    def __init__(
        self, cache: Cache, kafka: KafkaSettings, state: TopicState, subscription: Subscription, starts: dict[int, int]
    ) -> None:
        self.cache, self.kafka, self.state, self.subscription = cache, kafka, state, subscription
        self.cursors = dict(starts)  # next offset to read, per partition
        self.history: HistoricalReader | None = None
        self.history_partitions: set[int] = set()
        self.backlog: list[Record] = []  # records from the historical reader not sent yet
        self.history_eof: dict[int, int] = {}  # Kafka's end, where the historical reader found it, per partition

    @property
    def topic(self) -> str:
        return self.state.name

    def pending(self) -> bool:
        """Records are ready in the window, or a partition fell behind it (eviction overtook a slow reader, which
        must then read that part from Kafka)."""
        for partition, cursor in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            if window is None:
                continue
            if cursor < window.start or (cursor < window.next_offset and window.read(cursor, 1)):
                return True
        return False

    def busy(self) -> bool:
        """More to read right away: the history is still being read, or the window holds more."""
        return self.history is not None or bool(self.backlog) or self.pending()

    def lag_bytes(self) -> int:
        """Bytes the window holds past this stream's position: how far behind its client is."""
        total = 0
        for partition, cursor in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            if window is not None:
                total += window.lag_bytes(max(cursor, window.start))
        return total

    def take_position(self, other: StreamReader, delivered: int) -> None:
        """Stand where `other`, in the same position a moment ago, stands after its read."""
        self.cursors = dict(other.cursors)
        self.subscription.adopt(other.subscription, delivered)

    def shared_key(self) -> tuple[object, ...] | None:
        """What a read from here depends on besides the route (streams/hub/shared_reads.py), or None when it depends on
        more: the history is being read, or the subscription holds records back."""
        if self.history is not None or self.backlog or not self.subscription.settled:
            return None
        return (self.subscription.options, tuple(self.cursors.items()), tuple(self.subscription.progress.items()))

    def read_shared(self, reads: SharedReads, label: str, now: float, log: DeliverySink | None) -> bytes:
        """`read_cache`, taken from a stream of the topic that read from the same position a moment ago, if one
        did; else read, and kept for those that come next. What is taken is counted in `log` here; what is read,
        by the caller, as any read."""
        position = self.shared_key()
        if position is None:
            return self.read_cache()
        key = (label, log is None, *position)  # a read by a stream that logs nothing has no batch to count
        read = reads.get(key, now)
        if read is not None:
            self.cursors = dict(read.cursors)
            self.subscription.take(read.position, read.delivered)
            if log is not None and read.log is log:
                reads.taken(read)
            elif log is not None:
                log.delivered(label, self.topic, read.batch, 1)
            return read.data
        subscription = self.subscription
        before, logged = subscription.delivered, subscription.batch_length()
        data = self.read_cache()
        if data:
            batch = tuple(subscription.batch[logged:]) if subscription.batch is not None else ()
            delivered = subscription.delivered - before
            position_after = subscription.position()
            reads.put(
                key, Read(now, label, self.topic, data, dict(self.cursors), position_after, delivered, batch, log)
            )
        return data

    def read_cache(self, *, conflate: bool = False) -> bytes:
        """The next chunk from the windows, as SSE bytes. `conflate`: everything the windows hold, only the
        latest value per key, skipping what the windows no longer hold."""
        records = []
        eof = []
        budget = CHUNK_BYTES
        for partition in self.cursors:
            window = self.cache.log(self.topic, partition)
            if window is not None and conflate and self.cursors[partition] < window.start:
                # Conflating skips what the window no longer holds: a key updated only before it is not resent.
                self.cursors[partition] = window.start
            cursor = self.cursors[partition]
            if window is None or cursor < window.start:
                continue
            got = window.read(cursor, len(window)) if conflate else _within_budget(window.read(cursor), budget)
            if got:
                records.extend(got)
                budget -= sum(record.size for record in got)
                self.cursors[partition] = got[-1].offset + 1
            elif partition in self.state.at_end:
                eof.append(partition)
        return self.subscription.feed(records, eof, conflate=conflate) if records or eof else b""

    async def read_history(self) -> bytes:
        """Records older than the cache window, from a short-lived reader that hands over to the window."""
        behind = {}
        for partition, cursor in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            if window is not None and cursor < window.start:
                behind[partition] = cursor
        if not behind:
            await self.close_history()
            return b""
        if self.history is not None and not behind.keys() <= self.history_partitions:
            # Eviction put another partition behind the window: read it too, from where each one stands.
            await self.close_history()
        try:
            if self.history is None:
                self.history = HistoricalReader(self.kafka, self.topic)
                self.history_partitions = set(behind)
                await self.history.start(behind)
            if not self.backlog:
                batch = await self.history.poll(HISTORY_POLL_S)
                self.backlog = batch.records
                self.history_eof.update(batch.eof)
        except ConsumerLost:
            # Its process died (a crash inside librdkafka, decision 0008): the next read starts a new reader from
            # the cursors, so nothing is lost or repeated; a deleted topic's stream is ended by the hub.
            await self.close_history()
            await asyncio.sleep(HISTORY_POLL_S)
            return b""
        records = _within_budget(self.backlog, CHUNK_BYTES)
        del self.backlog[: len(records)]
        records = [r for r in records if r.partition in behind and r.offset >= self.cursors[r.partition]]
        for record in records:
            self.cursors[record.partition] = record.offset + 1
        self._past_the_end(behind)
        return self.subscription.feed(records) if records else b""

    def _past_the_end(self, behind: dict[int, int]) -> None:
        """Hand a partition over to its window once the historical reader has read all Kafka holds of it.

        The last offsets before the window may hold nothing to deliver (control markers of transactions, aborted
        or compacted records): the cursor then never reaches the window's start from a record. Once the reader
        found Kafka's end and every record it read before is sent, nothing deliverable lies before that end, so
        the cursor moves up to it, or to the window's start if that is nearer (the window holds the rest).
        """
        for partition in self.history_eof.keys() & behind.keys():
            if any(record.partition == partition for record in self.backlog):
                continue
            end = self.history_eof.pop(partition)
            window = self.cache.log(self.topic, partition)
            if window is not None:
                self.cursors[partition] = max(self.cursors[partition], min(end, window.start))

    async def close_history(self) -> None:
        """Close the historical reader, if any; it is let go first, so a cancelled close is never repeated."""
        history, self.history, self.backlog = self.history, None, []
        self.history_eof = {}
        if history is not None:
            await history.close()


class Source(enum.Enum):
    """Where a new stream's first records come from."""

    CACHE = "cache"  # every partition's window holds its start
    FETCH = "fetch"  # a partition not in the cache yet: the fetcher starts there
    HISTORY = "history"  # a start before its window: a historical reader (limited per process)


def start_source(cache: Cache, topic: str, starts: dict[int, int]) -> Source:
    windows = {partition: cache.log(topic, partition) for partition in starts}
    if any(window is not None and starts[p] < window.start for p, window in windows.items()):
        return Source.HISTORY
    return Source.CACHE if all(window is not None for window in windows.values()) else Source.FETCH


def _within_budget(records: list[Record], budget: int) -> list[Record]:
    """The first records whose sizes fit in `budget` (at least one, so a big record still goes out), as a new
    list: callers remove what they took from `records`."""
    total = 0
    for index, record in enumerate(records):
        total += record.size
        if total > budget:
            return records[: max(index, 1)] if budget > 0 else []
    return records[:]
