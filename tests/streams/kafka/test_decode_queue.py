"""The fetch process's records on their way through its decoder (streams/kafka/decode_queue.py): per partition, in
order; a partition waits at a record its registry cannot give the schema of, and blocks while too much of it
waits; its end is told once nothing of it waits."""

from __future__ import annotations

from streams.kafka import decode_queue
from streams.kafka.decode_queue import DecodeQueue
from streams.kafka.records import RecordTuple

A, B = ("t", 0), ("t", 1)


def record(partition: int, offset: int, value: bytes = b"v") -> RecordTuple:
    return (partition, offset, None, value, (), 0, False)


def decoded(found: RecordTuple) -> RecordTuple:
    return (*found[:3], b'"' + (found[3] or b"") + b'"', *found[4:])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_job_takes_every_partitions_records_in_order_and_gives_them_back_per_partition() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, 0), record(0, 1)])
    queue.add(B, 1, [record(1, 7)])
    job = queue.job(100, 1 << 20)
    assert job == [("t", record(0, 0)), ("t", record(0, 1)), ("t", record(1, 7))]
    queue.add(A, 1, [record(0, 2)])  # fetched while the job is out: queued behind it
    assert queue.job(100, 1 << 20) == []
    out, ends = queue.done([decoded(record(0, 0)), None, decoded(record(1, 7))])
    assert out == {A: [decoded(record(0, 0))], B: [decoded(record(1, 7))]}
    assert ends == []
    assert queue.job(100, 1 << 20) == [("t", record(0, 2))]


def test_a_partition_waits_at_the_record_whose_registry_cannot_be_reached_and_blocks_until_it_decodes() -> None:
    clock = Clock()
    queue = DecodeQueue(clock)
    queue.add(A, 1, [record(0, 0), record(0, 1), record(0, 2)])
    queue.job(100, 1 << 20)
    out, _ = queue.done([decoded(record(0, 0)), "registry down", False])
    assert out == {A: [decoded(record(0, 0))]}
    assert queue.waiting() == {A: "registry down"}
    assert queue.blocked() == {A}
    assert queue.eof(A) is False  # its end waits for its records
    assert queue.job(100, 1 << 20) == []  # not due yet
    clock.now += decode_queue.RETRY_S
    assert queue.job(100, 1 << 20) == [("t", record(0, 1)), ("t", record(0, 2))]
    out, ends = queue.done([decoded(record(0, 1)), decoded(record(0, 2))])
    assert out == {A: [decoded(record(0, 1)), decoded(record(0, 2))]}
    assert ends == [A]
    assert queue.blocked() == set()
    assert A not in queue


def test_records_not_tried_are_queued_again_at_once() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, 0), record(0, 1)])
    queue.job(100, 1 << 20)
    queue.done([decoded(record(0, 0)), False])
    assert queue.blocked() == set()
    assert queue.job(100, 1 << 20) == [("t", record(0, 1))]


def test_a_partition_with_too_much_waiting_to_be_decoded_blocks() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, offset, b"x" * 1024) for offset in range(decode_queue.BLOCK_BYTES // 1024 + 1)])
    assert queue.blocked() == {A}
    job = queue.job(10, 1 << 30)
    assert len(job) == 10
    queue.done([decoded(found) for _, found in job])
    assert queue.blocked() == set()


def test_results_of_an_older_assignment_are_dropped() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, 0)])
    queue.job(100, 1 << 20)
    queue.add(A, 2, [record(0, 5)])  # unassigned and assigned again at offset 5 meanwhile
    out, _ = queue.done([decoded(record(0, 0))])
    assert out == {}
    assert queue.job(100, 1 << 20) == [("t", record(0, 5))]


def test_a_job_keeps_within_its_bytes_after_its_first_partition() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, 0, b"x" * 600)])
    queue.add(B, 1, [record(1, 0, b"y" * 600)])
    assert [found[1][0] for found in queue.job(100, 1000)] == [0]  # B's would pass the bound: next job
    queue.done([None])
    assert [found[1][0] for found in queue.job(100, 1000)] == [1]


def test_a_repeated_fetch_of_a_paused_partition_is_not_queued_twice() -> None:
    queue = DecodeQueue()
    queue.add(A, 1, [record(0, 0), record(0, 1)])
    queue.add(A, 1, [record(0, 1), record(0, 2)])
    assert [found[1][1] for found in queue.job(100, 1 << 20)] == [0, 1, 2]


def test_records_decoded_at_once_go_out_and_from_the_first_that_waits_the_rest_are_queued() -> None:
    """The fetch process decodes a partition with nothing queued as its poll brought it (`now`): what waits for its
    registry, and what follows, waits in the queue as if a job had said so."""
    clock = Clock()
    queue = DecodeQueue(clock)
    found = [record(0, offset) for offset in range(5)]
    answers = [decoded(found[0]), None, decoded(found[2]), "registry down", False]
    assert queue.now(A, 1, found, answers) == [decoded(found[0]), decoded(found[2])]
    assert [queued[1] for queued in queue.pending[A].records] == [3, 4]
    assert queue.waiting() == {A: "registry down"}
    assert queue.blocked() == {A}
    assert queue.eof(A) is False
    assert queue.job(100, 1 << 20) == []  # not due yet
    clock.now += decode_queue.RETRY_S
    assert queue.job(100, 1 << 20) == [("t", found[3]), ("t", found[4])]
    assert queue.done([decoded(found[3]), decoded(found[4])]) == ({A: [decoded(found[3]), decoded(found[4])]}, [A])


def test_records_decoded_at_once_leave_nothing_queued_when_all_decode_or_are_skipped() -> None:
    queue = DecodeQueue()
    found = [record(0, 0), record(0, 1)]
    assert queue.now(A, 1, found, [None, decoded(found[1])]) == [decoded(found[1])]
    assert A not in queue
    assert queue.eof(A) is True
