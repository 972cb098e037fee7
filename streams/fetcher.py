"""The fetcher: one thread per process owning one Kafka consumer for every topic-partition any stream reads.

No consumer group: partitions are added with `incremental_assign()` at explicit offsets, so each is fetched
once however many subscribers read it. Batches go to the event loop with `call_soon_threadsafe`. Partitions
nobody reads are paused, and dropped after a while (the hub decides). librdkafka reconnects by itself after
a broker loss and keeps each partition's fetch position, so nothing is skipped or fetched twice.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from config.kafka import KafkaSettings
from streams.kafka import Record, record_of

log = logging.getLogger(__name__)

BatchHandler = Callable[["FetchedBatch"], None]
BATCH_BYTES = 4 * 1024 * 1024  # one batch handed to the loop holds about this much at most
MAX_BATCHES_IN_FLIGHT = 2


@dataclass
class FetchedBatch:
    records: dict[tuple[str, int], list[Record]] = field(default_factory=dict)
    eof: set[tuple[str, int]] = field(default_factory=set)


class Fetcher:
    """Owns the consumer and its thread; every other thread talks to it through commands."""

    def __init__(
        self, kafka: KafkaSettings, loop: asyncio.AbstractEventLoop, on_batch: BatchHandler, *, batch_size: int = 500
    ) -> None:
        self._kafka = kafka
        self._loop = loop
        self._on_batch = on_batch
        self._batch_size = batch_size
        self._commands: queue.SimpleQueue[Callable[[Consumer], None]] = queue.SimpleQueue()
        self._running = threading.Event()
        # Batches handed to the loop and not yet taken: the fetcher waits rather than queue without bound
        # when the loop falls behind (librdkafka's own prefetch is bounded by queued.max.messages.kbytes).
        self._in_flight = threading.BoundedSemaphore(MAX_BATCHES_IN_FLIGHT)
        self._thread = threading.Thread(target=self._run, name="kafka-fetcher", daemon=True)
        self._known: set[str] = set()  # topics in the consumer's metadata cache (fetcher thread only)
        self.assigned: set[tuple[str, int]] = set()  # read on the loop thread, changed only there
        self.paused: set[tuple[str, int]] = set()

    def start(self) -> None:
        self._running.set()
        self._thread.start()

    def stop(self) -> None:
        self._running.clear()
        self._thread.join(timeout=10)

    # Called on the event loop; the consumer work happens on the fetcher thread.
    def assign(self, topic: str, partition: int, offset: int) -> None:
        self.assigned.add((topic, partition))
        self.paused.discard((topic, partition))
        self._commands.put(lambda c: self._assign(c, topic, partition, offset))

    def _assign(self, consumer: Consumer, topic: str, partition: int, offset: int) -> None:
        if topic not in self._known:
            # Without the topic in its metadata cache, the consumer waits for its next refresh (about a second)
            # before fetching a newly assigned partition; asking for it now makes the first fetch immediate.
            consumer.list_topics(topic, timeout=self._kafka.metadata_timeout_s)
            self._known.add(topic)
        consumer.incremental_assign([TopicPartition(topic, partition, offset)])

    def unassign(self, topic: str, partitions: list[int]) -> None:
        keys = {(topic, p) for p in partitions} & self.assigned
        if not keys:
            return
        self.assigned -= keys
        self.paused -= keys
        self._commands.put(lambda c: self._unassign(c, topic, keys))

    def _unassign(self, consumer: Consumer, topic: str, keys: set[tuple[str, int]]) -> None:
        consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        self._known.discard(topic)

    def pause(self, topic: str, partitions: list[int]) -> None:
        keys = {(topic, p) for p in partitions} & (self.assigned - self.paused)
        if keys:
            self.paused |= keys
            self._commands.put(lambda c: c.pause([TopicPartition(t, p) for t, p in keys]))

    def resume(self, topic: str, partitions: list[int]) -> None:
        keys = {(topic, p) for p in partitions} & self.paused
        if keys:
            self.paused -= keys
            self._commands.put(lambda c: c.resume([TopicPartition(t, p) for t, p in keys]))

    @property
    def fetch_streams(self) -> int:
        """Partitions being fetched now: one per topic-partition, however many subscribers."""
        return len(self.assigned - self.paused)

    def _run(self) -> None:
        consumer = Consumer({**self._kafka.consumer_config(), "enable.partition.eof": True})
        try:
            while self._running.is_set():
                self._apply_commands(consumer)
                if not self.assigned:
                    try:
                        command = self._commands.get(timeout=0.1)
                    except queue.Empty:
                        continue
                    command(consumer)
                    continue
                while not self._in_flight.acquire(timeout=0.1):
                    if not self._running.is_set():
                        return
                batch = self._poll(consumer)
                if batch.records or batch.eof:
                    self._loop.call_soon_threadsafe(self._deliver, batch)
                else:
                    self._in_flight.release()
        except Exception:
            log.exception("the fetcher thread failed")
            raise
        finally:
            consumer.close()

    def _deliver(self, batch: FetchedBatch) -> None:
        """On the loop: hand the batch over, then let the fetcher post the next one."""
        try:
            self._on_batch(batch)
        finally:
            self._in_flight.release()

    def _apply_commands(self, consumer: Consumer) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                command(consumer)
            except Exception:
                log.exception("fetcher command failed")

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
            if error is None:
                batch.records.setdefault(key, []).append(record_of(message))
            elif error.code() == KafkaError._PARTITION_EOF:
                batch.eof.add(key)
            else:
                log.warning("kafka: %s", error.str())
        return batch
