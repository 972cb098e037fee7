"""The reading half of a stream: where it stands in each partition, and the records to send next.

Reads come from the process's cache window of each partition; what the window no longer holds (the stream
starts before it, or eviction overtook a slow client) is the reader's `Replay`, read through a `History`, a
short-lived `HistoricalReader` that hands over to the window offset by offset, with no gap and no duplicate.
Records become bytes through the stream's `Subscription`. Nothing here writes to a client: that is the pump's
half (streams/stream/pump.py).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping

from config.kafka_settings import KafkaSettings
from streams.events.subscription import Position, Subscription, shared_offsets
from streams.hub.cache import Cache
from streams.hub.shared_reads import Read, SharedReads
from streams.hub.topic_state import TopicState
from streams.kafka.client import HistoricalReader, Record
from streams.kafka.consumer_host import ConsumerLost
from streams.telemetry.delivery_log import DeliverySink

# A reader's cursors and its subscription's standpoint (`StreamReader.standpoint`).
ReaderStandpoint = tuple[dict[int, int], Position]

HISTORY_POLL_S = 0.05
CHUNK_BYTES = 256 * 1024  # at most this much per write, so no connection's buffer holds more


class StreamReader:
    """Where one stream stands in each partition of its topic (its cursors, which only it moves), and its reads.

    The cursors dict is replaced, never changed in place: a stream that takes another's position after a shared
    write (`take_position`, every follower of a fan-out) holds the same dict, at no cost per stream, and so do
    streams that begin in the same place (`shared_offsets`) until they read something."""

    # One per open stream: no dict of its own.
    __slots__ = ("cache", "cursors", "replay", "state", "subscription")

    def __init__(
        self, cache: Cache, kafka: KafkaSettings, state: TopicState, subscription: Subscription, starts: dict[int, int]
    ) -> None:
        self.cache, self.state, self.subscription = cache, state, subscription
        self.cursors = shared_offsets(starts)  # next offset to read, per partition
        self.replay = Replay(kafka, cache, state.name)  # reads what the window no longer holds

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
        return self.replay.history is not None or self.pending()

    def lag_bytes(self) -> int:
        """Bytes the window holds past this stream's position: how far behind its client is."""
        total = 0
        for partition, cursor in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            if window is not None:
                total += window.lag_bytes(max(cursor, window.start))
        return total

    def window_ends(self) -> dict[int, int]:
        """Per partition, the offset past what the window holds now (or the stream's own position, without a
        window): where the stream stands once it has read everything pending."""
        ends = {}
        for partition, cursor in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            ends[partition] = cursor if window is None else max(cursor, window.next_offset)
        return ends

    def grow(self, starts: Mapping[int, int]) -> bool:
        """Read the partitions of `starts` not read yet, each from its start (the topic grew); the others are
        left as they are. Returns whether there were any."""
        added = {p: offset for p, offset in starts.items() if p not in self.cursors}
        if added:
            self.cursors = {**self.cursors, **added}
            self.subscription.grow(added)
        return bool(added)

    def standpoint(self) -> ReaderStandpoint:
        """Where it stands now, for streams that take this position (`take_position`): shared, not copied."""
        return (self.cursors, self.subscription.standpoint())

    def take_position(self, standpoint: ReaderStandpoint, delivered: int) -> None:
        """Stand where another stream, in the same position before its read, stood after it (its `standpoint`),
        having read `delivered` events."""
        self.cursors = standpoint[0]  # never changed in place: shared
        self.subscription.adopt(standpoint[1], delivered)

    def shared_key(self) -> tuple[object, ...] | None:
        """What a read from here depends on besides the route (streams/hub/shared_reads.py), or None when it depends on
        more: the history is being read, the subscription holds records back, or it sends deltas (a kept read
        would have to keep the state it was read from too)."""
        if self.replay.history is not None or not self.subscription.settled or self.subscription.sent() is not None:
            return None
        return (self.subscription.options, tuple(self.cursors.items()), tuple(self.subscription.progress.items()))

    def read_shared(self, reads: SharedReads, label: str, now: float, log: DeliverySink | None, *, live: bool) -> bytes:
        """`read_cache`, taken from a stream of the topic that read from the same position a moment ago, if one
        did; else read, and kept for those that come next. What is taken is counted in `log` here (as live or
        catch-up, as `live` says this stream stands); what is read, by the caller, as any read."""
        position = self.shared_key()
        if position is None:
            return self.read_cache()
        key = (label, log is None, *position)  # a read by a stream that logs nothing has no batch to count
        read = reads.get(key, now)
        if read is not None:
            self.cursors = dict(read.cursors)
            self.subscription.take(read.position, read.delivered)
            if log is not None and read.log is log:
                reads.taken(read, live=live)
            elif log is not None:
                log.delivered(label, self.topic, read.batch, 1, live=live)
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
        moved: dict[int, int] = {}  # the cursors that move: the dict itself may be shared, and is replaced
        for partition, start in self.cursors.items():
            window = self.cache.log(self.topic, partition)
            cursor = start
            if window is not None and conflate and start < window.start:
                # Conflating skips what the window no longer holds: a key updated only before it is not resent.
                cursor = moved[partition] = window.start
            if window is None or cursor < window.start:
                continue
            got = window.read(cursor, len(window)) if conflate else _within_budget(window.read(cursor), budget)
            if got:
                records.extend(got)
                budget -= sum(record.size for record in got)
                moved[partition] = got[-1].offset + 1
            elif partition in self.state.at_end:
                eof.append(partition)
        if moved:
            self.cursors = {**self.cursors, **moved}
        return self.subscription.feed(records, eof, conflate=conflate) if records or eof else b""

    async def read_history(self) -> bytes:
        """Records older than the cache window, from a short-lived reader that hands over to the window."""
        records = await self.replay.take(self.cursors)
        if records is None:
            return b""
        # The cursors as they are now, not as the take found them: the topic may have grown while it waited.
        self.cursors = self.replay.past(self.cursors, records)
        return self.subscription.feed(records) if records else b""

    async def close_history(self) -> None:
        """Close the historical reader, if any."""
        await self.replay.close()


