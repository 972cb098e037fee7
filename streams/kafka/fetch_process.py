"""The worker's Kafka consumers, in child processes: what crashes in librdkafka ends only such a process.

Started by `ConsumerProcess` (streams/kafka/consumer_process.py) as `python -m streams.kafka.fetch_process FD`, where
FD is its end of a socket pair carrying pickled messages both ways; with `host` after FD, it hosts the historical
readers' consumers instead (`Host`, streams/kafka/host_process.py). It imports no Django and knows nothing of
streams: it applies the commands it is given, in order, polls, and sends back what it fetched.

A worker runs two: one fetches the topics without models and decodes nothing; the other, started as
`... FD decode SLOT`, fetches the topics with key/value models and decodes their records in place
(`InlineDecoder`, streams/kafka/inline_decoder.py, through `DecodeQueue`), saying in the shared SLOT which record it
is on, so that the worker can end it when a record runs past its budget and tell the next one which record the
last died on (decision 0012). No record being decoded holds up a topic that needs no decoding.

Commands (parent to child), tuples:
    ("config", {librdkafka settings}, batch size)  first, once
    ("assign", topic, partition, offset, epoch) (an assigned partition is moved to `offset`)
    ("unassign", [(topic, partition), ...])    resumed first: librdkafka keeps a pause across assignments
    ("pause" | "resume", [(topic, partition), ...])
    ("models", Models)                          decode with these from now on (after "config", and on change)
    ("poison", [(topic, partition, offset), ...])  never decode these: a process died on each
    ("taken",)                                  the parent took a batch: another may be sent
    ("stop",)                                   close the consumer and exit
Messages (child to parent), tuples:
    ("batch", {key: [record tuple, ...]}, [eof keys], {key: epoch})
    ("errors", {topic: error name})            the broker's errors about topics (e.g. the topic is gone)
    ("highs", {key: Kafka's end}, {key: Kafka's start})  at most every HIGHS_EVERY_S
    ("decoding", {(topic, reason): skipped}, {topic: decoded}, {key: why it waits})
                                               since the last one, at most every HIGHS_EVERY_S, when it changed

A record tuple is (partition, offset, key, value, headers, timestamp_ms), key and value decoded. A record that does
not decode is left out (the cache window has a gap there, as for a transaction marker). A partition whose
registry cannot be reached waits (`DecodeQueue`): paused in the consumer whatever the parent says (`Partitions`),
its records from the first undecoded one held and tried again every second, its end not reported until they are
out. The child exits when its socket closes (the parent went away).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Container, Iterable
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.kafka.decode_queue import DecodeQueue
from streams.kafka.decoder_process import RECURSION_LIMIT, Slot
from streams.kafka.decoding import Models
from streams.kafka.host_process import Host
from streams.kafka.inline_decoder import InlineDecoder
from streams.kafka.process_logs import log_to_stderr
from streams.kafka.records import RecordTuple, record_tuple

log = logging.getLogger("streams.kafka.fetch_process")

Key = tuple[str, int]
BATCH_BYTES = 4 * 1024 * 1024  # one batch sent to the parent holds about this much at most
MAX_BATCHES_IN_FLIGHT = 2
HIGHS_EVERY_S = 1.0  # how often Kafka's end of each partition is noted, for the fetch-lag metric
METADATA_TIMEOUT_S = 5.0
POLL_S = 0.05  # how long a poll waits for a record when nothing else is to be done
# Errors that mean the topic (or the partition) is not there: the parent checks the topic and drops it if gone.
TOPIC_GONE = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
TOPIC_GONE.add(getattr(KafkaError, "UNKNOWN_TOPIC_ID", KafkaError.UNKNOWN_TOPIC_OR_PART))


class Partitions:
    """The consumer's partitions, which its assignment and pauses follow, here only: the epoch each is assigned
    under (`polling`), those the parent paused, and those the decode queue blocks (paused besides, whatever the
    parent says, until the queue lets them go)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.polling: dict[Key, int] = {}  # the epoch each partition is assigned under
        self.known: dict[str, set[int]] = {}  # topics in the consumer's metadata cache, with their partitions
        self.paused: set[Key] = set()  # paused by the parent (a blocked partition is paused besides)
        self.blocked: set[Key] = set()  # paused while the queue blocks them

    def mine(self, keys: Iterable[Key]) -> list[Key]:
        """The partitions of `keys` this consumer has (a new process is given them again, in order)."""
        return [(topic, partition) for topic, partition in keys if (topic, partition) in self.polling]

    def assign(self, topic: str, partition: int, offset: int, epoch: int) -> None:
        if partition not in self.known.get(topic, ()):
            # Without the topic in its metadata cache, the consumer waits for its next refresh (about a second)
            # before fetching a newly assigned partition; asking for it now makes the first fetch immediate. A
            # partition added to a topic it knows would wait for the periodic refresh, minutes.
            with contextlib.suppress(KafkaException):  # unreachable: assigned all the same, fetched once it answers
                found = self.consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
                self.known[topic] = set(found.partitions) if found is not None else set()
        self.polling[(topic, partition)] = epoch
        self.consumer.incremental_assign([TopicPartition(topic, partition, offset)])

    def unassign(self, keys: Iterable[Key]) -> list[Key]:
        """Unassign the partitions of `keys` this consumer has; returns them."""
        if not (mine := self.mine(keys)):
            return mine
        partitions = _partitions(mine)
        self.consumer.resume(partitions)  # librdkafka would keep a pause across the next assignment
        self.consumer.incremental_unassign(partitions)
        for key in mine:
            del self.polling[key]
        for topic in {topic for topic, _ in mine} - {topic for topic, _ in self.polling}:
            self.known.pop(topic, None)
        self.paused.difference_update(mine)
        self.blocked.difference_update(mine)
        return mine

    def pause(self, keys: Iterable[Key]) -> None:
        if mine := self.mine(keys):
            self.paused.update(mine)
            self.consumer.pause(_partitions(mine))

    def resume(self, keys: Iterable[Key]) -> None:
        mine = self.mine(keys)
        self.paused.difference_update(mine)
        if fetch := [key for key in mine if key not in self.blocked]:  # a blocked partition stays paused
            self._fetch(fetch)

    def block(self, blocked: set[Key]) -> None:
        """Pause the partitions the queue now blocks, and fetch again those it no longer blocks, unless the parent
        paused them."""
        blocked = blocked & self.polling.keys()
        if stop := blocked - self.blocked:  # the consumer fetches nothing newer while they wait
            self.consumer.pause(_partitions(stop))
        if fetch := [key for key in self.blocked - blocked if key in self.polling and key not in self.paused]:
            self._fetch(fetch)
        self.blocked = blocked

    def _fetch(self, keys: list[Key]) -> None:
        """Fetch the partitions again, now. librdkafka's fetcher only notices a resumed partition at its next
        wake-up, up to a second later (a reconnect storm's clients all waited that second); a seek to the
        position the pause kept, the same offset, wakes it at once."""
        partitions = _partitions(keys)
        self.consumer.resume(partitions)
        with contextlib.suppress(KafkaException):
            # A partition paused before its first record has no position yet; it waits for the wake-up.
            for found in self.consumer.position(partitions):
                if found.offset >= 0:
                    self.consumer.seek(found)

    def watermarks(self) -> tuple[dict[Key, int], dict[Key, int]]:
        """Kafka's end and start of each assigned partition, from what librdkafka keeps of the last fetch response
        (the start moves when records are deleted or pass retention)."""
        highs, lows = {}, {}
        for key in self.polling:
            with contextlib.suppress(KafkaException):
                low, high = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                if high >= 0:
                    highs[key] = high
                if low >= 0:
                    lows[key] = low
        return highs, lows


