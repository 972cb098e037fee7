"""The per-process cache: for each topic-partition, a window of recent records bounded in bytes.

The fetcher appends what it reads; every subscription of the process reads from here through its own cursor,
so a record is fetched and encoded once however many clients receive it. The window of a partition is
`[start, next_offset)`: every deliverable record in that range is held (gaps are offsets Kafka gives no
record for: transaction markers, compacted-away records). Eviction drops the oldest records of the biggest
partitions first, so the total stays under the byte bound.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from streams.kafka.client import Record


class PartitionLog:
    """An append-only window of one partition's records, by offset."""

    __slots__ = ("_cum", "_offsets", "appended", "next_offset", "records", "start")

    def __init__(self, start: int) -> None:
        self.start = start  # the first offset the window covers
        self.next_offset = start  # the next offset the fetcher will bring
        self.records: list[Record] = []
        self._offsets: list[int] = []
        self._cum: list[int] = []  # bytes appended before each record
        self.appended = 0  # bytes ever appended

    def __len__(self) -> int:
        return len(self.records)

    @property
    def bytes(self) -> int:
        return self.appended - self._cum[0] if self._cum else 0

    def append(self, records: Iterable[Record]) -> int:
        """Add records in offset order; returns the bytes added (records already held are skipped)."""
        added = 0
        for record in records:
            if record.offset < self.next_offset:
                continue
            self._cum.append(self.appended)
            self.records.append(record)
            self._offsets.append(record.offset)
            self.appended += record.size
            added += record.size
            self.next_offset = record.offset + 1
        return added

    def read(self, offset: int, limit: int = 1000) -> list[Record]:
        """Held records from `offset` on (at most `limit`); the caller checks `offset >= start` first."""
        index = bisect_left(self._offsets, offset)
        return self.records[index : index + limit]

    def lag_bytes(self, offset: int) -> int:
        """Bytes of held records at or after `offset`: how far behind a reader at `offset` is."""
        index = bisect_left(self._offsets, offset)
        return self.appended - self._cum[index] if index < len(self._cum) else 0

    def evict(self, target: int) -> int:
        """Drop the oldest records until about `target` bytes are freed; returns the bytes freed."""
        count = freed = 0
        while count < len(self.records) and freed < target:
            freed += self.records[count].size
            count += 1
        if count:
            self.start = self.records[count - 1].offset + 1 if count < len(self.records) else self.next_offset
            # One shift of the lists per eviction round, which also lets go of the records at once.
            del self.records[:count], self._offsets[:count], self._cum[:count]
        return freed


class Cache:
    """Every partition log of the process, within one byte bound."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.logs: dict[tuple[str, int], PartitionLog] = {}

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def open(self, topic: str, partition: int, start: int) -> PartitionLog:
        log = self.logs.get((topic, partition))
        if log is None:
            log = self.logs[(topic, partition)] = PartitionLog(start)
        return log

    def append(self, topic: str, partition: int, records: list[Record]) -> None:
        log = self.logs.get((topic, partition))
        if log is None:
            return  # the topic was dropped while this batch was on its way
        self.bytes += log.append(records)
        if self.bytes > self.max_bytes:
            self._evict(self.bytes - self.max_bytes * 9 // 10)

    def _evict(self, target: int) -> None:
        while target > 0 and self.logs:
            biggest = max(self.logs.values(), key=lambda log: log.bytes)
            if not len(biggest):
                return
            freed = biggest.evict(max(target, biggest.bytes // 10))
            self.bytes -= freed
            target -= freed

    def drop(self, topic: str) -> None:
        for key in [key for key in self.logs if key[0] == topic]:
            self.bytes -= self.logs.pop(key).bytes
