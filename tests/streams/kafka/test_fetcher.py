"""The fetcher's bookkeeping against the real broker: what it believes of each partition is what the consumer
does, on every path (assign, pause, resume, unassign, assign again)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings

from streams.kafka.client import Record
from streams.kafka.fetcher import Fetch, FetchedBatch, Fetcher
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.support.inprocess import LoopThread


class Received:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.eof: set[tuple[str, int]] = set()

    def __call__(self, batch: FetchedBatch) -> None:
        for records in batch.records.values():
            self.records += records
        self.eof |= batch.eof

    def offsets(self) -> list[int]:
        return [record.offset for record in self.records]


@pytest.fixture
def fetcher(loop_thread: LoopThread) -> Iterator[tuple[Fetcher, Received, Callable[..., None]]]:
    received = Received()
    fetcher = Fetcher(settings.KAFKA, loop_thread.loop, received)
    fetcher.start()

    def on_loop(method: Callable[..., None], *args: object) -> None:
        async def call() -> None:
            method(*args)

        loop_thread.run(call())

    yield fetcher, received, on_loop
    fetcher.stop()


def test_a_partition_paused_unassigned_and_assigned_again_is_fetched(
    fetcher: tuple[Fetcher, Received, Callable[..., None]], new_topic: Callable[..., str], produce: Produce
) -> None:
    """librdkafka keeps a pause across unassign and assign: before the fix the second assignment fetched nothing."""
    instance, received, on_loop = fetcher
    topic = new_topic()
    for index in range(3):
        produce(topic, b"%d" % index)
    on_loop(instance.assign, topic, 0, 0)
    wait_until(lambda: received.offsets() == [0, 1, 2])
    on_loop(instance.pause, topic, [0])
    assert instance.partitions[(topic, 0)].state is Fetch.PAUSED
    assert instance.fetch_streams == 0
    on_loop(instance.unassign, topic, [0])
    assert instance.partitions == {}

    received.records.clear()
    on_loop(instance.assign, topic, 0, 0)
    assert instance.fetch_streams == 1
    wait_until(lambda: received.offsets() == [0, 1, 2], timeout=5)
    produce(topic, b"3")
    wait_until(lambda: received.offsets() == [0, 1, 2, 3], timeout=5)


def test_pause_then_resume_fetches_what_arrived_meanwhile(
    fetcher: tuple[Fetcher, Received, Callable[..., None]], new_topic: Callable[..., str], produce: Produce
) -> None:
    instance, received, on_loop = fetcher
    topic = new_topic()
    on_loop(instance.assign, topic, 0, 0)
    wait_until(lambda: (topic, 0) in received.eof)
    on_loop(instance.pause, topic, [0])
    produce(topic, b"while paused")
    on_loop(instance.resume, topic, [0])
    assert instance.partitions[(topic, 0)].state is Fetch.FETCHING
    wait_until(lambda: received.offsets() == [0], timeout=5)


def test_a_resume_after_records_were_fetched_goes_on_from_the_next_one_without_repeat_or_loss(
    fetcher: tuple[Fetcher, Received, Callable[..., None]], new_topic: Callable[..., str], produce: Produce
) -> None:
    """A resume seeks the consumer to the position its pause kept (it wakes librdkafka's fetcher at once): the
    records from before the pause come once, those produced during it follow, in order."""
    instance, received, on_loop = fetcher
    topic = new_topic()
    for index in range(3):
        produce(topic, b"%d" % index)
    on_loop(instance.assign, topic, 0, 0)
    wait_until(lambda: received.offsets() == [0, 1, 2])
    for round_ in range(3):
        on_loop(instance.pause, topic, [0])
        for index in range(2):
            produce(topic, b"paused %d %d" % (round_, index))
        on_loop(instance.resume, topic, [0])
        wait_until(functools.partial(at_least, received, 5 + 2 * round_), timeout=5)
    produce(topic, b"after")
    wait_until(lambda: len(received.offsets()) >= 10, timeout=5)
    assert received.offsets() == list(range(10))


def at_least(received: Received, count: int) -> bool:
    return len(received.offsets()) >= count


def test_assigning_an_assigned_partition_moves_it(
    fetcher: tuple[Fetcher, Received, Callable[..., None]], new_topic: Callable[..., str], produce: Produce
) -> None:
    instance, received, on_loop = fetcher
    topic = new_topic()
    for index in range(3):
        produce(topic, b"%d" % index)
    on_loop(instance.assign, topic, 0, 2)
    wait_until(lambda: received.offsets() == [2])
    on_loop(instance.pause, topic, [0])
    on_loop(instance.assign, topic, 0, 0)  # paused, then moved: fetching again, from the start
    wait_until(lambda: received.offsets() == [2, 0, 1, 2], timeout=5)


def test_a_batch_polled_under_an_ended_assignment_is_not_delivered(loop_thread: LoopThread) -> None:
    """A batch on its way to the loop while its partition was unassigned and assigned again elsewhere would
    put records the new window does not expect into the cache (and move its end past what it holds)."""
    received = Received()
    instance = Fetcher(settings.KAFKA, loop_thread.loop, received)  # not started: the test plays its thread
    record = Record(partition=0, offset=7, key=None, value=b"old", headers=())

    async def scenario() -> None:
        instance.assign("t", 0, 5)
        old = instance.partitions[("t", 0)].epoch
        instance.assign("t", 0, 0)  # moved while a batch polled under `old` was in flight
        for epoch in (old, instance.partitions[("t", 0)].epoch):
            instance.deliver(instance.plain, {("t", 0): [record]}, {("t", 0)}, {("t", 0): epoch})

    loop_thread.run(scenario())
    assert received.offsets() == [7]  # once: the batch of the current assignment
