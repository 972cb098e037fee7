"""The per-process cache: windows by offset, lag in bytes, eviction within the byte bound."""

from __future__ import annotations

from streams.hub.cache import Cache, PartitionLog
from streams.kafka.client import Record


def rec(offset: int, size: int = 100, partition: int = 0) -> Record:
    return Record(partition, offset, None, b"x" * size, ())


def test_a_window_reads_by_offset_across_gaps() -> None:
    log = PartitionLog(start=10)
    log.append([rec(10), rec(11), rec(13)])  # 12: a transaction marker, no record
    assert [r.offset for r in log.read(12)] == [13]
    assert [r.offset for r in log.read(10, limit=2)] == [10, 11]
    assert log.next_offset == 14
    log.append([rec(13), rec(14)])  # what is already held is skipped
    assert [r.offset for r in log.read(13)] == [13, 14]


def test_lag_counts_the_bytes_from_an_offset_on() -> None:
    log = PartitionLog(start=0)
    log.append([rec(0), rec(1), rec(2)])
    size = rec(0).size
    assert log.lag_bytes(0) == log.bytes == 3 * size
    assert log.lag_bytes(2) == size
    assert log.lag_bytes(3) == 0


def test_eviction_drops_the_oldest_and_moves_the_window_start() -> None:
    log = PartitionLog(start=0)
    log.append([rec(i) for i in range(10)])
    freed = log.evict(3 * rec(0).size)
    assert freed == 3 * rec(0).size
    assert log.start == 3
    assert [r.offset for r in log.read(0)][:1] == [3]
    log.evict(10**9)
    assert (len(log), log.start, log.bytes) == (0, 10, 0)


def test_the_cache_stays_within_its_bound_taking_from_the_biggest_partition() -> None:
    size = rec(0).size
    cache = Cache(max_bytes=20 * size)
    for partition in (0, 1):
        cache.open("t", partition, 0)
    cache.append("t", 0, [rec(i, partition=0) for i in range(5)])
    cache.append("t", 1, [rec(i, partition=1) for i in range(30)])
    assert cache.bytes <= 20 * size
    small, big = cache.log("t", 0), cache.log("t", 1)
    assert small is not None
    assert big is not None
    assert len(small) == 5  # the small partition kept everything
    assert big.start > 0
    cache.drop("t")
    assert (cache.bytes, cache.log("t", 1)) == (0, None)


def test_records_for_a_dropped_topic_are_ignored() -> None:
    cache = Cache(max_bytes=10**6)
    cache.append("gone", 0, [rec(0)])
    assert cache.bytes == 0