class Replay:
    """A stream's reads of what the cache windows no longer hold (its replayed events): a `History` while a
    partition stands behind its window, a new one when eviction puts another partition behind, none once every
    partition is back in its window. It reads the stream's cursors and says where they move; the stream's
    reader moves them."""

    # One per open stream: no dict of its own.
    __slots__ = ("cache", "history", "kafka", "taken", "topic")

    def __init__(self, kafka: KafkaSettings, cache: Cache, topic: str) -> None:
        self.kafka, self.cache, self.topic = kafka, cache, topic
        self.history: History | None = None
        # What the last take read through, and the partitions it read from where each stood, until `past`: that
        # history, even if closed meanwhile (the stream ended), says where they move.
        self.taken: tuple[History, dict[int, int]] | None = None

    async def take(self, cursors: dict[int, int]) -> list[Record] | None:
        """The next records from before the windows, from `cursors` on; None when there was nothing to read (no
        partition is behind its window, or the reader's process died: the next take starts a new one from the
        cursors then, so nothing is lost or repeated)."""
        behind = {}
        for partition, cursor in cursors.items():
            window = self.cache.log(self.topic, partition)
            if window is not None and cursor < window.start:
                behind[partition] = cursor
        if not behind:
            await self.close()
            return None
        if self.history is not None and not behind.keys() <= self.history.partitions:
            # Eviction put another partition behind the window: read it too, from where each one stands.
            await self.close()
        try:
            if self.history is None:
                self.history = History(self.kafka, self.cache, self.topic, behind)
                await self.history.start(behind)
            history = self.history
            records = await history.take(cursors, behind)
        except ConsumerLost:
            # Its process died (a crash inside librdkafka, decision 0008): a deleted topic's stream is ended by
            # the hub.
            await self.close()
            await asyncio.sleep(HISTORY_POLL_S)
            return None
        self.taken = (history, behind)
        return records

    def past(self, cursors: dict[int, int], records: list[Record]) -> dict[int, int]:
        """`cursors` moved past `records`, the last take's, and past what lies before the windows and holds
        nothing to deliver (`History.handed_over`): a new dict, since cursors are never changed in place."""
        taken, self.taken = self.taken, None
        moved = dict(cursors)
        for record in records:
            moved[record.partition] = record.offset + 1
        if taken is not None:  # always, right after a take that read
            history, behind = taken
            moved.update(history.handed_over(moved, behind))
        return moved

    async def close(self) -> None:
        """Close the historical reader, if any; it is let go first, so a cancelled close is never repeated."""
        history, self.history = self.history, None
        if history is not None:
            await history.close()


class History:
    """One read of what the cache window no longer holds, until it hands over to the window: a short-lived
    `HistoricalReader` of the partitions that were behind the window when the read began, the records it fetched
    and the stream has not taken yet, and where it found Kafka's end of each partition. The stream's cursors,
    which say where each partition stands, stay the stream's: this only reads them."""

    def __init__(self, kafka: KafkaSettings, cache: Cache, topic: str, behind: dict[int, int]) -> None:
        self.cache, self.topic = cache, topic
        self.reader = HistoricalReader(kafka, topic)
        self.partitions = set(behind)
        self.backlog: list[Record] = []  # records fetched, not taken yet
        self.eof: dict[int, int] = {}  # Kafka's end, where the reader found it, per partition

    async def start(self, behind: dict[int, int]) -> None:
        await self.reader.start(behind)

    async def take(self, cursors: dict[int, int], behind: dict[int, int]) -> list[Record]:
        """The next records of the partitions `behind`, from their `cursors` on, within one chunk's budget."""
        if not self.backlog:
            batch = await self.reader.poll(HISTORY_POLL_S)
            self.backlog = batch.records
            self.eof.update(batch.eof)
        records = _within_budget(self.backlog, CHUNK_BYTES)
        del self.backlog[: len(records)]
        return [r for r in records if r.partition in behind and r.offset >= cursors[r.partition]]

    def handed_over(self, cursors: dict[int, int], behind: dict[int, int]) -> dict[int, int]:
        """Where the partitions `behind` stand once handed over to their windows: those the reader has read to
        Kafka's end, with every record it read of them taken (each one once).

        The last offsets before the window may hold nothing to deliver (control markers of transactions, aborted
        or compacted records): the cursor then never reaches the window's start from a record. Once the reader
        found Kafka's end and every record it read before is taken, nothing deliverable lies before that end, so
        the cursor moves up to it, or to the window's start if that is nearer (the window holds the rest).
        """
        moved = {}
        for partition in self.eof.keys() & behind.keys():
            if any(record.partition == partition for record in self.backlog):
                continue
            end = self.eof.pop(partition)
            window = self.cache.log(self.topic, partition)
            if window is not None:
                moved[partition] = max(cursors[partition], min(end, window.start))
        return moved

    async def close(self) -> None:
        await self.reader.close()


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
