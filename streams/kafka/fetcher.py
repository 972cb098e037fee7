"""The fetcher: one Kafka consumer per web process for every topic-partition any stream reads, in a child process.

No consumer group: partitions are added with `incremental_assign()` at explicit offsets, so each is fetched
once however many subscribers read it. Partitions nobody reads are paused, and dropped after a while (the hub
decides). librdkafka reconnects by itself after a broker loss and keeps each partition's fetch position, so
nothing is skipped or fetched twice.

The consumer runs in a child process (streams/kafka/fetch_process.py, decision 0008): a crash inside librdkafka (a
topic deleted while it is fetched makes librdkafka 2.16 crash on some brokers) ends that process, not the web
worker and its streams. The fetcher then starts another one and assigns every partition again where the cache
ends, after the hub has checked which topics still exist (streams/kafka/consumer_process.py).

Two such processes, each with its consumer: one for the topics without key/value models, one for the topics with
them (started with the first such topic), which decodes their records in place and is watched (decision 0012):
whatever a record does while it is decoded, the topics without models never wait for it. A topic whose models
change moves from one to the other where its partitions' fetch stands.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from config.kafka_settings import KafkaSettings
from streams.kafka.client import Record
from streams.kafka.consumer_process import ConsumerProcess
from streams.kafka.decoding import Models

log = logging.getLogger(__name__)

BatchHandler = Callable[["FetchedBatch"], None]
# Sent after every batch the loop takes: pickled once, as `Connection.send` would pickle it each time.
TAKEN = pickle.dumps(("taken",))

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
    next: int  # the offset to fetch next: where a new consumer process starts it
    decoded: bool = False  # fetched by the decoded topics' process


@dataclass
class FetchedBatch:
    records: dict[Key, list[Record]] = field(default_factory=dict)
    eof: set[Key] = field(default_factory=set)
    epochs: dict[Key, int] = field(default_factory=dict)  # the assignment each partition was polled under


@dataclass
class Consumers:
    """The fetcher's two processes: `plain` fetches the topics without models, `decoding` those with models,
    started with the first of them."""

    plain: ConsumerProcess
    decoding: ConsumerProcess

    @property
    def running(self) -> tuple[ConsumerProcess, ...]:
        return tuple(process for process in (self.plain, self.decoding) if process.running)

    @property
    def alive(self) -> bool:
        """Every process runs (one that keeps dying young does not): readiness reports it."""
        return self.plain.running and all(process.alive for process in self.running)

    @property
    def restarts(self) -> int:
        return self.plain.restarts + self.decoding.restarts

    @property
    def highs(self) -> dict[Key, int]:
        """Kafka's end of each fetched partition, as the last fetch responses said."""
        return {**self.plain.highs, **self.decoding.highs}

    @property
    def waiting(self) -> dict[Key, str]:
        """The partitions whose records wait for their schema registry, each with why (readiness reports them)."""
        return self.decoding.waiting