class Fetch:
    """The child's loop: the parent's commands, then a poll, the decoder's turn and the watermarks, while it has
    partitions (`Partitions`) and room for a batch in flight."""

    def __init__(self, conn: Connection, config: dict[str, Any], batch_size: int, decoder: InlineDecoder) -> None:
        self.conn, self.batch_size = conn, batch_size
        self.consumer = Consumer({**config, "enable.partition.eof": True})
        self.partitions = Partitions(self.consumer)
        self.in_flight = 0
        self.highs_due = 0.0
        self.decoder = decoder
        self.queue = DecodeQueue()
        self.waiting_said: dict[Key, str] = {}

    def run(self) -> None:
        polling = self.partitions.polling
        try:
            while True:
                # Nothing assigned: nothing to do until the worker says something (None: no wake-ups meanwhile).
                wait = None if not polling else 0.1 if self.in_flight >= MAX_BATCHES_IN_FLIGHT else 0
                if not self.commands(wait):
                    return
                if polling and self.in_flight < MAX_BATCHES_IN_FLIGHT:
                    self.pump(*self.poll(POLL_S))
                    self.note_highs()
        except OSError:  # the parent went away while this process sent to it
            return
        finally:
            self.decoder.close()
            self.consumer.close()

    def commands(self, wait: float | None) -> bool:
        """Apply every command waiting (after up to `wait` s for the first, None: until one comes); False once the
        parent is gone."""
        try:
            ready = self.conn.poll(wait)
            while ready:
                command = self.conn.recv()
                if command[0] == "stop":
                    return False
                self.apply(command)
                ready = self.conn.poll(0)
        except (EOFError, OSError):
            return False
        return True

    def apply(self, command: tuple[Any, ...]) -> None:
        name, *args = command
        if name == "taken":
            self.in_flight = max(0, self.in_flight - 1)  # a batch of the process before this one counts not
            return
        try:
            getattr(self, f"do_{name}")(*args)
        except Exception:
            log.exception("fetcher command %s failed", name)

    def do_assign(self, topic: str, partition: int, offset: int, epoch: int) -> None:
        self.do_unassign([(topic, partition)])  # one assigned already is moved: assigned anew
        self.partitions.assign(topic, partition, offset, epoch)

    def do_unassign(self, keys: Iterable[Key]) -> None:
        self.queue.drop(self.partitions.unassign(keys))

    def do_pause(self, keys: Iterable[Key]) -> None:
        self.partitions.pause(keys)

    def do_resume(self, keys: Iterable[Key]) -> None:
        self.partitions.resume(keys)

    def do_poison(self, records: list[tuple[str, int, int]]) -> None:
        self.decoder.skip(records)

    def do_models(self, models: Models) -> None:
        if self.decoder.use(models):
            self.queue.retry_soon()  # a catalog may have changed its URL: try the waiting records again now

    def pump(self, records: dict[Key, list[RecordTuple]], eof: list[Key]) -> None:
        """Decode what the queue has due, send it with what the poll brought that needs no decoding (`records`, and
        the partitions whose end it reached, `eof`) in one batch, and pause or resume the partitions the queue
        blocks or no longer blocks. One batch, not two: a batch in flight until the worker takes it, the next
        poll's records would wait for that (MAX_BATCHES_IN_FLIGHT)."""
        if self.in_flight < MAX_BATCHES_IN_FLIGHT and (job := self.queue.job(self.batch_size, BATCH_BYTES)):
            decoded, ends = self.queue.done(self.decoder.decode(job))
            for key, found in decoded.items():  # after what the poll decoded of the partition, if anything
                records[key] = [*records.get(key, ()), *found]
            eof = [*eof, *ends]  # a partition with records queued is not in the poll's (`poll`)
        self.send_batch(records, eof)
        if self.queue.pending or self.partitions.blocked:
            self.partitions.block(self.queue.blocked())

    def send_batch(self, records: dict[Key, list[RecordTuple]], eof: list[Key]) -> None:
        polling = self.partitions.polling
        epochs = {key: polling[key] for key in [*records, *eof] if key in polling}
        if records or eof:
            self.in_flight += 1
            self.conn.send(("batch", records, eof, epochs))

    def note_decoding(self) -> None:
        """What was decoded and skipped since the last note, and which partitions wait, when anything changed."""
        skipped, decoded = self.decoder.tally.take()
        waiting = self.queue.waiting()
        if skipped or decoded or waiting != self.waiting_said:
            self.waiting_said = waiting
            self.conn.send(("decoding", skipped, decoded, waiting))

    def note_highs(self) -> None:
        """Kafka's end and start of each assigned partition (`Partitions.watermarks`), at most every
        HIGHS_EVERY_S, after what was decoded."""
        now = time.monotonic()
        if now < self.highs_due:
            return
        self.highs_due = now + HIGHS_EVERY_S
        self.note_decoding()
        self.conn.send(("highs", *self.partitions.watermarks()))

    def poll(self, wait: float) -> tuple[dict[Key, list[RecordTuple]], list[Key]]:
        """What a poll brought that goes out now: the records of partitions that are not decoded, those of decoded
        partitions with nothing queued, decoded at once, and the partitions whose end was reached with nothing of
        them queued; the records of partitions with some queued are queued behind them."""
        # poll() returns as soon as one message is ready; consume(n, 0) then drains what is already fetched.
        first = self.consumer.poll(wait)
        if first is None:
            return {}, []
        messages, size = [first], len(first.value() or b"")
        while size < BATCH_BYTES and len(messages) < self.batch_size:
            more = self.consumer.consume(min(100, self.batch_size - len(messages)), 0)
            if not more:
                break
            messages += more
            size += sum(len(m.value() or b"") for m in more)
        polling = self.partitions.polling
        fetched, ends, errors = _received(messages, polling)
        if errors:
            self.conn.send(("errors", errors))
        records: dict[Key, list[RecordTuple]] = {}
        for key, found in fetched.items():
            if key in self.queue:  # a partition's records go out in order: behind those queued
                self.queue.add(key, polling[key], found)
            elif self.decoder.decodes(key[0]):  # decoded at once, with no queue's bookkeeping (`DecodeQueue.now`)
                results = self.decoder.decode([(key[0], record) for record in found])
                if decoded := self.queue.now(key, polling[key], found, results):
                    records[key] = decoded
            else:
                records[key] = found
        return records, [key for key in ends if self.queue.eof(key)]


