"""The fetcher: one Kafka consumer per web process for every topic-partition any stream reads, in a child process.

No consumer group: partitions are added with `incremental_assign()` at explicit offsets, so each is fetched
once however many subscribers read it. Partitions nobody reads are paused, and dropped after a while (the hub
decides). librdkafka reconnects by itself after a broker loss and keeps each partition's fetch position, so
nothing is skipped or fetched twice.

The consumer runs in a child process (streams/kafka/fetch_process.py, decision 0008): a crash inside librdkafka (a
topic deleted while it is fetched makes librdkafka 2.16 crash on some brokers) ends that process, not the web
worker and its streams. The fetcher then starts another one and assigns every partition again where the cache
ends, after the hub has checked which topics still exist. A thread of the worker reads what the child sends and
hands batches to the event loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from config.kafka_settings import KafkaSettings
from streams.kafka.client import Record
from streams.kafka.decoding import DecodeStats, Models
from streams.kafka.pipe import Receiver

log = logging.getLogger(__name__)

BatchHandler = Callable[["FetchedBatch"], None]
# Sent after every batch the loop takes: pickled once, as `Connection.send` would pickle it each time.
TAKEN = pickle.dumps(("taken",))
ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m streams...` imports its code, not an installed one
RESTART_BACKOFF_S = (0.0, 0.2, 0.5, 1.0, 2.0, 5.0)  # before the n-th restart in a row of a consumer that died young
YOUNG_S = 10.0  # a consumer process that dies sooner than this after its start died young
GIVE_UP_AFTER = 5  # restarts in a row of a consumer that dies young: then the process reports itself not ready

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


@dataclass
class FetchedBatch:
    records: dict[Key, list[Record]] = field(default_factory=dict)
    eof: set[Key] = field(default_factory=set)
    epochs: dict[Key, int] = field(default_factory=dict)  # the assignment each partition was polled under


class Fetcher:
    """The loop's side of the fetch: which partitions are assigned and in what state (`Fetch`). Each change is
    recorded here, then sent to the consumer's process (`ConsumerProcess`), which applies it in the same order.

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
        self.thread = ConsumerProcess(kafka, loop, self, batch_size=batch_size)
        self._epoch = 0
        self.partitions: dict[Key, Assignment] = {}  # read and changed on the loop thread only

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()

    def decode_with(self, models: Models) -> None:
        """Decode the records of topics with key/value models (streams/kafka/decoding.py) with `models` from now
        on; a consumer process started later is given them first."""
        if models != self.thread.models:
            self.thread.models = models
            self.thread.send(("models", models))

    @property
    def waiting(self) -> dict[Key, str]:
        """The partitions whose records wait for their schema registry, each with why (readiness reports them)."""
        return self.thread.waiting

    def assign(self, topic: str, partition: int, offset: int) -> None:
        """Fetch the partition from `offset` (a partition assigned already is moved there)."""
        key = (topic, partition)
        if key in self.partitions:
            self.unassign(topic, [partition])
        self._epoch += 1
        self.partitions[key] = Assignment(Fetch.FETCHING, self._epoch, offset)
        self.thread.send(("assign", topic, partition, offset, self._epoch))

    def reassign(self, topic: str) -> None:
        """Assign the topic's partitions again where the cache ends (a new consumer process has none)."""
        for key, found in self.partitions.items():
            if key[0] == topic:
                self._epoch += 1
                found.epoch = self._epoch
                self.thread.send(("assign", *key, found.next, found.epoch))
                if found.state is Fetch.PAUSED:
                    self.thread.send(("pause", [key]))

    def _reassign_all(self, topics: set[str]) -> None:
        for topic in topics:
            self.reassign(topic)

    def unassign(self, topic: str, partitions: Iterable[int]) -> None:
        keys = {(topic, p) for p in partitions} & self.partitions.keys()
        for key in keys:
            del self.partitions[key]
        if keys:
            self.thread.send(("unassign", sorted(keys)))

    def forget(self, topic: str) -> None:
        """Stop fetching every partition of the topic (it was deleted)."""
        self.unassign(topic, [p for t, p in self.partitions if t == topic])

    def paused(self, key: Key) -> bool:
        found = self.partitions.get(key)
        return found is not None and found.state is Fetch.PAUSED

    def pause(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.FETCHING, Fetch.PAUSED)

    def resume(self, topic: str, partitions: Iterable[int]) -> None:
        self._move(topic, partitions, Fetch.PAUSED, Fetch.FETCHING)

    def _move(self, topic: str, partitions: Iterable[int], before: Fetch, after: Fetch) -> None:
        """Partitions in state `before` go to `after`, here and then in the consumer."""
        keys = {(topic, p) for p in partitions if (found := self.partitions.get((topic, p))) and found.state is before}
        if keys:
            for key in keys:
                self.partitions[key].state = after
            self.thread.send(("pause" if after is Fetch.PAUSED else "resume", sorted(keys)))

    @property
    def fetch_streams(self) -> int:
        """Partitions being fetched now: one per topic-partition, however many subscribers."""
        return sum(1 for found in self.partitions.values() if found.state is Fetch.FETCHING)

    def _deliver(self, batch: FetchedBatch) -> None:
        """On the loop: hand the batch over, then let the consumer send the next one.

        What was polled under an assignment that has ended since (the partition was unassigned, or assigned
        again elsewhere, while the batch was on its way) is dropped: it would put records the new assignment
        does not expect into the cache."""
        try:
            for key, epoch in batch.epochs.items():
                found = self.partitions.get(key)
                if found is None or found.epoch != epoch:
                    batch.records.pop(key, None)
                    batch.eof.discard(key)
                elif records := batch.records.get(key):
                    found.next = records[-1].offset + 1
            if batch.records or batch.eof:
                self._on_batch(batch)
        finally:
            self.thread.send_pickled(TAKEN)

    def _restarted(self) -> None:
        """On the loop: a new consumer process runs, with nothing assigned."""
        self.on_restart({topic for topic, _ in self.partitions})