class Fetcher:
    """The loop's side of the fetch: which partitions are assigned, in what state (`Fetch`) and by which of its two
    processes. Each change is recorded here, then sent to that process (`ConsumerProcess`), which applies it in
    the same order.

    `on_restart(topics)` is called when a new consumer process replaced one that died: it must call
    `reassign(topic)` for each topic still to fetch (the hub first checks that it exists). `on_errors(topics)`
    is called with the topics the broker reported unknown, `on_lows(starts)` with Kafka's start of each fetched
    partition, about every second."""

    def __init__(
        self,
        kafka: KafkaSettings,
        loop: asyncio.AbstractEventLoop,
        on_batch: BatchHandler,
        *,
        batch_size: int = 500,
        on_restart: Callable[[set[str]], None] | None = None,
        on_errors: Callable[[set[str]], None] | None = None,
        on_lows: Callable[[dict[Key, int]], None] | None = None,
    ) -> None:
        self._on_batch = on_batch
        self.on_restart = on_restart or self._reassign_all
        self.on_errors = on_errors or (lambda topics: None)
        self.on_lows = on_lows or (lambda lows: None)
        self.consumers = Consumers(
            ConsumerProcess(kafka, loop, self, batch_size=batch_size),
            ConsumerProcess(kafka, loop, self, batch_size=batch_size, decodes=True),
        )
        self.plain, self.decoding = self.consumers.plain, self.consumers.decoding
        self.models = Models()
        self._epoch = 0
        self.partitions: dict[Key, Assignment] = {}  # read and changed on the loop thread only

    def start(self) -> None:
        self.plain.start()

    def stop(self) -> None:
        for process in self.consumers.running:
            process.stop()

    def decode_with(self, models: Models) -> None:
        """Decode the records of topics with key/value models (streams/kafka/decoding.py) with `models` from now
        on, in the decoding process; a topic that gains or loses its models moves to the other process, from where
        its fetch stands."""
        if models == self.models:
            return
        self.models = self.decoding.models = models
        self.decoding.send(("models", models))
        for key, found in self.partitions.items():
            if found.decoded != models.decodes(key[0]):
                self._owner(found).send(("unassign", [key]))
                self._epoch += 1
                found.epoch, found.decoded = self._epoch, not found.decoded
                self._give(key, found)

    def assign(self, topic: str, partition: int, offset: int) -> None:
        """Fetch the partition from `offset` (a partition assigned already is moved there)."""
        key = (topic, partition)
        if key in self.partitions:
            self.unassign(topic, [partition])
        self._epoch += 1
        found = self.partitions[key] = Assignment(Fetch.FETCHING, self._epoch, offset, self.models.decodes(topic))
        self._give(key, found)

    def _owner(self, found: Assignment) -> ConsumerProcess:
        return self.decoding if found.decoded else self.plain

    def _give(self, key: Key, found: Assignment) -> None:
        """Assign the partition to its process where its fetch stands (starting the decoding one if need be)."""
        owner = self._owner(found)
        if not owner.running and self.plain.running:  # the decoding one starts with the first topic it fetches
            owner.start()
        owner.send(("assign", *key, found.next, found.epoch))
        if found.state is Fetch.PAUSED:
            owner.send(("pause", [key]))

    def reassign(self, topic: str) -> None:
        """Assign the topic's partitions again where the cache ends (a new consumer process has none)."""
        for key, found in self.partitions.items():
            if key[0] == topic:
                self._epoch += 1
                found.epoch = self._epoch
                self._give(key, found)

    def _reassign_all(self, topics: set[str]) -> None:
        for topic in topics:
            self.reassign(topic)

    def unassign(self, topic: str, partitions: Iterable[int]) -> None:
        keys = {(topic, p) for p in partitions} & self.partitions.keys()
        self._send_each("unassign", {key: self.partitions.pop(key) for key in keys})

    def _send_each(self, command: str, found: dict[Key, Assignment]) -> None:
        """Send `command` with its partitions to the process of each."""
        for process in (self.plain, self.decoding):
            if keys := sorted(key for key, assignment in found.items() if self._owner(assignment) is process):
                process.send((command, keys))

    def forget(self, topic: str) -> None:
        """Stop fetching every partition of the topic (it was deleted)."""
        self.unassign(topic, [p for t, p in self.partitions if t == topic])

    def paused(self, key: Key) -> bool:
        return (found := self.partitions.get(key)) is not None and found.state is Fetch.PAUSED

    def pause(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.FETCHING, Fetch.PAUSED)

    def resume(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.PAUSED, Fetch.FETCHING)

    def _move(self, topic: str, partitions: Iterable[int], before: Fetch, after: Fetch) -> None:
        """Partitions in state `before` go to `after`, here and then in the consumer."""
        moved = {
            (topic, p): found
            for p in partitions
            if (found := self.partitions.get((topic, p))) and found.state is before
        }
        for found in moved.values():
            found.state = after
        self._send_each("pause" if after is Fetch.PAUSED else "resume", moved)

    @property
    def fetch_streams(self) -> int:
        """Partitions being fetched now: one per topic-partition, however many subscribers."""
        return sum(1 for found in self.partitions.values() if found.state is Fetch.FETCHING)

    def deliver(
        self, source: ConsumerProcess, records: dict[Key, list[Record]], eof: set[Key], epochs: dict[Key, int]
    ) -> None:
        """On the loop: hand a batch from `source` over, then let it send the next one.

        What was polled under an assignment that has ended since (the partition was unassigned, or assigned
        again elsewhere, while the batch was on its way) is dropped: it would put records the new assignment
        does not expect into the cache."""
        try:
            _keep_current(self.partitions, records, eof, epochs)
            if records or eof:
                self._on_batch(FetchedBatch(records, eof, epochs))
        finally:
            source.send_pickled(TAKEN)

    def restarted(self, source: ConsumerProcess) -> None:
        """On the loop: a new consumer process runs in place of `source`, with nothing assigned."""
        self.on_restart({key[0] for key, found in self.partitions.items() if self._owner(found) is source})


def _keep_current(
    partitions: dict[Key, Assignment], records: dict[Key, list[Record]], eof: set[Key], epochs: dict[Key, int]
) -> None:
    """Drop from a batch what was polled under an assignment that has ended; note where the others' fetch stands."""
    for key, epoch in epochs.items():
        found = partitions.get(key)
        if found is None or found.epoch != epoch:
            records.pop(key, None)
            eof.discard(key)
        elif fetched := records.get(key):
            found.next = fetched[-1].offset + 1