def _received(
    messages: list[Message], assigned: Container[Key]
) -> tuple[dict[Key, list[RecordTuple]], list[Key], dict[str, str]]:
    """What a poll brought: the records of each assigned partition, the assigned partitions whose end it reached,
    and the broker's errors about topics, by topic (each error logged)."""
    fetched: dict[Key, list[RecordTuple]] = {}
    ends: list[Key] = []
    errors: dict[str, str] = {}
    for message in messages:
        error = message.error()
        key = (message.topic() or "", message.partition() or 0)
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("kafka: %s", error.str())
            if error.code() in TOPIC_GONE and message.topic():
                errors[key[0]] = error.name()
            continue
        if key not in assigned:
            continue  # fetched before its partition was unassigned
        if error is None:
            fetched.setdefault(key, []).append(record_tuple(message))
        else:
            ends.append(key)
    return fetched, ends, errors


def _partitions(keys: Iterable[Key]) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for topic, partition in sorted(keys)]


def main() -> None:
    # A terminal's Ctrl-C reaches the worker's whole process group: the worker decides, and this process ends
    # when the worker's end of the socket closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log_to_stderr()
    conn = Connection(int(sys.argv[1]))
    if sys.argv[2:] == ["host"]:
        Host(conn).run()
        return
    if sys.argv[2:3] == ["decode"]:  # the decoded topics' fetch process: decodes in place, watched by the worker
        sys.setrecursionlimit(RECURSION_LIMIT)
        decoder = InlineDecoder(int(sys.argv[3]))
    else:  # decodes nothing: the worker gives this process no models (its slot is its own, for nobody to read)
        slot = os.memfd_create("unwatched-slot")
        os.ftruncate(slot, Slot.SIZE)
        decoder = InlineDecoder(slot)
    try:
        name, config, batch_size = conn.recv()
    except EOFError:
        return
    assert name == "config"  # noqa: S101
    Fetch(conn, config, batch_size, decoder).run()


if __name__ == "__main__":
    main()
