"""The fetcher: one thread per process owning one Kafka consumer for every topic-partition any stream reads.

No consumer group: partitions are added with `incremental_assign()` at explicit offsets, so each is fetched
once however many subscribers read it. Batches go to the event loop with `call_soon_threadsafe`. Partitions
nobody reads are paused, and dropped after a while (the hub decides). librdkafka reconnects by itself after
a broker loss and keeps each partition's fetch position, so nothing is skipped or fetched twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from config.kafka import KafkaSettings
from streams.kafka import Record, record_of

log = logging.getLogger(__name__)

BatchHandler = Callable[["FetchedBatch"], None]
BATCH_BYTES = 4 * 1024 * 1024  # one batch handed to the loop holds about this much at most
MAX_BATCHES_IN_FLIGHT = 2
HIGHS_EVERY_S = 1.0  # how often the thread notes Kafka's end of each partition, for the fetch-lag metric

Key = tuple[str, int]  # (topic, partition)


class Fetch(enum.Enum):
    """Where one assigned partition stands. Transitions, each made on the loop and then in the consumer:

        (unassigned) --assign(offset)--> FETCHING --pause--> PAUSED --resume--> FETCHING
        FETCHING or PAUSED --unassign--> (unassigned)
        FETCHING or PAUSED --assign(offset)--> unassign, then assign: FETCHING from `offset`

    librdkafka keeps an application pause on its partition object across `incremental_unassign()` and
    `incremental_assign()`: a partition paused, unassigned and assigned again stays paused and fetches
    nothing. So unassigning resumes a paused partition in the consumer first, and an unassigned partition
    carries no flag there, as here.
    """

    FETCHING = "fetching"
    PAUSED = "paused"


@dataclass
class Assignment:
    state: Fetch
    epoch: int  # which assignment of the partition this is: records polled under an older one are dropped


@dataclass
class FetchedBatch:
    records: dict[Key, list[Record]] = field(default_factory=dict)
    eof: set[Key] = field(default_factory=set)
    epochs: dict[Key, int] = field(default_factory=dict)  # the assignment each partition was polled under


class Fetcher:
    """The loop's side of the fetch: which partitions are assigned and in what state (`Fetch`). Each change is
    recorded here, then carried out by the consumer's thread (`ConsumerThread`) in the same order."""

    def __init__(
        self, kafka: KafkaSettings, loop: asyncio.AbstractEventLoop, on_batch: BatchHandler, *, batch_size: int = 500
    ) -> None:
        self._on_batch = on_batch
        self.thread = ConsumerThread(kafka, loop, self._deliver, batch_size=batch_size)
        self._epoch = 0
        self.partitions: dict[Key, Assignment] = {}  # read and changed on the loop thread only

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()

    def assign(self, topic: str, partition: int, offset: int) -> None:
        """Fetch the partition from `offset` (a partition assigned already is moved there)."""
        key = (topic, partition)
        if key in self.partitions:
            self.unassign(topic, [partition])
        self._epoch += 1
        epoch = self._epoch
        self.partitions[key] = Assignment(Fetch.FETCHING, epoch)
        self.thread.command(lambda thread, consumer: thread.assign(consumer, key, offset, epoch))

    def unassign(self, topic: str, partitions: Iterable[int]) -> None:
        keys = {(topic, p) for p in partitions} & self.partitions.keys()
        if not keys:
            return
        paused = {key for key in keys if self.partitions[key].state is Fetch.PAUSED}
        for key in keys:
            del self.partitions[key]
        self.thread.command(lambda thread, consumer: thread.unassign(consumer, topic, keys, paused))

    def pause(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.FETCHING, Fetch.PAUSED, Consumer.pause)

    def resume(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.PAUSED, Fetch.FETCHING, Consumer.resume)

    def _move(
        self,
        topic: str,
        partitions: Iterable[int],
        before: Fetch,
        after: Fetch,
        call: Callable[[Consumer, list[TopicPartition]], None],
    ) -> None:
        """Partitions in state `before` go to `after`, here and then in the consumer (`call`)."""
        keys = {(topic, p) for p in partitions if (found := self.partitions.get((topic, p))) and found.state is before}
        if keys:
            for key in keys:
                self.partitions[key].state = after
            self.thread.command(lambda _, consumer: call(consumer, _partitions(keys)))

    @property
    def fetch_streams(self) -> int:
        """Partitions being fetched now: one per topic-partition, however many subscribers."""
        return sum(1 for found in self.partitions.values() if found.state is Fetch.FETCHING)

    def _deliver(self, batch: FetchedBatch) -> None:
        """On the loop: hand the batch over, then let the thread post the next one.

        What was polled under an assignment that has ended since (the partition was unassigned, or assigned
        again elsewhere, while the batch was on its way) is dropped: it would put records the new assignment
        does not expect into the cache."""
        try:
            for key, epoch in batch.epochs.items():
                found = self.partitions.get(key)
                if found is None or found.epoch != epoch:
                    batch.records.pop(key, None)
                    batch.eof.discard(key)
            if batch.records or batch.eof:
                self._on_batch(batch)
        finally:
            self.thread.taken()