class ConsumerProcess:
    """The consumer's child process (streams/kafka/fetch_process.py) and the thread that reads what it sends: batches
    go to the loop with `call_soon_threadsafe`, at most MAX_BATCHES_IN_FLIGHT at a time (the child waits for the
    loop to take one before it sends another), Kafka's ends go to `highs`. When the child dies, another is
    started (after a backoff if it died young) and the fetcher is told."""

    def __init__(self, kafka: KafkaSettings, loop: asyncio.AbstractEventLoop, fetcher: Fetcher, *, batch_size: int):
        self._kafka, self._loop, self._fetcher, self._batch_size = kafka, loop, fetcher, batch_size
        self._lock = threading.Lock()  # guards _conn: the loop sends, the reader thread drops a dead child's
        self._conn: Connection | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._running = False
        self.highs: dict[Key, int] = {}  # Kafka's end of each partition, as the last fetch response said
        self.models = Models()  # what the consumer decodes with
        self.waiting: dict[Key, str] = {}  # partitions waiting for their registry, as the consumer last said
        self.restarts = 0  # consumer processes started again after one died
        self.young_deaths = 0  # in a row
        self._started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        """The fetch runs (a consumer that keeps dying young does not): without it no stream of the process
        receives anything (readiness reports it)."""
        lived = time.monotonic() - self._started_at >= YOUNG_S
        return self._running and (self.young_deaths < GIVE_UP_AFTER or lived)

    def start(self) -> None:
        self._running = True
        self._spawn()

    def stop(self) -> None:
        self._running = False
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(("stop",))  # the child closes its consumer and exits; the reader sees the socket close
        process, reader = self._process, self._reader
        if process is not None:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if reader is not None and reader is not threading.current_thread():
            reader.join(10)

    def send(self, message: tuple[Any, ...]) -> None:
        """Send a command to the consumer; dropped while none runs (a new one is given every assignment)."""
        self.send_pickled(pickle.dumps(message))

    def send_pickled(self, message: bytes) -> None:
        """`send`, for a command pickled already (as `Connection.recv` unpickles it)."""
        with self._lock:
            if self._conn is None:
                return
            with contextlib.suppress(OSError):  # the child died: the reader thread notices
                self._conn.send_bytes(message)

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "streams.kafka.fetch_process", str(theirs.fileno())],
                cwd=ROOT, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            )  # fmt: skip
        conn = Connection(ours.detach())
        conn.send(("config", self._kafka.fetcher_config(), self._batch_size))
        conn.send(("models", self.models))
        self.waiting = {}
        self._started_at = time.monotonic()
        with self._lock:
            self._conn = conn
        self._reader = threading.Thread(
            target=self._read, args=(conn, self._process), name="kafka-fetcher", daemon=True
        )
        self._reader.start()

    def _read(self, conn: Connection, process: subprocess.Popen[bytes]) -> None:
        deliver, call = self._fetcher._deliver, self._loop.call_soon_threadsafe
        receiver = Receiver(conn)
        while True:
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            try:
                if kind == "batch":
                    _, records, eof, epochs = message
                    batch = FetchedBatch(
                        records={key: [Record(*r) for r in found] for key, found in records.items()},
                        eof=set(eof),
                        epochs=epochs,
                    )
                    call(deliver, batch)
                elif kind == "highs":
                    self.highs = message[1]
                    call(self._fetcher.on_lows, message[2])
                elif kind == "errors":
                    call(self._fetcher.on_errors, set(message[1]))
                elif kind == "decoding":
                    DecodeStats.add(message[1], message[2])
                    self.waiting = message[3]
            except RuntimeError:  # the loop closed: the process is stopping
                break
        with self._lock:
            if self._conn is conn:
                self._conn = None
            conn.close()  # a child still running (the loop closed) sees its socket close and exits
        code = process.wait()
        if self._running:
            with contextlib.suppress(RuntimeError):  # the loop closed: the process is stopping
                call(self._lost, code)

    def _lost(self, code: int) -> None:
        """On the loop: the consumer process died; start another, after a backoff if it died young."""
        if not self._running:
            return
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        log.error("the fetcher's consumer process died (%s); starting another", how)
        young = time.monotonic() - self._started_at < YOUNG_S
        self.young_deaths = self.young_deaths + 1 if young else 0
        self._loop.call_later(RESTART_BACKOFF_S[min(self.young_deaths, len(RESTART_BACKOFF_S) - 1)], self._restart)

    def _restart(self) -> None:
        if not self._running:
            return
        self.restarts += 1
        self._spawn()
        self._fetcher._restarted()