Command = Callable[["ConsumerThread", Consumer], None]


class ConsumerThread:
    """The thread that owns the one consumer: it applies the loop's commands in order, polls, and hands batches
    to the loop with `call_soon_threadsafe`, at most MAX_BATCHES_IN_FLIGHT at a time (a slow loop slows the
    fetch; librdkafka's own prefetch is bounded by queued.max.messages.kbytes)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[FetchedBatch], None],
        *,
        batch_size: int,
    ) -> None:
        self._kafka, self._loop, self._deliver, self._batch_size = kafka, loop, deliver, batch_size
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._running = threading.Event()
        self.in_flight = threading.BoundedSemaphore(MAX_BATCHES_IN_FLIGHT)
        self._thread = threading.Thread(target=self._run, name="kafka-fetcher", daemon=True)
        self._known: set[str] = set()  # topics in the consumer's metadata cache
        self._polling: dict[Key, int] = {}  # the epoch each partition is assigned under
        self.highs: dict[Key, int] = {}  # Kafka's end of each partition, as the last fetch response said
        self._highs_due = 0.0

    def start(self) -> None:
        self._running.set()
        self._thread.start()

    def stop(self) -> None:
        self._running.clear()
        self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        """The thread runs: a dead one fetches nothing for any stream of the process (readiness reports it)."""
        return self._thread.is_alive()

    def command(self, command: Command) -> None:
        """Run `command` on this thread, after every command given before it."""
        self.commands.put(command)

    def taken(self) -> None:
        """The loop took a batch: another may be posted."""
        self.in_flight.release()

    def assign(self, consumer: Consumer, key: Key, offset: int, epoch: int) -> None:
        topic, partition = key
        if topic not in self._known:
            # Without the topic in its metadata cache, the consumer waits for its next refresh (about a second)
            # before fetching a newly assigned partition; asking for it now makes the first fetch immediate.
            consumer.list_topics(topic, timeout=self._kafka.metadata_timeout_s)
            self._known.add(topic)
        self._polling[key] = epoch
        consumer.incremental_assign([TopicPartition(topic, partition, offset)])

    def unassign(self, consumer: Consumer, topic: str, keys: set[Key], paused: set[Key]) -> None:
        if paused:
            consumer.resume(_partitions(paused))  # see Fetch: the flag would outlive the assignment
        consumer.incremental_unassign(_partitions(keys))
        for key in keys:
            self._polling.pop(key, None)
        self._known.discard(topic)

    def _run(self) -> None:
        consumer = Consumer({**self._kafka.consumer_config(), "enable.partition.eof": True})
        try:
            while self._running.is_set():
                self._apply_commands(consumer)
                if not self._polling:
                    with contextlib.suppress(queue.Empty):
                        self._apply(consumer, self.commands.get(timeout=0.1))
                    continue
                while not self.in_flight.acquire(timeout=0.1):
                    if not self._running.is_set():
                        return
                batch = self._poll(consumer)
                self._note_highs(consumer)
                if batch.records or batch.eof:
                    self._loop.call_soon_threadsafe(self._deliver, batch)
                else:
                    self.in_flight.release()
        except Exception:
            log.exception("the fetcher thread failed")
            raise
        finally:
            consumer.close()

    def _apply_commands(self, consumer: Consumer) -> None:
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return
            self._apply(consumer, command)

    def _apply(self, consumer: Consumer, command: Command) -> None:
        try:
            command(self, consumer)
        except Exception:
            log.exception("fetcher command failed")

    def _note_highs(self, consumer: Consumer) -> None:
        """Kafka's end of each assigned partition, from what librdkafka keeps of the last fetch response (no broker
        round trip), at most every HIGHS_EVERY_S; the loop reads `highs` (one dict swap, no lock needed)."""
        now = time.monotonic()
        if now < self._highs_due:
            return
        self._highs_due = now + HIGHS_EVERY_S
        highs = {}
        for key in list(self._polling):
            with contextlib.suppress(KafkaException):
                _, high = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                if high >= 0:
                    highs[key] = high
        self.highs = highs

    def _poll(self, consumer: Consumer) -> FetchedBatch:
        batch = FetchedBatch()
        # poll() returns as soon as one message is ready; consume(n, 0) then drains what is already fetched.
        first = consumer.poll(0.05)
        if first is None:
            return batch
        messages, size = [first], len(first.value() or b"")
        while size < BATCH_BYTES and len(messages) < self._batch_size:
            more = consumer.consume(min(100, self._batch_size - len(messages)), 0)
            if not more:
                break
            messages += more
            size += sum(len(m.value() or b"") for m in more)
        for message in messages:
            error = message.error()
            key = (message.topic() or "", message.partition() or 0)
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                log.warning("kafka: %s", error.str())
                continue
            epoch = self._polling.get(key)
            if epoch is None:
                continue  # fetched before its partition was unassigned
            batch.epochs[key] = epoch
            if error is None:
                batch.records.setdefault(key, []).append(record_of(message))
            else:
                batch.eof.add(key)
        return batch


def _partitions(keys: Iterable[Key]) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for topic, partition in sorted(keys)]
